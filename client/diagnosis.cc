#include "client/diagnosis.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace batchd::client {
namespace {

// Worker busy fraction over the interval, or -1 when unknown.
double BusyFraction(const batchd::v1::ServerStatus* before,
                    const batchd::v1::ServerStatus* after) {
  if (after == nullptr) return -1;
  if (before != nullptr) {
    const double alive =
        after->worker_alive_seconds() - before->worker_alive_seconds();
    const double busy =
        after->worker_busy_seconds() - before->worker_busy_seconds();
    // A restarted daemon (counters went back) falls through to the recent
    // figure.
    if (alive > 0 && busy >= 0) return std::min(1.0, busy / alive);
  }
  return after->busy_fraction();
}

// The daemon-side verdict (common/daemon_verdict.h) words these the same.
using common::InputBoundAdvice;
std::string Percent(double fraction) { return common::FormatPercent(fraction); }

}  // namespace

const char* VerdictName(Verdict verdict) {
  switch (verdict) {
    case Verdict::kComputeBound:
      return "compute-bound";
    case Verdict::kInputBound:
    case Verdict::kInputBoundUnknownCause:
      return "input-bound";
    case Verdict::kNetworkBound:
      return "network-bound";
    case Verdict::kClientBound:
      return "client-bound";
    case Verdict::kStorageBound:
      return "storage-bound";
    case Verdict::kUnknown:
      break;
  }
  return "unknown";
}

std::string FormatBytesPerSecond(double rate) {
  if (rate >= 1e9) return absl::StrFormat("%.1f GB/s", rate / 1e9);
  if (rate >= 1e6) return absl::StrFormat("%.1f MB/s", rate / 1e6);
  if (rate >= 1e3) return absl::StrFormat("%.1f kB/s", rate / 1e3);
  return absl::StrFormat("%.0f B/s", rate);
}

