// TimelineSnapshots: the answers of GET /api/timeline (and so of the live
// page), rendered from a Timeline at most once per `interval` however many
// ask: concurrent requests share one render, and a request that arrives
// while a render runs waits for it instead of starting another. A render
// is a Timeline::View with at most `max_jobs` job series (the busiest; the
// rest summed into "_other"), so its cost does not grow with the jobs
// beyond the cap, and its CPU time is observed in `render_seconds`.
//
//   TimelineSnapshots snapshots(&timeline, {.max_jobs = 32});
//   absl::StatusOr<std::string> json = snapshots.Answer(request.params);
//
// A request may pass since=T (the "next" of the answer before): it gets
// only the points after T, which costs a copy of their part of the
// snapshot. When the snapshot has nothing after T, it waits for the next
// render, up to `max_wait`: a client that asks again at once is paced by
// the timeline's one point a second instead of spinning.
//
// Answers, all callers together, are spaced 1/`answers_per_second` apart
// in the order asked: a request waits for its turn (up to `max_wait`, then
// RESOURCE_EXHAUSTED), so that clients asking in a loop cost the daemon at
// most that many answers a second, however many they are.
//
// Owns the last snapshot. Thread-safe; Stop() ends every wait (a request
// still waiting for its turn is then answered at once).
#ifndef BATCHD_SERVER_OBSERVE_TIMELINE_SNAPSHOT_H_
#define BATCHD_SERVER_OBSERVE_TIMELINE_SNAPSHOT_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/metrics/metrics.h"
#include "server/observe/timeline.h"

namespace batchd::server {

// --timeline-max-jobs: per-job series in a render.
inline constexpr int kDefaultTimelineMaxJobs = 32;
inline constexpr int kMaxTimelineMaxJobs = 1024;
// Answers of /api/timeline a second, all clients together: 32 live pages
// at their one request a second.
inline constexpr double kTimelineAnswersPerSecond = 32;

// A TimelineView as JSON, kept in pieces so that the part after any time
// costs a copy and no formatting:
//   {"since":null,"next":1800000002.000,"interval_seconds":1,
//    "capacity":900,"max_jobs":32,"other_jobs":0,
//    "verdict":{"t":..,"kind":"compute-bound","line":"..."},
//    "shard_cache":{"t":..,"line":"shard cache: hit 60 %, ..."},
//    "t":[..],"workers":[..],"busy_percent":[..],"queued_samples":[..],
//    "buffer_reserved_bytes":[..],"buffer_idle_bytes":[..],
//    "buffer_limit_bytes":[..],"substitutions_per_second":[..],
//    "capacity_images_per_second":[..],
//    "stage_ms_per_image":{"read":[..],"decode":[..],"transform":[..],
//                          "augment":[..],"send":[..]},
//    "jobs":[{"job":"a","images_per_second":[..],"wait_percent":[..],
//             "compute_percent":[..],"demand_images_per_second":[..]}],
//    "autoscale":[{"t":..,"workers":2,"change":"grow 1 -> 2: ..."}]}
// Columns are of equal length, aligned on "t" (Unix seconds, oldest
// first), null where a value is absent; "verdict" and "shard_cache" are
// the newest point's (null while empty; "shard_cache" also without a
// shard cache). "next" is the newest point's t
// (null while there is none); "since" echoes the request's. Immutable.
class RenderedTimeline {
 public:
  RenderedTimeline(const TimelineView& view, int max_jobs);

  // The points after `since_ms` (Unix milliseconds), all when absent.
  std::string Json(std::optional<int64_t> since_ms) const;
  // The whole, rendered once.
  const std::string& full() const { return full_; }
  // The newest point's time, Unix milliseconds; nullopt while empty.
  std::optional<int64_t> newest_ms() const;
  uint64_t version() const { return version_; }

 private:
  // Literal text, then (unless `cells` is null) a column: "[" + the cells
  // from the first point after `since` + "]".
  struct Piece {
    std::string text;
    // Cells joined by ','; starts[i] is where point i's cells begin
    // (the autoscale markers: those of points >= i), starts[n] the end.
    std::string cells;
    std::vector<uint32_t> starts;
    bool column = false;
  };
  std::string Assemble(size_t first, const std::string& since) const;

  uint64_t version_ = 0;
  std::vector<int64_t> t_ms_;
  std::vector<Piece> pieces_;
  std::string full_;
};

struct TimelineSnapshotOptions {
  int max_jobs = kDefaultTimelineMaxJobs;
  // Renders are at least this far apart (by `now`), and happen only when
  // the timeline has a new point.
  absl::Duration interval = absl::Seconds(1);
  // Longest wait of a since= request with nothing newer, and then of any
  // request for its turn (so at most twice this in all); 0 answers at once.
  absl::Duration max_wait = absl::Seconds(2);
  // Answers a second, all callers together; 0: no limit.
  double answers_per_second = kTimelineAnswersPerSecond;
  // The clock renders are spaced by (tests inject one).
  std::function<absl::Time()> now = [] { return absl::Now(); };
  // When set, each render's CPU time (its thread's), seconds.
  Histogram* render_seconds = nullptr;
};

class TimelineSnapshots {
 public:
  // `timeline` is not owned and must outlive this.
  TimelineSnapshots(const Timeline* timeline,
                    TimelineSnapshotOptions options = {});

  // The answer to GET /api/timeline with query `params`: since=T (Unix
  // seconds, as "next" gives it) or nothing. INVALID_ARGUMENT for another
  // parameter or a since that is not a time; RESOURCE_EXHAUSTED when its
  // turn is more than `max_wait` away (after waiting `max_wait`). Returns
  // within 2 x `max_wait`.
  absl::StatusOr<std::string> Answer(
      const std::multimap<std::string, std::string>& params)
      ABSL_LOCKS_EXCLUDED(mu_);

  // The latest snapshot, rendered now if the last is `interval` old and
  // the timeline has changed since; concurrent callers share one render.
  std::shared_ptr<const RenderedTimeline> Current() ABSL_LOCKS_EXCLUDED(mu_);

  // Ends every wait of Answer at once, and those to come.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

  // Requests refused for want of a turn so far.
  uint64_t refused() const ABSL_LOCKS_EXCLUDED(mu_);

  // Renders so far, and their CPU time in seconds.
  uint64_t renders() const ABSL_LOCKS_EXCLUDED(mu_);
  double render_cpu_seconds() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // Waits for this answer's turn; RESOURCE_EXHAUSTED when it is after
  // `deadline`.
  absl::Status AwaitTurn(absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu_);

  const Timeline* const timeline_;
  const TimelineSnapshotOptions options_;

  mutable absl::Mutex mu_;
  std::shared_ptr<const RenderedTimeline> snapshot_ ABSL_GUARDED_BY(mu_);
  // When the timeline was last looked at, rendered or found unchanged.
  absl::Time checked_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  bool rendering_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t refused_ ABSL_GUARDED_BY(mu_) = 0;
  // The turn of the last answer given or promised.
  absl::Time last_turn_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  uint64_t renders_ ABSL_GUARDED_BY(mu_) = 0;
  double render_cpu_seconds_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace batchd::server

#endif  // BATCHD_SERVER_OBSERVE_TIMELINE_SNAPSHOT_H_
