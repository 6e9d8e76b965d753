// Timeline: the daemon's last minutes, one point a second, for the live
// page on the metrics port (GET /) and GET /api/timeline.
//
// Each point is made from one admin status (batchd.v1.ServerStatus, the
// very message GetStatus returns and `batchd top` renders) and the status
// before it: per job images/s, trainer wait and demand; workers, busy
// fraction and autoscale changes; per-stage ms per image over the second;
// buffer bytes and the budget; substitutions per second; capacity; and the
// daemon's verdict (common/daemon_verdict.h).
//
//   Timeline timeline(/*capacity=*/900);
//   timeline.Add(admin.Status(), absl::Now());   // once a second
//   std::string json = timeline.Json();          // columnar, see Json()
//
// Holds at most `capacity` points; each holds at most the jobs its status
// listed. No thread, no clock of its own: the caller passes `at`.
// Thread-safe.
#ifndef BATCHD_SERVER_OBSERVE_TIMELINE_H_
#define BATCHD_SERVER_OBSERVE_TIMELINE_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

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
};

class Timeline {
 public:
  explicit Timeline(int capacity = kTimelinePoints);

  // Adds the point for `status`, taken at `at` (later than the last).
  void Add(const batchd::v1::ServerStatus& status, absl::Time at)
      ABSL_LOCKS_EXCLUDED(mu_);

  // The points, oldest first.
  std::vector<TimelinePoint> Points() const ABSL_LOCKS_EXCLUDED(mu_);

  // The points as JSON, columns of equal length aligned on "t" (Unix
  // seconds), `null` where a value is absent:
  //   {"interval_seconds":1,"capacity":900,
  //    "verdict":{"t":..,"kind":"compute-bound","line":"..."},
  //    "t":[..],"workers":[..],"busy_percent":[..],"queued_samples":[..],
  //    "buffer_reserved_bytes":[..],"buffer_idle_bytes":[..],
  //    "buffer_limit_bytes":[..],"substitutions_per_second":[..],
  //    "capacity_images_per_second":[..],
  //    "stage_ms_per_image":{"read":[..],"decode":[..],"transform":[..],
  //                          "augment":[..],"send":[..]},
  //    "jobs":[{"job":"a","images_per_second":[..],"wait_percent":[..],
  //             "compute_percent":[..],"demand_images_per_second":[..]}],
  //    "autoscale":[{"t":..,"workers":2,"change":"grow 1 -> 2: ..."}]}
  // Jobs are sorted by name; a job has values only where its status
  // listed it.
  std::string Json() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const int capacity_;
  mutable absl::Mutex mu_;
  std::deque<TimelinePoint> points_ ABSL_GUARDED_BY(mu_);
  // The status of the last point, for the deltas of the next.
  std::optional<batchd::v1::ServerStatus> last_ ABSL_GUARDED_BY(mu_);
  absl::Time last_at_ ABSL_GUARDED_BY(mu_);
};

}  // namespace batchd::server

#endif  // BATCHD_SERVER_OBSERVE_TIMELINE_H_
