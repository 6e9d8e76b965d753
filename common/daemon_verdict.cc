#include "common/daemon_verdict.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace batchd::common {
namespace {

std::string Workers(const batchd::v1::ServerStatus& status) {
  return absl::StrFormat("workers %s busy (%d worker%s)",
                         FormatPercent(status.busy_fraction()),
                         status.workers(), status.workers() == 1 ? "" : "s");
}

// What to do about a saturated daemon, from its autoscaling.
std::string AutoscaleAdvice(const batchd::v1::ServerStatus& status) {
  const batchd::v1::AutoscaleStatus& autoscale = status.autoscale();
  if (!autoscale.enabled()) return "add workers or a daemon";
  const double ratio = status.capacity_demand_ratio();
  if (status.workers() >= autoscale.max_workers() || ratio > 1) {
    std::string advice = absl::StrFormat(
        "add a daemon: this one runs up to %d workers (--max-workers)",
        autoscale.max_workers());
    if (ratio > 1) {
      absl::StrAppendFormat(&advice,
                            " and its trainers ask %.1fx what those decode",
                            ratio);
    }
    return advice;
  }
  return absl::StrFormat("--workers auto is adding workers (up to %d)",
                         autoscale.max_workers());
}

}  // namespace

namespace {

double SampleSeconds(const batchd::v1::StageSeconds& stages) {
  return stages.read() + stages.decode() + stages.transform() +
         stages.augment();
}

}  // namespace

double ReadShare(const batchd::v1::StageSeconds& stages) {
  const double total = SampleSeconds(stages);
  return total > 0 ? stages.read() / total : 0.0;
}

double AugmentShare(const batchd::v1::StageSeconds& stages) {
  const double total = SampleSeconds(stages);
  return total > 0 ? stages.augment() / total : 0.0;
}

bool AugmentationMakesInputBound(double augment_share, double wait_fraction) {
  return augment_share > 0 && (augment_share >= wait_fraction ||
                               augment_share >= kAugmentNamedShare);
}

std::string AugmentationNote(double augment_share) {
  return absl::StrCat("augmentation takes ", FormatPercent(augment_share),
                      " of the workers' time per image");
}

std::string FormatPercent(double fraction) {
  const double percent = 100.0 * fraction;
  return percent < 10 ? absl::StrFormat("%.1f %%", percent)
                      : absl::StrFormat("%.0f %%", percent);
}

std::string InputBoundAdvice(const batchd::v1::ServerStatus& status,
                             bool augmentation) {
  // Several plans of one dataset decode it several times: a sweep whose
  // jobs differ only in what does not change the bytes would share.
  const std::string plans =
      status.shared_batches().plans_size() >= 2
          ? absl::StrFormat(
                "; %d plans build their own batches here (jobs with the "
                "same dataset, pipeline and seed share them)",
                status.shared_batches().plans_size())
          : std::string();
  return AutoscaleAdvice(status) +
         (augmentation ? ", or a lighter augmentation policy" : "") + plans;
}

std::string FormatBytes(uint64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (b >= 1e12) return absl::StrFormat("%.1f TB", b / 1e12);
  if (b >= 1e9) return absl::StrFormat("%.1f GB", b / 1e9);
  if (b >= 1e7) return absl::StrFormat("%.0f MB", b / 1e6);
  if (b >= 1e6) return absl::StrFormat("%.1f MB", b / 1e6);
  if (b >= 1e3) return absl::StrFormat("%.0f kB", b / 1e3);
  return absl::StrFormat("%d B", bytes);
}

double ShardCacheHitRate(const batchd::v1::ShardCacheStatus& cache) {
  const uint64_t reads =
      cache.hits() + cache.misses() + cache.uncached_reads();
  return reads > 0 ? static_cast<double>(cache.hits()) / reads : 0.0;
}

double ShardCacheAmplification(const batchd::v1::ShardCacheStatus& cache) {
  if (cache.served_bytes() == 0) return 0.0;
  return static_cast<double>(cache.downloaded_bytes() + cache.range_bytes()) /
         static_cast<double>(cache.served_bytes());
}

