// The daemon's own verdict: what limits the jobs it serves, in one plain
// line, from its admin status (batchd.v1.ServerStatus) alone: the trainers'
// reported wait, the workers' busy fraction and the capacity/demand ratio,
// and the shard cache's counters (whether it is too small for the plans).
// `batchd top` prints it under each daemon and the live page on the
// metrics port shows it on top, so both say the same from the same status.
// The trainer-side diagnosis (client/diagnosis.h) uses the same thresholds
// and advice, and can also tell network- from client-bound.
//
//   DaemonVerdict v = JudgeDaemon(status);
//   // v.line: "input-bound: job \"resnet\" waits 43 %; workers 97 % busy
//   //          (2 workers) → add workers or a daemon"
//   // or, when the plan's augmentation is what the workers spend their
//   // time on: "...; workers 97 % busy (2 workers); augmentation takes
//   //          62 % of the workers' time per image → add workers or a
//   //          daemon, or a lighter augmentation policy"
//
// Pure functions; thread-safe.
#ifndef BATCHD_COMMON_DAEMON_VERDICT_H_
#define BATCHD_COMMON_DAEMON_VERDICT_H_

#include <cstdint>
#include <string>

#include "batchd/v1/admin.pb.h"

namespace batchd::common {

// The trainers waited for input for less than this share of their time:
// the input pipeline keeps up.
inline constexpr double kInputBoundWaitFraction = 0.10;
// The daemon's workers were busy at least this share of their time: they
// are the limit.
inline constexpr double kSaturatedBusyFraction = 0.75;
// The workers spent at least this share of their sample time (read +
// decode + transform + augment, since the daemon started) reading samples:
// they wait on the disk or the object store more than they decode.
inline constexpr double kStorageBoundReadShare = 0.5;
// Saturated workers that spend at least this share of their sample time in
// the plan's augmentation ops name it, even where dropping it would not
// quite cover the trainers' wait (AugmentationMakesInputBound).
inline constexpr double kAugmentNamedShare = 0.25;

// A shard cache that fetches at least this many bytes from the object
// store per byte it serves, while the plans read more shard bytes than it
// holds, is too small for them (the cost model keeps a cache that is large
// enough, or a shard-aware shuffle, within about 1.2x).
inline constexpr double kCacheTooSmallAmplification = 1.2;

struct DaemonVerdict {
  // "idle", "unknown", "compute-bound", "storage-bound", "input-bound",
  // "network-bound", "draining", "store-failing", "store-slow".
  std::string kind;
  // The line, starting with `kind` and a colon.
  std::string line;
};

// The rules, in order:
//   draining                                   → draining
//   no stream open                             → idle
//   a dataset's store failed or was too slow in the last minute
//     (ObjectStoreStatus.recent_faults)        → store-failing or
//                                                store-slow, naming it
//   no job's trainers report (old clients)     → unknown
//   the most-waiting job waits < kInputBoundWaitFraction → compute-bound
//   workers busy >= kSaturatedBusyFraction     → input-bound, with
//                                                InputBoundAdvice; naming
//     the augmentation's share of the workers' time, and a lighter policy
//     as a remedy, when AugmentationMakesInputBound
//   reads >= kStorageBoundReadShare of the sample time → storage-bound,
//     with StorageAdvice: the workers wait for the bytes
//   otherwise (spare workers, trainers wait)   → network-bound: the bytes
//     arrive too slowly (network, or the trainer's client; its own
//     diagnosis says which)
// A shard cache too small for the plans (ShardCacheTooSmall) is the
// storage-bound advice; after a compute-, input- or network-bound verdict
// it is a note ("; shard cache too small ..."): the bytes fetched again
// cost egress even when nobody waits for them.
DaemonVerdict JudgeDaemon(const batchd::v1::ServerStatus& status);

// "the object store for dataset \"d\" is slow (3 failed requests in the
// last minute, the latest 1.2 s ago: <its error>)": the verdict's words,
// which the trainer's error repeats when its batches stop.
std::string StoreFaultLine(const batchd::v1::StoreFaultStatus& fault);

// What to do about saturated workers: under --workers auto the daemon adds
// them itself until its --max-workers; past that, or when the trainers ask
// more than that many could decode, only another daemon helps. With
// `augmentation` (AugmentationMakesInputBound), a lighter augmentation
// policy helps too.
std::string InputBoundAdvice(const batchd::v1::ServerStatus& status,
                             bool augmentation = false);

// The share of the workers' sample time (read + decode + transform +
// augment) spent reading; 0 before any sample.
double ReadShare(const batchd::v1::StageSeconds& stages);

// The share of the workers' sample time spent in the plan's augmentation
// ops (StageSeconds.augment); 0 before any sample or without augmentation.
double AugmentShare(const batchd::v1::StageSeconds& stages);

// Whether saturated workers' augmentation is what keeps trainers waiting
// `wait_fraction` of their time: true when it takes at least that share of
// the workers' time (without it they would give 1 / (1 - share) times the
// images, and the trainers take 1 / (1 - wait) times what they get), or at
// least kAugmentNamedShare of it.
bool AugmentationMakesInputBound(double augment_share, double wait_fraction);

// "augmentation takes 62 % of the workers' time per image".
std::string AugmentationNote(double augment_share);

// What to do about workers waiting on reads: for remote shards, fetch
// ahead and keep more (the shard cache's flags, the shard-aware shuffle);
// for local files, the read cache or faster storage.
std::string StorageAdvice(const batchd::v1::ServerStatus& status);

// The shard cache's reads served from disk or memory: hits / (hits +
// misses + uncached reads); 0 before any read.
double ShardCacheHitRate(const batchd::v1::ShardCacheStatus& cache);

// Bytes fetched from the store per member byte served (the amplification):
// (downloaded_bytes + range_bytes) / served_bytes; 0 before any byte
// served. 1 when every byte read was fetched once; a shard downloaded
// whole for one member is its size over the member's.
double ShardCacheAmplification(const batchd::v1::ShardCacheStatus& cache);

// "shard cache too small for the plans: they read 235 MB of shards within
// the forecast, the cache holds 70 MB; --cache-bytes 235000000 would fetch
// each shard once (now 1.94x the bytes served are fetched)", or "" when
// the cache is not: no cache, the plans' forecast fits in --cache-bytes,
// the cache has served less than it holds (a cold cache's first downloads
// say nothing yet), or it fetches less than kCacheTooSmallAmplification
// times what it serves and most of its misses were downloads (the cost
// model reads members by range when the shard would leave before enough
// of them are read: a cache too small in requests rather than bytes).
std::string ShardCacheTooSmall(const batchd::v1::ServerStatus& status);

// The shard cache since the daemon started, for `batchd top` and the live
// page: "shard cache: hit 15 %, fetched 1.94x served, 1482 whole / 200
// ranges; prefetch 150 reads ahead (2 in flight); holds 64 MB of 70 MB,
// the plans read 256 MB"; "" without a shard cache.
std::string ShardCacheSummary(const batchd::v1::ServerStatus& status);

// "235 MB", "1.4 GB", "512 kB", "800 B": decimal units.
std::string FormatBytes(uint64_t bytes);

// How the daemon's batch requests were served by shared builds, e.g.
// "sharing: 78 requests of 1 plan from 24 builds (3.25 each), 15 attached,
// 39 retained; retained 0.4/512.0 MB, 0 evicted"; "" when nothing was
// requested or sharing is off.
std::string SharingSummary(const batchd::v1::ServerStatus& status);

// "0.4 %", "43 %": one decimal below 10 %.
std::string FormatPercent(double fraction);

}  // namespace batchd::common

#endif  // BATCHD_COMMON_DAEMON_VERDICT_H_
