// Timeline: the daemon's last minutes, one point a second, for the live
// page on the metrics port (GET /) and GET /api/timeline.
//
// Each point is made from one admin status (batchd.v1.ServerStatus, the
// very message GetStatus returns and `batchd top` renders) and the status
// before it: per job images/s, trainer wait and demand; workers, busy
// fraction and autoscale changes; per-stage ms per image over the second;
// buffer bytes and the budget; substitutions per second; capacity; the
// daemon's verdict (common/daemon_verdict.h) and its shard cache's line.
//
//   Timeline timeline(/*capacity=*/900);
//   timeline.Add(admin.Status(), absl::Now());   // once a second
//   TimelineView view = timeline.View(/*max_jobs=*/32);
//
// Holds at most `capacity` points; each holds at most the jobs its status
// listed, by a number into one table of job names (a name is kept while a
// point lists it), so that a point of 1,000 jobs costs 32 KB and not a
// copy of each name. It keeps each job's images/s summed over the points
// held, so that View picks the busiest jobs without a pass over them.
// GET /api/timeline is a View as JSON, rendered by TimelineSnapshots
// (timeline_snapshot.h) at most once a second. No thread, no clock of its own: the caller
// passes `at`. Thread-safe.
#ifndef BATCHD_SERVER_OBSERVE_TIMELINE_H_
#define BATCHD_SERVER_OBSERVE_TIMELINE_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "batchd/v1/admin.pb.h"

namespace batchd::server {

// 15 minutes at one point a second.
inline constexpr int kTimelinePoints = 900;

struct TimelinePoint {
  struct Job {
    std::string job;
    double images_per_second = 0;
    // Trainers' wait share, 0..1, and demand; absent without reports.
    std::optional<double> wait_ratio;
    std::optional<double> demand_images_per_second;
  };
  absl::Time at;
  uint32_t workers = 0;
  double busy_fraction = 0;
  uint64_t queued_samples = 0;
  uint64_t buffer_reserved_bytes = 0;
  uint64_t buffer_idle_bytes = 0;
  uint64_t max_buffer_bytes = 0;
  // Over the second before `at`; absent for the first point, and the stage
  // times when no image was decoded (read, decode, transform, augment) or
  // sent (send) in it.
  std::optional<double> substitutions_per_second;
  std::optional<double> read_ms, decode_ms, transform_ms, augment_ms,
      send_ms;
  // Images/s the daemon could decode at its most workers: the trainers'
  // demand over ServerStatus.capacity_demand_ratio; absent while unknown.
  std::optional<double> capacity_images_per_second;
  std::vector<Job> jobs;
  // The autoscaler's last change when it changed the pool since the point
  // before (AutoscaleStatus.last_change), else empty.
  std::string autoscale_change;
  std::string verdict_kind;
  std::string verdict;
  // The shard cache's line (common::ShardCacheSummary); empty without one.
  std::string shard_cache;
};

// The job series that stands for the jobs a TimelineView does not list
// one by one (and for JobStats' retired jobs, which it is named after).
inline constexpr char kTimelineOtherJob[] = "_other";

// One job's values, aligned on TimelineView::points; NaN where the job was
// not listed (images/s) or had no trainer reports (wait, demand).
struct TimelineSeries {
  std::string job;
  std::vector<double> images_per_second;
  std::vector<double> wait_ratio;
  std::vector<double> demand_images_per_second;
};

// The points held, with at most `max_jobs` job series (Timeline::View).
struct TimelineView {
  int capacity = 0;
  // Changes whenever a point is added (the count of points ever added).
  uint64_t version = 0;
  // Oldest first; `jobs` is empty in each: the series below have them.
  std::vector<TimelinePoint> points;
  // By name, then "_other" when any job was summed into it: images/s and
  // demand summed, wait the mean of the summed jobs that report.
  std::vector<TimelineSeries> jobs;
  // Jobs listed in the points held and summed into "_other".
  int other_jobs = 0;
};

class Timeline {
 public:
  explicit Timeline(int capacity = kTimelinePoints);

  // Adds the point for `status`, taken at `at` (later than the last).
  void Add(const batchd::v1::ServerStatus& status, absl::Time at)
      ABSL_LOCKS_EXCLUDED(mu_);

  // The points, oldest first.
  std::vector<TimelinePoint> Points() const ABSL_LOCKS_EXCLUDED(mu_);

  // The count of points ever added: TimelineView::version of a View now.
  uint64_t version() const ABSL_LOCKS_EXCLUDED(mu_);

  // The points with the `max_jobs` (>= 1) jobs that sent the most images
  // over them as series of their own (ties by name), and the rest summed
  // into one "_other" series. A job named "_other" (JobStats' retired
  // jobs) is always summed. Costs one pass over the points' job entries
  // with no lookup by name, and a copy of the points without their jobs.
  TimelineView View(int max_jobs) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // A point's entry for one job: its number in names_, NaN for no report.
  struct StoredJob {
    uint32_t id;
    double images_per_second;
    double wait_ratio;
    double demand_images_per_second;
  };
  struct Stored {
    TimelinePoint point;  // with `jobs` empty
    std::vector<StoredJob> jobs;
  };

  uint32_t Intern(const std::string& name) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Release(const Stored& stored) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int capacity_;
  mutable absl::Mutex mu_;
  std::deque<Stored> points_ ABSL_GUARDED_BY(mu_);
  uint64_t added_ ABSL_GUARDED_BY(mu_) = 0;
  // The job names of the points held, by number; numbers of names no
  // point lists any more are reused.
  std::vector<std::string> names_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, uint32_t> ids_ ABSL_GUARDED_BY(mu_);
  // Per number: the points that list it, and its images/s summed over them.
  std::vector<uint32_t> refs_ ABSL_GUARDED_BY(mu_);
  std::vector<double> images_sum_ ABSL_GUARDED_BY(mu_);
  std::vector<uint32_t> free_ids_ ABSL_GUARDED_BY(mu_);
  // The status of the last point, for the deltas of the next.
  std::optional<batchd::v1::ServerStatus> last_ ABSL_GUARDED_BY(mu_);
  absl::Time last_at_ ABSL_GUARDED_BY(mu_);
};

}  // namespace batchd::server

#endif  // BATCHD_SERVER_OBSERVE_TIMELINE_H_