namespace {

// The daemon's stage times over the interval: their growth between the
// two statuses, or their totals with only `after`; zero without `after`.
batchd::v1::StageSeconds IntervalStages(
    const batchd::v1::ServerStatus* before,
    const batchd::v1::ServerStatus* after) {
  if (after == nullptr) return batchd::v1::StageSeconds();
  batchd::v1::StageSeconds stages = after->stage_seconds();
  if (before != nullptr) {
    const batchd::v1::StageSeconds& then = before->stage_seconds();
    stages.set_read(stages.read() - then.read());
    stages.set_decode(stages.decode() - then.decode());
    stages.set_transform(stages.transform() - then.transform());
    stages.set_augment(stages.augment() - then.augment());
  }
  return stages;
}

// Rules 1-7 of the header, over the input as a whole.
Diagnosis DiagnoseInput(const LoaderStats& interval,
                        const batchd::v1::ServerStatus* daemon_before,
                        const batchd::v1::ServerStatus* daemon_after) {
  Diagnosis d;
  d.waited_fraction = interval.steady_waited_fraction();
  d.copy_fraction = interval.copy_fraction();
  d.daemon_busy_fraction = BusyFraction(daemon_before, daemon_after);
  d.daemon_workers = daemon_after == nullptr ? 0 : daemon_after->workers();
  d.stream_bytes_per_second = interval.received_bytes_per_second();
  const batchd::v1::StageSeconds stages =
      IntervalStages(daemon_before, daemon_after);
  d.daemon_augment_share = common::AugmentShare(stages);

  const std::string waited =
      absl::StrFormat("waited %s of wall time", Percent(d.waited_fraction));
  const std::string workers =
      d.daemon_busy_fraction < 0
          ? std::string()
          : absl::StrFormat("daemon workers %s busy (%d worker%s)",
                            Percent(d.daemon_busy_fraction), d.daemon_workers,
                            d.daemon_workers == 1 ? "" : "s");

  if (interval.batches == 0 || interval.wall <= absl::ZeroDuration()) {
    d.verdict = Verdict::kUnknown;
    d.line = "unknown: no batches returned yet";
    return d;
  }
  if (d.waited_fraction < kInputBoundWaitFraction) {
    d.verdict = Verdict::kComputeBound;
    d.line = absl::StrCat("compute-bound: ", waited);
    if (!workers.empty()) absl::StrAppend(&d.line, "; ", workers);
    absl::StrAppend(&d.line, "; input keeps up");
    return d;
  }
  if (d.copy_fraction >= kCopyBoundFraction) {
    d.verdict = Verdict::kClientBound;
    d.line = absl::StrFormat(
        "client-bound: %s; copy into buffers dominates (%s of wall time) → "
        "use pinned buffers or a faster copy path",
        waited, Percent(d.copy_fraction));
    return d;
  }
  if (d.daemon_busy_fraction < 0) {
    d.verdict = Verdict::kInputBoundUnknownCause;
    d.line = absl::StrFormat(
        "input-bound: %s; stream at %s; daemon status unavailable", waited,
        FormatBytesPerSecond(d.stream_bytes_per_second));
    return d;
  }
  if (d.daemon_busy_fraction >= kSaturatedBusyFraction) {
    d.verdict = Verdict::kInputBound;
    const bool augmentation = common::AugmentationMakesInputBound(
        d.daemon_augment_share, d.waited_fraction);
    d.line = absl::StrFormat(
        "input-bound: %s; %s%s → %s", waited, workers,
        augmentation
            ? absl::StrCat("; ", common::AugmentationNote(
                                     d.daemon_augment_share))
            : std::string(),
        InputBoundAdvice(*daemon_after, augmentation));
    return d;
  }
  // Reads overlap (a thread per sample in flight): their share says
  // something only when the workers wait for them.
  const double read_share = common::ReadShare(stages);
  if (read_share >= common::kStorageBoundReadShare) {
    d.verdict = Verdict::kStorageBound;
    d.line = absl::StrFormat(
        "storage-bound: %s; %s, its samples spent %s of their time being "
        "read → %s",
        waited, workers, Percent(read_share),
        common::StorageAdvice(*daemon_after));
    return d;
  }
  d.verdict = Verdict::kNetworkBound;
  d.line = absl::StrFormat(
      "network-bound: %s; %s, stream at %s → check the link between "
      "trainer and daemon",
      waited, workers, FormatBytesPerSecond(d.stream_bytes_per_second));
  return d;
}

// Appends the per-daemon view to `d` when the loader uses several daemons.
void AppendDaemons(const LoaderStats& stats, Diagnosis& d) {
  if (stats.daemons.size() < 2) return;
  int up = 0;
  const DaemonStats* fastest = nullptr;
  const DaemonStats* slowest = nullptr;
  for (const DaemonStats& daemon : stats.daemons) {
    if (daemon.state == "up") ++up;
    if (daemon.state != "up" || daemon.latency <= absl::ZeroDuration()) {
      continue;
    }
    if (fastest == nullptr || daemon.latency < fastest->latency) {
      fastest = &daemon;
    }
    if (slowest == nullptr || daemon.latency > slowest->latency) {
      slowest = &daemon;
    }
  }
  absl::StrAppend(&d.line, "; daemons: ", up, " of ", stats.daemons.size(),
                  " up");
  if (fastest != nullptr && slowest != fastest) {
    const double ratio = absl::FDivDuration(slowest->latency, fastest->latency);
    if (ratio >= kSlowDaemonFactor) {
      d.slow_daemon = slowest->endpoint;
      d.slow_daemon_latency_ratio = ratio;
      absl::StrAppend(&d.line,
                      absl::StrFormat(", %s slow (batch latency %.1fx the "
                                      "fastest's, served %d)",
                                      slowest->endpoint, ratio,
                                      slowest->served));
    }
  }
  absl::StrAppend(&d.line, ", ", stats.rerequested, " batches re-requested, ",
                  stats.hedged, " hedged");
}

}  // namespace

Diagnosis Diagnose(const LoaderStats& interval,
                   const batchd::v1::ServerStatus* daemon_before,
                   const batchd::v1::ServerStatus* daemon_after) {
  Diagnosis d = DiagnoseInput(interval, daemon_before, daemon_after);
  // Storage-bound gives it as its advice (common::StorageAdvice); after any
  // other verdict the shards fetched again still cost the store's egress.
  if (daemon_after != nullptr && d.verdict != Verdict::kUnknown &&
      d.verdict != Verdict::kStorageBound) {
    if (const std::string too_small = common::ShardCacheTooSmall(*daemon_after);
        !too_small.empty()) {
      absl::StrAppend(&d.line, "; ", too_small);
    }
  }
  if (d.verdict != Verdict::kUnknown) AppendDaemons(interval, d);
  return d;
}

}  // namespace batchd::client
