#include "server/service/data_service.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "server/service/raw_unary.h"

namespace batchd::server {

DataServiceImpl::DataServiceImpl(DatasetMap datasets,
                                 DataServiceOptions options,
                                 Pipeline* pipeline, JobStats* stats,
                                 TrainerReports* reports)
    : datasets_(std::move(datasets)),
      options_(std::move(options)),
      budget_(options_.max_buffer_bytes, options_.max_job_buffer_bytes,
              options_.max_identity_buffer_bytes,
              options_.min_stream_buffer_bytes),
      own_batches_(pipeline),
      stream_context_{
          .session = {.datasets = &datasets_,
                      .limits = options_.limits,
                      .default_window = options_.default_window,
                      .max_window = options_.max_window,
                      .daemon_info = options_.daemon_info,
                      .metrics = options_.metrics,
                      .shared_memory = options_.shared_memory,
                      .batches = options_.shared_batches != nullptr
                                     ? static_cast<BatchSource*>(
                                           options_.shared_batches)
                                     : &own_batches_,
                      .stats = stats,
                      .reports = reports,
                      .budget = &budget_,
                      .admission = this},
          .registry = this},
      admission_(AdmissionTable::Limits{
          .max_open_streams = options_.max_open_streams,
          .max_streams_per_identity = options_.max_streams_per_identity,
          .max_planless_per_connection =
              options_.max_planless_streams_per_connection,
          .open_timeout = options_.open_timeout}),
      reaper_([this] { ReapPlanlessStreams(); }) {}

DataServiceImpl::~DataServiceImpl() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  reaper_.join();
}

void DataServiceImpl::ReapPlanlessStreams() {
  // A quarter of a second's lateness is nothing next to the deadline, and
  // the loop costs nothing measurable.
  constexpr absl::Duration kTick = absl::Milliseconds(250);
  const absl::Status timed_out = absl::DeadlineExceededError(
      absl::StrCat("no plan within --open-timeout (",
                   absl::FormatDuration(options_.open_timeout),
                   "): send `open` with a Plan as the stream's first "
                   "message"));
  absl::MutexLock lock(&mu_);
  while (!mu_.AwaitWithTimeout(absl::Condition(&stopping_), kTick)) {
    std::vector<ToEnd> overdue;
    for (AdmissionTable::Handle handle : admission_.Overdue(absl::Now())) {
      // Registered streams are alive: OnDone unregisters before it drops
      // gRPC's reference.
      auto* stream = const_cast<BatchStream*>(
          static_cast<const BatchStream*>(handle));
      stream->AddRef();
      overdue.push_back(
          ToEnd{stream, AdmissionTable::Ended{stream, timed_out,
                                              /*planless=*/true,
                                              "planless_stream_timeout"}});
    }
    if (overdue.empty()) continue;
    mu_.Unlock();
    EndStreams(std::move(overdue));
    mu_.Lock();
  }
}

void DataServiceImpl::EndStreams(std::vector<ToEnd> streams) {
  for (ToEnd& end : streams) {
    if (ServerMetrics* metrics = options_.metrics) {
      metrics->BoundHit(end.how.bound);
    }
    if (!end.how.planless) {
      end.stream->Cancel(end.how.status);
    } else if (!end.stream->CancelIfNoPlan(end.how.status)) {
      absl::MutexLock lock(&mu_);
      admission_.Restore(end.stream);
    }
    end.stream->Unref();
  }
}

void DataServiceImpl::AddSendTime(absl::Duration send) {
  send_nanos_ += static_cast<uint64_t>(absl::ToInt64Nanoseconds(send));
}

double DataServiceImpl::send_seconds() const {
  return send_nanos_.load() * 1e-9;
}

