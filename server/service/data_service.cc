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
      budget_(options_.max_buffer_bytes, options_.max_job_buffer_bytes),
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
    const absl::Time now = absl::Now();
    std::vector<BatchStream*> overdue;
    for (auto& [stream, awaiting] : streams_) {
      if (awaiting.has_value() && awaiting->deadline <= now) {
        stream->AddRef();
        overdue.push_back(stream);
        PlanArrivedLocked(stream);  // counted once, here
      }
    }
    if (overdue.empty()) continue;
    mu_.Unlock();
    for (BatchStream* stream : overdue) {
      if (ServerMetrics* metrics = options_.metrics) {
        metrics->BoundHit("planless_stream_timeout");
      }
      stream->CancelIfNoPlan(timed_out);
      stream->Unref();
    }
    mu_.Lock();
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
                                        const std::string& peer_host) {
  absl::MutexLock lock(&mu_);
  if (draining_.load()) return DrainingRefusalLocked();
  if (streams_.size() >= options_.max_open_streams) {
    return absl::ResourceExhaustedError(
        absl::StrCat("batchd already has ", streams_.size(),
                     " StreamBatches calls open, its --max-open-streams "
                     "limit; close a stream, retry later or on another "
                     "daemon, or raise --max-open-streams"));
  }
  uint32_t& planless = planless_by_host_[peer_host];
  if (planless >= options_.max_planless_streams_per_peer) {
    if (ServerMetrics* metrics = options_.metrics) {
      metrics->BoundHit("planless_streams_per_peer");
    }
    return absl::ResourceExhaustedError(
        absl::StrCat("host ", peer_host, " already has ", planless,
                     " StreamBatches calls open that have not sent their "
                     "plan, the most --max-planless-streams-per-peer "
                     "allows; send `open` first on the streams you have"));
  }
  ++planless;
  streams_.emplace(stream, AwaitingPlan{peer_host,
                                        absl::Now() + options_.open_timeout});
  return absl::OkStatus();
}

void DataServiceImpl::PlanArrived(BatchStream* stream) {
  absl::MutexLock lock(&mu_);
  PlanArrivedLocked(stream);
}

void DataServiceImpl::PlanArrivedLocked(BatchStream* stream) {
  auto it = streams_.find(stream);
  if (it == streams_.end() || !it->second.has_value()) return;
  auto host = planless_by_host_.find(it->second->peer_host);
  if (--host->second == 0) planless_by_host_.erase(host);
  it->second.reset();
}

void DataServiceImpl::RemoveStream(BatchStream* stream) {
  absl::MutexLock lock(&mu_);
  PlanArrivedLocked(stream);
  streams_.erase(stream);
}

std::vector<BatchStream*> DataServiceImpl::RefStreams() {
  absl::MutexLock lock(&mu_);
  std::vector<BatchStream*> streams;
  streams.reserve(streams_.size());
  for (const auto& entry : streams_) {
    BatchStream* stream = entry.first;
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