std::string ShardCacheTooSmall(const batchd::v1::ServerStatus& status) {
  if (!status.has_shard_cache()) return "";
  const batchd::v1::ShardCacheStatus& cache = status.shard_cache();
  const uint64_t limit = cache.disk_limit_bytes();
  if (limit == 0 || cache.forecast_shard_bytes() <= limit ||
      cache.served_bytes() < limit) {
    return "";
  }
  const double amplification = ShardCacheAmplification(cache);
  const uint64_t choices = cache.whole_choices() + cache.range_choices();
  const bool ranges_dominate = cache.range_choices() > cache.whole_choices();
  if (amplification < kCacheTooSmallAmplification && !ranges_dominate) {
    return "";
  }
  // The flag takes bytes: the forecast's, rounded up to a megabyte.
  const uint64_t suggested =
      (cache.forecast_shard_bytes() + 999'999) / 1'000'000 * 1'000'000;
  std::string line = absl::StrFormat(
      "shard cache too small for the plans: they read %s of shards within "
      "the forecast, the cache holds %s; --cache-bytes %d would fetch each "
      "shard once (now %.2fx the bytes served are fetched",
      FormatBytes(cache.forecast_shard_bytes()), FormatBytes(limit),
      suggested, amplification);
  if (ranges_dominate) {
    absl::StrAppendFormat(&line, ", %d of %d misses by member ranges",
                          cache.range_choices(), choices);
  }
  absl::StrAppend(&line, ")");
  return line;
}

std::string ShardCacheSummary(const batchd::v1::ServerStatus& status) {
  if (!status.has_shard_cache()) return "";
  const batchd::v1::ShardCacheStatus& cache = status.shard_cache();
  std::string line = "shard cache: ";
  if (cache.hits() + cache.misses() + cache.uncached_reads() == 0) {
    absl::StrAppend(&line, "no reads yet");
  } else {
    absl::StrAppend(&line, "hit ", FormatPercent(ShardCacheHitRate(cache)),
                    ", fetched ",
                    absl::StrFormat("%.2fx", ShardCacheAmplification(cache)),
                    " served, ", cache.whole_choices(), " whole / ",
                    cache.range_choices(), " ranges");
  }
  absl::StrAppend(&line, "; prefetch ", cache.prefetch_depth_reads(),
                  " reads ahead (", cache.prefetches_in_flight(),
                  " in flight); holds ", FormatBytes(cache.disk_bytes()),
                  " of ", FormatBytes(cache.disk_limit_bytes()),
                  ", the plans read ",
                  FormatBytes(cache.forecast_shard_bytes()));
  return line;
}

std::string StorageAdvice(const batchd::v1::ServerStatus& status) {
  if (std::string too_small = ShardCacheTooSmall(status);
      !too_small.empty()) {
    return absl::StrCat(too_small,
                        ", or the shard-aware shuffle "
                        "(shuffle_window_shards) so that a smaller cache "
                        "holds what the next batches read");
  }
  if (status.object_store().requests() > 0) {
    return "fetch ahead and keep more of the remote shards: --cache-dir "
           "with a larger --cache-bytes, more --cache-prefetch-batches or "
           "--remote-connections, or the shard-aware shuffle "
           "(shuffle_window_shards) so that a small cache holds what the "
           "next batches read";
  }
  return "the disk reads slower than the workers decode: a read cache "
         "(--read-cache-bytes) or faster storage";
}

std::string SharingSummary(const batchd::v1::ServerStatus& status) {
  const batchd::v1::SharedBatchStatus& shared = status.shared_batches();
  uint64_t built = 0, attached = 0, retained = 0;
  for (const batchd::v1::PlanSharing& plan : shared.plans()) {
    built += plan.built();
    attached += plan.attached();
    retained += plan.retained();
  }
  const uint64_t requests = built + attached + retained;
  if (!shared.enabled() || requests == 0) return "";
  return absl::StrFormat(
      "sharing: %d requests of %d plan%s from %d builds (%.2f each), %d "
      "attached, %d retained; retained %.1f/%.1f MB, %d evicted",
      requests, shared.plans_size(), shared.plans_size() == 1 ? "" : "s",
      built, built > 0 ? static_cast<double>(requests) / built : 0.0,
      attached, retained, shared.retained_bytes() / 1e6,
      shared.retention_limit_bytes() / 1e6, shared.evictions());
}

std::string StoreFaultLine(const batchd::v1::StoreFaultStatus& fault) {
  return absl::StrCat(
      "the object store for dataset \"", fault.dataset(), "\" is ",
      fault.slow() ? "slow" : "failing", " (", fault.count(),
      fault.count() == 1 ? " failed request" : " failed requests",
      " in the last minute, the latest ",
      absl::StrFormat("%.1f", fault.seconds_since_latest()), " s ago: ",
      fault.latest(), ")");
}

DaemonVerdict JudgeDaemon(const batchd::v1::ServerStatus& status) {
  DaemonVerdict v;
  if (status.draining()) {
    v.kind = "draining";
    v.line = "draining: refusing new streams, finishing requested batches";
    return v;
  }
  uint32_t streams = 0;
  const batchd::v1::JobStatus* waiting = nullptr;  // the most-waiting job
  for (const batchd::v1::JobStatus& job : status.jobs()) {
    streams += job.streams();
    if (job.trainer().reporting_streams() == 0) continue;
    if (waiting == nullptr ||
        job.trainer().wait_ratio() > waiting->trainer().wait_ratio()) {
      waiting = &job;
    }
  }
  if (streams > 0 && status.object_store().recent_faults_size() > 0) {
    // Reads that fail or crawl explain any wait: name the store first.
    const batchd::v1::StoreFaultStatus& fault =
        status.object_store().recent_faults(0);
    v.kind = fault.slow() ? "store-slow" : "store-failing";
    v.line = absl::StrCat(v.kind, ": ", StoreFaultLine(fault),
                          status.object_store().recent_faults_size() > 1
                              ? absl::StrCat(
                                    "; and the stores of ",
                                    status.object_store().recent_faults_size() -
                                        1,
                                    " more datasets")
                              : std::string(),
                          " → check the store, its network and its "
                          "throttling; --remote-low-speed-bytes-per-s sets "
                          "what is too slow");
    return v;
  }
  if (waiting == nullptr) {
    v.kind = streams == 0 ? "idle" : "unknown";
    v.line = streams == 0
                 ? absl::StrCat("idle: no streams; ", Workers(status))
                 : absl::StrCat("unknown: ", streams,
                                " streams, none with trainer reports; ",
                                Workers(status));
    return v;
  }
  const double wait = waiting->trainer().wait_ratio();
  const std::string job_waits = absl::StrCat(
      "job \"", waiting->job(), "\" waits ", FormatPercent(wait), "; ");
  if (wait < kInputBoundWaitFraction) {
    v.kind = "compute-bound";
    v.line = absl::StrCat("compute-bound: ", job_waits, Workers(status));
  } else if (status.busy_fraction() >= kSaturatedBusyFraction) {
    v.kind = "input-bound";
    const double augment_share = AugmentShare(status.stage_seconds());
    const bool augmentation = AugmentationMakesInputBound(augment_share, wait);
    v.line = absl::StrCat(
        "input-bound: ", job_waits, Workers(status),
        augmentation ? absl::StrCat("; ", AugmentationNote(augment_share))
                     : std::string(),
        " → ", InputBoundAdvice(status, augmentation));
  } else if (ReadShare(status.stage_seconds()) >= kStorageBoundReadShare) {
    // Reads overlap (one thread per sample in flight), so their share
    // only says something when the workers wait for them.
    v.kind = "storage-bound";
    v.line = absl::StrCat(
        "storage-bound: ", job_waits, Workers(status), ", reading samples ",
        FormatPercent(ReadShare(status.stage_seconds())), " of their time → ",
        StorageAdvice(status));
  } else {
    v.kind = "network-bound";
    v.line = absl::StrCat("network-bound: ", job_waits, Workers(status),
                          " → the batches reach the trainers too slowly "
                          "(network or trainer host; its diagnosis says "
                          "which)");
  }
  if (v.kind != "storage-bound") {
    // Storage-bound says it as its advice; elsewhere the shards fetched
    // again still cost the store's egress.
    if (const std::string too_small = ShardCacheTooSmall(status);
        !too_small.empty()) {
      absl::StrAppend(&v.line, "; ", too_small);
    }
  }
  return v;
}

}  // namespace batchd::common