grpc::ServerUnaryReactor* DataServiceImpl::ListDatasets(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return ServeRawUnary<batchd::v1::ListDatasetsRequest,
                       batchd::v1::ListDatasetsResponse>(
      context, *request, response, Authenticate(*context).status(),
      [this](const batchd::v1::ListDatasetsRequest& /*request*/,
             batchd::v1::ListDatasetsResponse* list) {
        for (const auto& [name, dataset] : datasets_) {
          batchd::v1::DatasetInfo* info = list->add_datasets();
          info->set_name(name);
          info->set_num_samples(dataset->size());
          for (const std::string& c : dataset->class_names()) {
            info->add_class_names(c);
          }
          for (uint64_t samples : *dataset->shard_samples()) {
            info->add_shard_samples(samples);
          }
        }
        return grpc::Status::OK;
      });
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>*
DataServiceImpl::StreamBatches(grpc::CallbackServerContext* context) {
  return new BatchStream(&stream_context_, Authenticate(*context),
                         context->peer());
}

absl::StatusOr<Caller> DataServiceImpl::Authenticate(
    const grpc::CallbackServerContext& context) const {
  if (options_.authorizer == nullptr) return Caller{};
  return options_.authorizer->Authenticate(context);
}

absl::Status DataServiceImpl::AddJobStream(const std::string& job) {
  absl::MutexLock lock(&mu_);
  uint32_t& open = job_streams_[job];
  if (open >= options_.max_streams_per_job) {
    return absl::ResourceExhaustedError(
        absl::StrCat("job \"", job, "\" already has ", open,
                     " streams open, the most --max-streams-per-job allows; "
                     "close one or raise --max-streams-per-job"));
  }
  ++open;
  return absl::OkStatus();
}

void DataServiceImpl::RemoveJobStream(const std::string& job) {
  absl::MutexLock lock(&mu_);
  auto it = job_streams_.find(job);
  if (it != job_streams_.end() && --it->second == 0) job_streams_.erase(it);
}

absl::Status DataServiceImpl::AddStream(BatchStream* stream,
                                        const std::string& identity,
                                        const std::string& peer) {
  std::vector<ToEnd> ended;
  {
    absl::MutexLock lock(&mu_);
    if (draining_.load()) return DrainingRefusalLocked();
    AdmissionTable::Decision decision =
        admission_.Admit(stream, identity, peer, absl::Now());
    if (!decision.status.ok()) {
      if (ServerMetrics* metrics = options_.metrics) {
        metrics->BoundHit(decision.refused_by);
      }
      return decision.status;
    }
    streams_.insert(stream);
    for (AdmissionTable::Ended& end : decision.ended) {
      // Registered streams are alive: OnDone unregisters before it drops
      // gRPC's reference.
      auto* other = const_cast<BatchStream*>(
          static_cast<const BatchStream*>(end.stream));
      other->AddRef();
      ended.push_back(ToEnd{other, std::move(end)});
    }
  }
  // Not under mu_: ending a stream may run its reactions inline, and they
  // unregister it.
  EndStreams(std::move(ended));
  return absl::OkStatus();
}

void DataServiceImpl::PlanArrived(BatchStream* stream) {
  absl::MutexLock lock(&mu_);
  admission_.PlanArrived(stream);
}

void DataServiceImpl::RemoveStream(BatchStream* stream) {
  absl::MutexLock lock(&mu_);
  admission_.Remove(stream);
  streams_.erase(stream);
}

std::vector<BatchStream*> DataServiceImpl::RefStreams() {
  absl::MutexLock lock(&mu_);
  std::vector<BatchStream*> streams;
  streams.reserve(streams_.size());
  for (BatchStream* stream : streams_) {
    // Registered streams are alive: OnDone unregisters before it drops
    // gRPC's reference.
    stream->AddRef();
    streams.push_back(stream);
  }
  return streams;
}

std::string DataServiceImpl::DrainMessage() const {
  absl::MutexLock lock(&mu_);
  return absl::StrCat("batchd is draining (", drain_reason_, ")");
}

absl::Status DataServiceImpl::DrainingRefusal() const {
  absl::MutexLock lock(&mu_);
  return DrainingRefusalLocked();
}

absl::Status DataServiceImpl::DrainingRefusalLocked() const {
  return absl::UnavailableError(absl::StrCat(
      "batchd is draining (", drain_reason_, "); connect to another daemon"));
}

void DataServiceImpl::BeginDrain(absl::string_view reason) {
  {
    absl::MutexLock lock(&mu_);
    if (draining_.load()) return;
    drain_reason_ = std::string(reason);
    draining_.store(true);
  }
  for (BatchStream* stream : RefStreams()) {
    stream->Wake();
    stream->Unref();
  }
}

size_t DataServiceImpl::open_streams() const {
  absl::MutexLock lock(&mu_);
  return streams_.size();
}

size_t DataServiceImpl::AwaitStreamsDone(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return streams_.empty();
  };
  mu_.AwaitWithDeadline(absl::Condition(&done), deadline);
  return streams_.size();
}

void DataServiceImpl::CancelStreams(const absl::Status& status) {
  for (BatchStream* stream : RefStreams()) {
    stream->Cancel(status);
    stream->Unref();
  }
}

}  // namespace batchd::server
