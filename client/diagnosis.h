// Diagnosis: says in one plain line what limits a training run's input,
// from the client's stall accounting (LoaderStats over an interval) and
// the admin status (batchd.v1.ServerStatus) of the daemon that served the
// most batches, so that the verdict spans the network boundary.
//
//   LoaderStats start = loader->stats();
//   ... train an epoch ...
//   Diagnosis d = Diagnose(loader->stats().Since(start), &status_before,
//                          &status_after);
//   std::puts(d.line.c_str());
//   // input-bound: waited 43 % of wall time; daemon workers 100 % busy
//   //   (1 worker) → add workers or a daemon
//
// The rules, in order (thresholds below):
//   1. no steps in the interval                 → unknown
//   2. waited < kInputBoundWaitFraction         → compute-bound
//      (waited: the steady share, without each epoch's first batch)
//   3. copy takes >= kCopyBoundFraction of wall → client-bound
//   4. no daemon status                         → input-bound (cause unknown)
//   5. daemon workers >= kSaturatedBusyFraction → input-bound (workers):
//      "add workers or a daemon"; under --workers auto, "--workers auto is
//      adding workers" below its --max-workers, and "add a daemon" at them
//      or when the trainers ask more than they can decode
//      (ServerStatus.capacity_demand_ratio > 1). When the plan's
//      augmentation takes enough of the workers' time to explain the wait
//      (common::AugmentationMakesInputBound, over the interval), the line
//      says its share and adds "or a lighter augmentation policy"
//   6. the daemon's samples spent >= kStorageBoundReadShare of their time
//      being read (over the interval)          → storage-bound, with
//      common::StorageAdvice
//   7. otherwise: the daemon has spare workers and the bytes still arrive
//      too slowly                               → network-bound
// When the daemon's shard cache is too small for the plans
// (common::ShardCacheTooSmall: how much they read, what it holds, the
// --cache-bytes that would fetch each shard once), that is rule 6's
// advice, and a note ("; shard cache too small ...") after the others.
// Over several daemons the line ends with the per-daemon view: how many are
// up, the slowest one when its smoothed latency is kSlowDaemonFactor x the
// fastest's or more, and the batches re-requested and hedged in the
// interval.
//
// Pure functions of their inputs; thread-safe.
#ifndef BATCHD_CLIENT_DIAGNOSIS_H_
#define BATCHD_CLIENT_DIAGNOSIS_H_

#include <string>

#include "batchd/v1/admin.pb.h"
#include "client/loader_stats.h"
#include "common/daemon_verdict.h"

namespace batchd::client {

// The trainer waited for input for less than this share of wall time: the
// input pipeline keeps up. The daemon's own verdict uses the same.
inline constexpr double kInputBoundWaitFraction =
    common::kInputBoundWaitFraction;
// The daemon's workers were busy at least this share of their time: they are
// the limit.
inline constexpr double kSaturatedBusyFraction = common::kSaturatedBusyFraction;
// The receive thread spent at least this share of wall time copying bytes
// into buffers: the client side is the limit.
inline constexpr double kCopyBoundFraction = 0.50;
// A daemon whose smoothed batch latency is this multiple of the fastest
// daemon's is named as slow (a loaded or remote host, a slow disk).
inline constexpr double kSlowDaemonFactor = 1.5;

enum class Verdict {
  kUnknown,
  kComputeBound,
  // Input-bound, daemon workers saturated.
  kInputBound,
  // Input-bound, daemon status unavailable: the cause is not known.
  kInputBoundUnknownCause,
  kNetworkBound,
  kClientBound,
  // Input-bound, the daemon's samples wait on the disk or the object store.
  kStorageBound,
};

struct Diagnosis {
  Verdict verdict = Verdict::kUnknown;
  // One plain line, e.g. "compute-bound: waited 0.4 % of wall time; ...".
  std::string line;
  // The figures the verdict rests on. `waited_fraction` is
  // LoaderStats::steady_waited_fraction(): each epoch's first batch, while
  // the pipeline fills, is left out.
  double waited_fraction = 0;
  double copy_fraction = 0;
  // Daemon worker busy fraction over the interval; < 0 when unknown.
  double daemon_busy_fraction = -1;
  uint32_t daemon_workers = 0;
  // Share of the daemon workers' sample time spent in the plan's
  // augmentation ops over the interval (common::AugmentShare); 0 when
  // unknown or without augmentation.
  double daemon_augment_share = 0;
  // Pixel bytes per second received by the client over the interval.
  double stream_bytes_per_second = 0;
  // With several daemons: the endpoint of the slow one (see
  // kSlowDaemonFactor), empty if none, and its latency over the fastest's.
  std::string slow_daemon;
  double slow_daemon_latency_ratio = 0;
};

// "compute-bound", "input-bound", "network-bound", "client-bound",
// "storage-bound", "unknown".
const char* VerdictName(Verdict verdict);

// Diagnoses `interval` (LoaderStats::Since). `daemon_before` and
// `daemon_after` are the daemon's status at the interval's start and end;
// either may be null. With both, the busy fraction is exact over the
// interval (ratio of busy to alive worker seconds); with only
// `daemon_after`, its recent busy_fraction is used.
Diagnosis Diagnose(const LoaderStats& interval,
                   const batchd::v1::ServerStatus* daemon_before,
                   const batchd::v1::ServerStatus* daemon_after);

// "1.1 GB/s", "35.2 MB/s", "800 B/s".
std::string FormatBytesPerSecond(double bytes_per_second);

}  // namespace batchd::client

#endif  // BATCHD_CLIENT_DIAGNOSIS_H_
