#include "server/service/admin_service.h"

#include <malloc.h>
#include <pthread.h>

#include <map>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/service/raw_unary.h"

namespace batchd::server {

AdminServiceImpl::AdminServiceImpl(Pipeline* pipeline, DataServiceImpl* data,
                                   JobStats* stats, TrainerReports* reports,
                                   Autoscaler* autoscaler,
                                   SharedBatches* shared_batches,
                                   int max_workers)
    : pipeline_(pipeline),
      data_(data),
      stats_(stats),
      reports_(reports),
      autoscaler_(autoscaler),
      shared_batches_(shared_batches),
      max_workers_(max_workers),
      started_(absl::Now()) {
  sampler_ = std::thread([this] { SampleLoop(); });
}

AdminServiceImpl::~AdminServiceImpl() {
  stop_.Notify();
  sampler_.join();
}

void AdminServiceImpl::SampleLoop() {
  pthread_setname_np(pthread_self(), "batchd-sample");
  bool served_since_trim = false;
  do {
    // Once the last stream has gone, hand freed memory back to the kernel:
    // the malloc tuning (common/malloc_tuning.h) keeps freed heap memory
    // for the next batches, which is right while streams run and wrong for
    // an idle daemon that shares its host.
    if (data_->open_streams() > 0) {
      served_since_trim = true;
    } else if (served_since_trim) {
      served_since_trim = false;
      malloc_trim(0);
    }
    Utilisation u{pipeline_->workers().busy_time(),
                  pipeline_->workers().alive_time()};
    {
      absl::MutexLock lock(&mu_);
      samples_.push_back(u);
      if (samples_.size() > kSamples) samples_.pop_front();
    }
    timeline_.Add(Status(), absl::Now());
  } while (!stop_.WaitForNotificationWithTimeout(absl::Seconds(1)));
}

batchd::v1::ServerStatus AdminServiceImpl::Status() {
  batchd::v1::ServerStatus status;
  WorkerPool& workers = pipeline_->workers();
  const Utilisation now{workers.busy_time(), workers.alive_time()};
  Utilisation oldest{absl::ZeroDuration(), absl::ZeroDuration()};
  {
    absl::MutexLock lock(&mu_);
    if (!samples_.empty()) oldest = samples_.front();
  }
  const double alive = absl::ToDoubleSeconds(now.alive - oldest.alive);
  status.set_workers(static_cast<uint32_t>(workers.num_workers()));
  status.set_busy_fraction(
      alive > 0 ? absl::ToDoubleSeconds(now.busy - oldest.busy) / alive : 0);
  status.set_queued_samples(workers.queued());
  status.set_buffer_bytes_reserved(data_->budget().reserved());
  status.set_max_buffer_bytes(data_->budget().limit());
  status.set_buffer_bytes_idle(pipeline_->idle_buffer_bytes());
  const PipelineCounters counters = pipeline_->counters();
  batchd::v1::StageSeconds* stages = status.mutable_stage_seconds();
  stages->set_read(counters.read_seconds);
  stages->set_decode(counters.decode_seconds);
  stages->set_transform(counters.transform_seconds);
  stages->set_augment(counters.augment_seconds);
  stages->set_send(data_->send_seconds());
  status.set_uptime_seconds(absl::ToDoubleSeconds(absl::Now() - started_));
  status.set_worker_busy_seconds(absl::ToDoubleSeconds(now.busy));
  status.set_worker_alive_seconds(absl::ToDoubleSeconds(now.alive));
  status.set_samples_decoded(counters.samples_decoded);
  status.set_samples_substituted(counters.samples_substituted);
  *status.mutable_daemon() = data_->daemon_info();
  status.set_draining(data_->draining());
  stats_->Fill(&status);
  const std::map<std::string, batchd::v1::TrainerLoad> loads =
      reports_->Loads(absl::Now());
  for (batchd::v1::JobStatus& job : *status.mutable_jobs()) {
    auto it = loads.find(job.job());
    if (it != loads.end()) *job.mutable_trainer() = it->second;
  }
  autoscaler_->Fill(&status);
  if (std::optional<ReadCacheCounts> cache = pipeline_->read_cache_counts()) {
    batchd::v1::ReadCacheStatus* out = status.mutable_read_cache();
    out->set_capacity_bytes(pipeline_->read_cache_bytes());
    out->set_bytes(cache->bytes);
    out->set_hits(cache->hits);
    out->set_misses(cache->misses);
    out->set_coalesced(cache->coalesced);
    out->set_evictions(cache->evictions);
  }
  if (std::optional<DecodedCacheCounts> cache =
          pipeline_->decoded_cache_counts()) {
    batchd::v1::DecodedCacheStatus* out = status.mutable_decoded_cache();
    out->set_capacity_bytes(pipeline_->decoded_cache_bytes());
    out->set_bytes(cache->bytes);
    out->set_hits(cache->hits);
    out->set_misses(cache->misses);
    out->set_coalesced(cache->coalesced);
    out->set_evictions(cache->evictions);
  }
  if (shared_batches_ != nullptr) {
    shared_batches_->Fill(status.mutable_shared_batches());
  }
  if (const ShardCache* cache = pipeline_->shard_cache()) {
    const ShardCacheStats c = cache->stats();
    batchd::v1::ShardCacheStatus* out = status.mutable_shard_cache();
    out->set_disk_bytes(c.disk_bytes);
    out->set_disk_limit_bytes(c.disk_limit);
    out->set_ram_bytes(c.ram_bytes);
    out->set_ram_limit_bytes(c.ram_limit);
    out->set_shards(c.shards);
    out->set_hits(c.hits);
    out->set_ram_hits(c.ram_hits);
    out->set_misses(c.misses);
    out->set_downloads(c.downloads);
    out->set_downloaded_bytes(c.downloaded_bytes);
    out->set_download_failures(c.download_failures);
    out->set_uncached_reads(c.uncached_reads);
    out->set_evictions(c.evictions);
    out->set_prefetches(c.prefetches);
    out->set_prefetches_dropped(c.prefetches_dropped);
    out->set_whole_choices(c.whole_choices);
    out->set_range_choices(c.range_choices);
    out->set_prefetches_declined(c.prefetches_declined);
    out->set_served_bytes(c.served_bytes);
    out->set_range_bytes(c.range_bytes);
    out->set_forecast_shard_bytes(c.forecast_shard_bytes);
    out->set_forecast_reads(c.forecast_reads);
    out->set_prefetches_in_flight(c.prefetches_in_flight);
    out->set_prefetch_depth_reads(c.prefetch_depth_reads);
    out->set_range_prefetches(c.range_prefetches);
    out->set_range_prefetch_hits(c.range_prefetch_hits);
    out->set_range_prefetches_unread(c.range_prefetches_unread);
    out->set_range_prefetches_dropped(c.range_prefetches_dropped);
  }
  if (const ObjectStoreCounters* store = pipeline_->store_counters()) {
    batchd::v1::ObjectStoreStatus* out = status.mutable_object_store();
    out->set_requests(store->requests());
    out->set_bytes(store->bytes());
    out->set_failures(store->failures());
    out->set_changed_objects(store->changed());
    const absl::Time now = absl::Now();
    for (const RecentStoreFault& fault : store->RecentFaults(now)) {
      batchd::v1::StoreFaultStatus* f = out->add_recent_faults();
      f->set_dataset(fault.dataset);
      f->set_slow(fault.slow);
      f->set_count(fault.count);
      f->set_seconds_since_latest(absl::ToDoubleSeconds(now - fault.latest));
      f->set_latest(fault.what);
    }
  }
  return status;
}

grpc::ServerUnaryReactor* AdminServiceImpl::GetStatus(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return ServeRawUnary<batchd::v1::GetStatusRequest, batchd::v1::ServerStatus>(
      context, *request, response, data_->Authenticate(*context).status(),
      [this](const batchd::v1::GetStatusRequest& /*request*/,
             batchd::v1::ServerStatus* status) {
        *status = Status();
        return grpc::Status::OK;
      });
}

grpc::ServerUnaryReactor* AdminServiceImpl::SetWorkers(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  absl::StatusOr<Caller> caller = data_->Authenticate(*context);
  return ServeRawUnary<batchd::v1::SetWorkersRequest,
                       batchd::v1::SetWorkersResponse>(
      context, *request, response,
      caller.ok() ? CheckAdmin(*caller, "SetWorkers") : caller.status(),
      [this](const batchd::v1::SetWorkersRequest& set,
             batchd::v1::SetWorkersResponse* changed) {
        const uint32_t wanted = set.workers();
        if (wanted < 1 || wanted > static_cast<uint32_t>(max_workers_)) {
          return grpc::Status(
              grpc::StatusCode::INVALID_ARGUMENT,
              absl::StrCat("workers is ", wanted, "; it must be 1..",
                           max_workers_, " (--max-workers)"));
        }
        WorkerPool& workers = pipeline_->workers();
        changed->set_previous(static_cast<uint32_t>(workers.num_workers()));
        workers.SetNumWorkers(static_cast<int>(wanted));
        changed->set_workers(wanted);
        return grpc::Status::OK;
      });
}

}  // namespace batchd::server
