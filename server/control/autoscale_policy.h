// AutoscalePolicy: decides the decode worker count (--workers auto) from a
// sequence of observations of the daemon: how busy its workers are, how many
// images they decode, and how long each job's trainers wait for input. Pure:
// no threads, no clock, no gRPC; the Autoscaler (server/control/autoscaler.h) feeds
// it once a second and applies its decisions, and tests feed it traces.
//
// The rule (docs/autoscaling.md):
// - Grow by max(1, n/4) workers when some job's trainers have waited more
//   than `grow_wait_ratio` of their time, with the workers at least
//   `saturated_busy` busy, for `grow_after`: they are input-bound and the
//   workers are the bottleneck.
// - Judge each growth `cooldown` later: it stands when the images decoded
//   per second rose by `min_gain` or the trainers stopped waiting. Otherwise
//   the host has no spare cores (another thread makes every decode slower),
//   so it steps back and does not try that count again for `retry_after`.
// - Shrink when no job's trainers wait more than `idle_wait_ratio` and fewer
//   workers would still be at most `shrink_busy` busy, for `shrink_after`:
//   to the fewest that would be.
// - Nothing changes within `cooldown` of a change. Between the grow and
//   shrink thresholds nothing happens: that gap, the cooldown and the
//   retry hold are what keep a noisy signal from moving the pool back and
//   forth.
//
// Jobs whose trainers send no reports do not make the pool grow; their load
// still shows in the busy fraction, so it does not shrink under them.
//
// Not thread-safe; one caller.
#ifndef BATCHD_SERVER_CONTROL_AUTOSCALE_POLICY_H_
#define BATCHD_SERVER_CONTROL_AUTOSCALE_POLICY_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace batchd::server {

struct AutoscalePolicyOptions {
  int min_workers = 1;
  int max_workers = 1;
  // A job whose trainers wait more than this share of their time is
  // input-bound: 5 % is the point where the diagnosis calls it so.
  double grow_wait_ratio = 0.05;
  // Trainers that wait less than this are compute-bound; fewer workers are
  // considered only when every job's are.
  double idle_wait_ratio = 0.02;
  // Workers this busy have no slack left for more images.
  double saturated_busy = 0.80;
  // Shrink to the fewest workers whose projected busy fraction is at most
  // this: below saturated_busy, so that the smaller pool is not grown again
  // at once.
  double shrink_busy = 0.60;
  // A growth step must raise the images decoded per second by this share,
  // unless it ended the trainers' wait; less means the host is out of
  // cores. Noise on one 1 s sample here is 2-3 %.
  double min_gain = 0.05;
  absl::Duration grow_after = absl::Seconds(2);
  absl::Duration shrink_after = absl::Seconds(8);
  // After a change: time for the new workers to start and the trainers'
  // next reports to arrive. The throughput a growth is judged by is the
  // mean over the second half of it.
  absl::Duration cooldown = absl::Seconds(4);
  // After a step back, the count that did not help is not tried again for
  // this long.
  absl::Duration retry_after = absl::Seconds(60);
};

// Checks the bounds and thresholds; INVALID_ARGUMENT says which is wrong.
absl::Status ValidateAutoscalePolicyOptions(const AutoscalePolicyOptions& o);

struct AutoscaleObservation {
  struct Job {
    std::string job;
    // Share of its trainers' time spent waiting, 0..1.
    double wait_ratio = 0;
  };
  absl::Time now;
  // Workers during the interval that ended at `now`.
  int workers = 1;
  // Share of the workers' time spent on tasks over that interval, 0..1.
  double busy_fraction = 0;
  // Images decoded per second over that interval.
  double images_per_second = 0;
  // Jobs whose trainers reported recently.
  std::vector<Job> jobs;
};

struct AutoscaleDecision {
  enum class Action { kHold, kGrow, kShrink, kStepBack };
  Action action = Action::kHold;
  // The worker count to have; equals the observation's when holding.
  int workers = 1;
  // One line, for the log and the status: "grow 1 -> 2: job \"a\" waits
  // 43 %, workers 97 % busy". Empty when holding.
  std::string reason;
};

class AutoscalePolicy {
 public:
  // REQUIRES: ValidateAutoscalePolicyOptions(options).ok().
  explicit AutoscalePolicy(AutoscalePolicyOptions options);

  // Takes the next observation (`now` increasing) and says what to do.
  AutoscaleDecision Observe(const AutoscaleObservation& observation);

 private:
  AutoscaleDecision Change(AutoscaleDecision::Action action, int from, int to,
                           std::string why, absl::Time now);

  const AutoscalePolicyOptions options_;
  // When the last change was made, and to how many workers.
  absl::Time changed_at_ = absl::InfinitePast();
  int changed_to_ = 0;
  // A growth waiting to be judged: the count before it, the images per
  // second before it, and the samples taken since.
  bool judging_ = false;
  int grown_from_ = 0;
  double before_images_per_second_ = 0;
  double after_sum_ = 0;
  int after_samples_ = 0;
  // Since when the grow or the shrink condition has held (InfiniteFuture
  // while it does not), and the throughput seen meanwhile.
  absl::Time input_bound_since_ = absl::InfiniteFuture();
  double input_bound_sum_ = 0;
  int input_bound_samples_ = 0;
  absl::Time idle_since_ = absl::InfiniteFuture();
  // Growth to `blocked_workers_` or more is not tried before
  // `blocked_until_`.
  int blocked_workers_ = 0;
  absl::Time blocked_until_ = absl::InfinitePast();
};

}  // namespace batchd::server

#endif  // BATCHD_SERVER_CONTROL_AUTOSCALE_POLICY_H_
