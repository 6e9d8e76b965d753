#include "server/metrics/server_metrics.h"

#include "absl/strings/ascii.h"

namespace batchd::server {

using Type = MetricWriter::Type;

ServerMetrics::ServerMetrics()
    : substitutions_(registry_.AddCounter(
          "batchd_substitutions_total",
          "Samples replaced by a deterministic substitute, by reason "
          "(lower-case SubstitutionReason).",
          {"reason"})),
      damaged_(registry_.AddCounter(
          "batchd_damaged_samples_decoded_total",
          "Damaged samples delivered as decoded, grey where data was "
          "missing (--corrupt-policy decode), by the damage (truncated or "
          "corrupt).",
          {"reason"})),
      content_mismatches_(registry_.AddCounter(
          "batchd_content_mismatches_total",
          "Samples read whose content is not the image format their name's "
          "extension says (decoded by content, or substituted when not an "
          "image), by the format named and the content found.",
          {"named", "content"})),
      rejected_(registry_.AddCounter(
          "batchd_rejected_requests_total",
          "Batch requests and streams refused, by gRPC status code.",
          {"code"})),
      stages_(registry_.AddHistogram(
          "batchd_stage_seconds",
          "Time per pipeline stage, seconds: read, decode, transform and "
          "augment (the plan's augmentation ops) per sample; assemble (request accepted to batch complete) and send "
          "(batch complete to last chunk handed to gRPC) per batch.",
          {"stage"}, kLatencyBucketsSeconds)),
      read_(stages_.With({"read"})),
      decode_(stages_.With({"decode"})),
      transform_(stages_.With({"transform"})),
      augment_(stages_.With({"augment"})),
      assemble_(stages_.With({"assemble"})),
      send_(stages_.With({"send"})),
      store_request_(registry_
                         .AddHistogram("batchd_object_store_request_seconds",
                                       "Range requests to the object store "
                                       "(remote shards), seconds, retries "
                                       "included.",
                                       {}, kLatencyBucketsSeconds)
                         .With({})),
      shard_download_(registry_
                          .AddHistogram("batchd_shard_download_seconds",
                                        "Whole-shard downloads into the "
                                        "shard cache (--cache-dir), seconds.",
                                        {}, kLatencyBucketsSeconds)
                          .With({})),
      timeline_render_(
          registry_
              .AddHistogram("batchd_timeline_render_seconds",
                            "CPU time of each render of /api/timeline and "
                            "the live page, seconds: at most one a second, "
                            "however many poll.",
                            {}, kLatencyBucketsSeconds)
              .With({})),
      outstanding_(registry_
                       .AddGauge("batchd_batches_outstanding",
                                 "Batches accepted and not yet fully sent, "
                                 "over all streams.")
                       .With({})),
      shared_memory_bytes_(
          registry_
              .AddGauge("batchd_shared_memory_bytes",
                        "Trainer memory mapped for same-host shared memory "
                        "over all streams, bytes (counted in the buffer "
                        "budget).")
              .With({})),
      shared_memory_attach_(registry_.AddCounter(
          "batchd_shared_memory_attach_total",
          "Shared-memory side-channel handshakes, by result: attached, or "
          "the refusal's gRPC status code.",
          {"result"})),
      bound_hits_(registry_.AddCounter(
          "batchd_bound_hits_total",
          "Times a resource bound of the daemon was reached, by bound "
          "(RELIABILITY.md, \"Resource model\").",
          {"bound"})),
      tls_handshake_failures_(
          registry_
              .AddCounter("batchd_tls_handshake_failures_total",
                          "TLS handshakes that failed (plaintext clients, "
                          "unknown CAs, scanners); gRPC logs a few of them.")
              .With({})) {}

void ServerMetrics::BoundHit(const char* bound) {
  bound_hits_.With({bound}).Increment();
}

void ServerMetrics::SetJobLimits(const batchd::v1::DaemonInfo& info) {
  registry_
      .AddGauge("batchd_job_max_streams",
                "The most streams one job may have open "
                "(--max-streams-per-job); more are refused with "
                "RESOURCE_EXHAUSTED.")
      .With({})
      .Set(info.max_streams_per_job());
  registry_
      .AddGauge("batchd_job_max_buffer_bytes",
                "The most batch-buffer bytes one job's streams may reserve "
                "(--max-job-buffer-share of --max-buffer-bytes).")
      .With({})
      .Set(static_cast<double>(info.max_job_buffer_bytes()));
}

void ServerMetrics::SharedMemoryAttach(const char* result) {
  shared_memory_attach_.With({result}).Increment();
}

void ServerMetrics::SampleSubstituted(batchd::v1::SubstitutionReason reason) {
  substitutions_
      .With({absl::AsciiStrToLower(batchd::v1::SubstitutionReason_Name(reason))})
      .Increment();
}

void ServerMetrics::SampleDecodedDamaged(
    batchd::v1::SubstitutionReason reason) {
  damaged_
      .With({absl::AsciiStrToLower(batchd::v1::SubstitutionReason_Name(reason))})
      .Increment();
}

void ServerMetrics::ContentMismatch(const char* named, const char* content) {
  content_mismatches_.With({named, content}).Increment();
}

void ServerMetrics::RequestRejected(int grpc_code) {
  rejected_.With({GrpcCodeName(grpc_code)}).Increment();
}

void ServerMetrics::WriteStatus(const batchd::v1::ServerStatus& status,
                                uint64_t read_queue, MetricWriter& writer) {
  writer.Begin("batchd_workers", "Decode worker threads.", Type::kGauge);
  writer.Sample({}, status.workers());
  writer.Begin("batchd_worker_busy_ratio",
               "Fraction of worker time spent on tasks over the last ~5 s, "
               "0..1.",
               Type::kGauge);
  writer.Sample({}, status.busy_fraction());
  writer.Begin("batchd_worker_busy_seconds_total",
               "Worker time spent on tasks, summed over workers, seconds.",
               Type::kCounter);
  writer.Sample({}, status.worker_busy_seconds());
  writer.Begin("batchd_worker_alive_seconds_total",
               "Worker thread lifetime, summed over workers, seconds "
               "(busy ratio over any range = rate(busy) / rate(alive)).",
               Type::kCounter);
  writer.Sample({}, status.worker_alive_seconds());
  writer.Begin("batchd_queue_depth",
               "Tasks waiting: samples for a reader (read) or a worker "
               "(decode).",
               Type::kGauge);
  writer.Sample({{"queue", "read"}}, static_cast<double>(read_queue));
  writer.Sample({{"queue", "decode"}},
                static_cast<double>(status.queued_samples()));
  writer.Begin("batchd_buffer_reserved_bytes",
               "Batch buffer bytes reserved by open streams.", Type::kGauge);
  writer.Sample({}, static_cast<double>(status.buffer_bytes_reserved()));
  writer.Begin("batchd_buffer_limit_bytes",
               "Bound on batch buffer bytes (--max-buffer-bytes).",
               Type::kGauge);
  writer.Sample({}, static_cast<double>(status.max_buffer_bytes()));
  writer.Begin("batchd_buffer_idle_bytes",
               "Finished batches' buffers kept for reuse, bytes "
               "(--idle-buffer-bytes bounds it).",
               Type::kGauge);
  writer.Sample({}, static_cast<double>(status.buffer_bytes_idle()));
  writer.Begin("batchd_samples_decoded_total",
               "Samples decoded (or attempted), substitutes not counted.",
               Type::kCounter);
  writer.Sample({}, static_cast<double>(status.samples_decoded()));
  writer.Begin("batchd_uptime_seconds", "Seconds since the daemon started.",
               Type::kGauge);
  writer.Sample({}, status.uptime_seconds());

  struct JobFamily {
    const char* name;
    const char* help;
    Type type;
    double (*value)(const batchd::v1::JobStatus&);
  };
  static const JobFamily kJobFamilies[] = {
      {"batchd_job_streams", "Streams open now, per job.", Type::kGauge,
       [](const batchd::v1::JobStatus& j) { return double(j.streams()); }},
      {"batchd_job_batches_total", "Batches fully sent, per job.",
       Type::kCounter,
       [](const batchd::v1::JobStatus& j) { return double(j.batches_sent()); }},
      {"batchd_job_images_total", "Images sent, per job.", Type::kCounter,
       [](const batchd::v1::JobStatus& j) { return double(j.images_sent()); }},
      {"batchd_job_bytes_total", "Pixel bytes sent, per job.", Type::kCounter,
       [](const batchd::v1::JobStatus& j) { return double(j.bytes_sent()); }},
      {"batchd_job_substitutions_total",
       "Substituted samples in sent batches, per job.", Type::kCounter,
       [](const batchd::v1::JobStatus& j) {
         return double(j.substitutions());
       }},
      {"batchd_job_images_per_second",
       "Images sent per second over the last ~5 s, per job.", Type::kGauge,
       [](const batchd::v1::JobStatus& j) { return j.images_per_second(); }},
      {"batchd_job_bytes_per_second",
       "Pixel bytes sent per second over the last ~5 s, per job.",
       Type::kGauge,
       [](const batchd::v1::JobStatus& j) { return j.bytes_per_second(); }},
      {"batchd_job_trainer_streams",
       "Streams whose trainers sent a TrainerReport in the last ~3 s, per "
       "job.",
       Type::kGauge,
       [](const batchd::v1::JobStatus& j) {
         return double(j.trainer().reporting_streams());
       }},
      {"batchd_job_trainer_wait_ratio",
       "Share of the trainers' time spent waiting for input over the last "
       "~3 s, 0..1, per job (from their reports).",
       Type::kGauge,
       [](const batchd::v1::JobStatus& j) { return j.trainer().wait_ratio(); }},
      {"batchd_job_trainer_demand_images_per_second",
       "Images per second the job's trainers would take if they never "
       "waited: images consumed over their compute time, last ~3 s.",
       Type::kGauge,
       [](const batchd::v1::JobStatus& j) {
         return j.trainer().demand_images_per_second();
       }},
  };
  for (const JobFamily& family : kJobFamilies) {
    writer.Begin(family.name, family.help, family.type);
    for (const batchd::v1::JobStatus& job : status.jobs()) {
      // Not `job`: Prometheus gives every scraped series its scrape
      // config's `job` label and would rename ours to `exported_job`.
      writer.Sample({{"batchd_job", job.job()}}, family.value(job));
    }
    // Retired jobs' totals, so that a sum over jobs never goes down.
    if (status.retired_jobs() > 0 && family.type == Type::kCounter) {
      writer.Sample({{"batchd_job", status.other_jobs().job()}},
                    family.value(status.other_jobs()));
    }
  }

  writer.Begin("batchd_retired_jobs_total",
               "Idle jobs no longer listed per job (beyond --max-idle-jobs); "
               "their totals are under batchd_job=\"_other\".",
               Type::kCounter);
  writer.Sample({}, static_cast<double>(status.retired_jobs()));

  const batchd::v1::SharedBatchStatus& shared = status.shared_batches();
  writer.Begin("batchd_shared_batch_requests_total",
               "Batch requests of streams, by plan (16 hex digits of its "
               "fingerprint) and how they were served: built (started a "
               "build), attached (to a build already running) or retained "
               "(a finished batch kept for later requests).",
               Type::kCounter);
  for (const batchd::v1::PlanSharing& plan : shared.plans()) {
    writer.Sample({{"plan", plan.plan()}, {"served", "built"}},
                  static_cast<double>(plan.built()));
    writer.Sample({{"plan", plan.plan()}, {"served", "attached"}},
                  static_cast<double>(plan.attached()));
    writer.Sample({{"plan", plan.plan()}, {"served", "retained"}},
                  static_cast<double>(plan.retained()));
  }
  writer.Begin("batchd_shared_batch_retained_bytes",
               "Finished batches kept for streams of the same plan, bytes.",
               Type::kGauge);
  writer.Sample({}, static_cast<double>(shared.retained_bytes()));
  writer.Begin("batchd_shared_batch_retention_limit_bytes",
               "Bound on retained shared batches (--shared-batch-bytes).",
               Type::kGauge);
  writer.Sample({}, static_cast<double>(shared.retention_limit_bytes()));
  writer.Begin("batchd_shared_batch_evictions_total",
               "Retained shared batches dropped to keep the bound.",
               Type::kCounter);
  writer.Sample({}, static_cast<double>(shared.evictions()));

  if (status.has_read_cache()) {
    const batchd::v1::ReadCacheStatus& cache = status.read_cache();
    writer.Begin("batchd_read_cache_bytes",
                 "Encoded samples held by the read cache, bytes.",
                 Type::kGauge);
    writer.Sample({}, static_cast<double>(cache.bytes()));
    writer.Begin("batchd_read_cache_capacity_bytes",
                 "Bound on the read cache (--read-cache-bytes).", Type::kGauge);
    writer.Sample({}, static_cast<double>(cache.capacity_bytes()));
    writer.Begin("batchd_read_cache_reads_total",
                 "Sample reads through the read cache, by result: hit, miss "
                 "(read from storage) or coalesced (waited for another "
                 "read of the same sample).",
                 Type::kCounter);
    writer.Sample({{"result", "hit"}}, static_cast<double>(cache.hits()));
    writer.Sample({{"result", "miss"}}, static_cast<double>(cache.misses()));
    writer.Sample({{"result", "coalesced"}},
                  static_cast<double>(cache.coalesced()));
    writer.Begin("batchd_read_cache_evictions_total",
                 "Samples dropped from the read cache to keep its bound.",
                 Type::kCounter);
    writer.Sample({}, static_cast<double>(cache.evictions()));
  }

  if (status.has_shard_cache()) {
    const batchd::v1::ShardCacheStatus& cache = status.shard_cache();
    writer.Begin("batchd_shard_cache_bytes",
                 "Remote shard bytes held by the shard cache, by tier: disk "
                 "(complete and downloading) or ram.",
                 Type::kGauge);
    writer.Sample({{"tier", "disk"}}, static_cast<double>(cache.disk_bytes()));
    writer.Sample({{"tier", "ram"}}, static_cast<double>(cache.ram_bytes()));
    writer.Begin("batchd_shard_cache_limit_bytes",
                 "Bounds on the shard cache, by tier: disk (--cache-bytes) "
                 "or ram (--cache-ram-bytes).",
                 Type::kGauge);
    writer.Sample({{"tier", "disk"}},
                  static_cast<double>(cache.disk_limit_bytes()));
    writer.Sample({{"tier", "ram"}},
                  static_cast<double>(cache.ram_limit_bytes()));
    writer.Begin("batchd_shard_cache_shards",
                 "Complete shards in the shard cache's directory.",
                 Type::kGauge);
    writer.Sample({}, static_cast<double>(cache.shards()));
    writer.Begin("batchd_shard_cache_reads_total",
                 "Member reads of remote shards, by result: hit (disk), "
                 "ram_hit, miss (waited for a download) or uncached (read "
                 "from the store by range).",
                 Type::kCounter);
    writer.Sample({{"result", "hit"}},
                  static_cast<double>(cache.hits() - cache.ram_hits()));
    writer.Sample({{"result", "ram_hit"}},
                  static_cast<double>(cache.ram_hits()));
    writer.Sample({{"result", "miss"}}, static_cast<double>(cache.misses()));
    writer.Sample({{"result", "uncached"}},
                  static_cast<double>(cache.uncached_reads()));
    writer.Begin("batchd_shard_cache_downloads_total",
                 "Whole shards downloaded, by result: ok or failed.",
                 Type::kCounter);
    writer.Sample({{"result", "ok"}}, static_cast<double>(cache.downloads()));
    writer.Sample({{"result", "failed"}},
                  static_cast<double>(cache.download_failures()));
    writer.Begin("batchd_shard_cache_downloaded_bytes_total",
                 "Bytes of whole shards downloaded.", Type::kCounter);
    writer.Sample({}, static_cast<double>(cache.downloaded_bytes()));
    writer.Begin("batchd_shard_cache_evictions_total",
                 "Shards deleted from the cache to keep its bound.",
                 Type::kCounter);
    writer.Sample({}, static_cast<double>(cache.evictions()));
    writer.Begin("batchd_shard_cache_prefetches_total",
                 "Background shard downloads for upcoming batches, by "
                 "result: queued, dropped (queue full, no room, or declined) "
                 "or declined (the plans' forecast said member ranges cost "
                 "less).",
                 Type::kCounter);
    writer.Sample({{"result", "queued"}},
                  static_cast<double>(cache.prefetches()));
    writer.Sample({{"result", "dropped"}},
                  static_cast<double>(cache.prefetches_dropped()));
    writer.Sample({{"result", "declined"}},
                  static_cast<double>(cache.prefetches_declined()));
    writer.Begin("batchd_shard_cache_range_prefetches_total",
                 "Member ranges fetched ahead for shards read by ranges, by "
                 "result: queued, read (served from memory), unread (let "
                 "go) or dropped (no room).",
                 Type::kCounter);
    writer.Sample({{"result", "queued"}},
                  static_cast<double>(cache.range_prefetches()));
    writer.Sample({{"result", "read"}},
                  static_cast<double>(cache.range_prefetch_hits()));
    writer.Sample({{"result", "unread"}},
                  static_cast<double>(cache.range_prefetches_unread()));
    writer.Sample({{"result", "dropped"}},
                  static_cast<double>(cache.range_prefetches_dropped()));
    writer.Begin("batchd_shard_cache_fetch_choices_total",
                 "Misses decided by the plans' forecast: whole (download "
                 "the shard) or ranges (read the members; cheaper than the "
                 "shard before it would leave the cache).",
                 Type::kCounter);
    writer.Sample({{"choice", "whole"}},
                  static_cast<double>(cache.whole_choices()));
    writer.Sample({{"choice", "ranges"}},
                  static_cast<double>(cache.range_choices()));
    // With the reads and the downloaded bytes above: the hit rate
    // (hits / all reads) and the amplification ((downloaded + range) /
    // served) are ratios of these counters' rates.
    writer.Begin("batchd_shard_cache_served_bytes_total",
                 "Member bytes the shard cache returned to the workers "
                 "(hits, downloads and ranges).",
                 Type::kCounter);
    writer.Sample({}, static_cast<double>(cache.served_bytes()));
    writer.Begin("batchd_shard_cache_range_bytes_total",
                 "Member bytes the shard cache read from the store by range "
                 "instead of downloading the shard.",
                 Type::kCounter);
    writer.Sample({}, static_cast<double>(cache.range_bytes()));
    writer.Begin("batchd_shard_cache_forecast_shard_bytes",
                 "Bytes of the distinct shards the open plans read within "
                 "the forecast now: the cache that would hold them all.",
                 Type::kGauge);
    writer.Sample({}, static_cast<double>(cache.forecast_shard_bytes()));
    writer.Begin("batchd_shard_cache_forecast_reads",
                 "Member reads of the open plans the forecast covers now.",
                 Type::kGauge);
    writer.Sample({}, static_cast<double>(cache.forecast_reads()));
    writer.Begin("batchd_shard_cache_prefetches_in_flight",
                 "Background shard downloads queued or running now.",
                 Type::kGauge);
    writer.Sample({}, static_cast<double>(cache.prefetches_in_flight()));
    writer.Begin("batchd_shard_cache_prefetch_depth_reads",
                 "How many reads ahead the last prefetch chosen by the "
                 "forecast is needed.",
                 Type::kGauge);
    writer.Sample({}, static_cast<double>(cache.prefetch_depth_reads()));
  }
  if (status.has_object_store()) {
    const batchd::v1::ObjectStoreStatus& store = status.object_store();
    writer.Begin("batchd_object_store_requests_total",
                 "Range requests to the object store, by result: ok, failed, "
                 "or changed (the object's ETag changed since indexing).",
                 Type::kCounter);
    writer.Sample({{"result", "ok"}},
                  static_cast<double>(store.requests() - store.failures()));
    writer.Sample({{"result", "failed"}},
                  static_cast<double>(store.failures() -
                                      store.changed_objects()));
    writer.Sample({{"result", "changed"}},
                  static_cast<double>(store.changed_objects()));
    writer.Begin("batchd_object_store_bytes_total",
                 "Bytes received from the object store.", Type::kCounter);
    writer.Sample({}, static_cast<double>(store.bytes()));
  }
  if (status.has_decoded_cache()) {
    const batchd::v1::DecodedCacheStatus& cache = status.decoded_cache();
    writer.Begin("batchd_decoded_cache_bytes",
                 "Capped decoded images held by the decoded cache, bytes.",
                 Type::kGauge);
    writer.Sample({}, static_cast<double>(cache.bytes()));
    writer.Begin("batchd_decoded_cache_limit_bytes",
                 "Bound on the decoded cache (--decoded-cache-bytes).",
                 Type::kGauge);
    writer.Sample({}, static_cast<double>(cache.capacity_bytes()));
    writer.Begin("batchd_decoded_cache_hits_total",
                 "Capped images served from the decoded cache.",
                 Type::kCounter);
    writer.Sample({}, static_cast<double>(cache.hits()));
    writer.Begin("batchd_decoded_cache_misses_total",
                 "Capped images decoded for the decoded cache (coalesced "
                 "uses that waited for one decode count once).",
                 Type::kCounter);
    writer.Sample({}, static_cast<double>(cache.misses()));
    writer.Begin("batchd_decoded_cache_coalesced_total",
                 "Uses of the decoded cache that waited for another "
                 "caller's decode of the same image.",
                 Type::kCounter);
    writer.Sample({}, static_cast<double>(cache.coalesced()));
    writer.Begin("batchd_decoded_cache_evictions_total",
                 "Capped images dropped from the decoded cache to keep its "
                 "bound.",
                 Type::kCounter);
    writer.Sample({}, static_cast<double>(cache.evictions()));
  }

  writer.Begin("batchd_capacity_demand_ratio",
               "Images/s the trainers would take over what this daemon can "
               "decode at its most workers; above 1 it needs more daemons "
               "(a HorizontalPodAutoscaler's target, docs/autoscaling.md).",
               Type::kGauge);
  writer.Sample({}, status.capacity_demand_ratio());
  const batchd::v1::AutoscaleStatus& autoscale = status.autoscale();
  writer.Begin("batchd_autoscale_enabled",
               "1 under --workers auto, else 0.", Type::kGauge);
  writer.Sample({}, autoscale.enabled() ? 1 : 0);
  writer.Begin("batchd_autoscale_max_workers",
               "The most workers --workers auto may run (--max-workers).",
               Type::kGauge);
  writer.Sample({}, autoscale.max_workers());
  writer.Begin("batchd_autoscale_changes_total",
               "Worker-count changes made by --workers auto, by kind: grow, "
               "shrink, or step_back (a growth undone because throughput "
               "did not rise).",
               Type::kCounter);
  writer.Sample({{"kind", "grow"}}, static_cast<double>(autoscale.grows()));
  writer.Sample({{"kind", "shrink"}}, static_cast<double>(autoscale.shrinks()));
  writer.Sample({{"kind", "step_back"}},
                static_cast<double>(autoscale.step_backs()));

  writer.Begin("batchd_process_resident_memory_bytes",
               "Resident memory of the daemon process, bytes.", Type::kGauge);
  writer.Sample({}, static_cast<double>(ProcessResidentBytes()));
}

const char* GrpcCodeName(int code) {
  static const char* const kNames[] = {
      "OK",           "CANCELLED",          "UNKNOWN",
      "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
      "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
      "FAILED_PRECONDITION", "ABORTED",      "OUT_OF_RANGE",
      "UNIMPLEMENTED", "INTERNAL",           "UNAVAILABLE",
      "DATA_LOSS",     "UNAUTHENTICATED"};
  if (code < 0 || code > 16) return "UNKNOWN";
  return kNames[code];
}

}  // namespace batchd::server
