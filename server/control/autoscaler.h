// Autoscaler: the daemon's worker-pool controller. Once a `period` it
// measures the pool (busy fraction, images decoded) and the trainers'
// reports (server/observe/trainer_reports.h), keeps the capacity-demand ratio that
// a Kubernetes HorizontalPodAutoscaler targets, and, when enabled
// (--workers auto), feeds AutoscalePolicy and applies its decisions: each
// change is logged as one line on stderr and counted in the status.
//
// Owns its thread. Thread-safe.
#ifndef BATCHD_SERVER_CONTROL_AUTOSCALER_H_
#define BATCHD_SERVER_CONTROL_AUTOSCALER_H_

#include <cstdint>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "batchd/v1/admin.pb.h"
#include "server/control/autoscale_policy.h"
#include "server/observe/trainer_reports.h"
#include "server/pipeline/pipeline.h"

namespace batchd::server {

struct AutoscalerOptions {
  // Resize the pool (--workers auto); otherwise only measure.
  bool enabled = false;
  // Bounds and thresholds; unused when not `enabled`.
  AutoscalePolicyOptions policy;
  absl::Duration period = absl::Seconds(1);
};

class Autoscaler {
 public:
  // `pipeline` and `reports` are not owned and must outlive this.
  // REQUIRES: ValidateAutoscalePolicyOptions(options.policy).ok() when
  // options.enabled.
  Autoscaler(AutoscalerOptions options, Pipeline* pipeline,
             TrainerReports* reports);
  ~Autoscaler();
  Autoscaler(const Autoscaler&) = delete;
  Autoscaler& operator=(const Autoscaler&) = delete;

  // Sets status->autoscale and status->capacity_demand_ratio.
  void Fill(batchd::v1::ServerStatus* status) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Loop();
  // One period, ended at `now`.
  void Step(absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);

  const AutoscalerOptions options_;
  Pipeline* const pipeline_;
  TrainerReports* const reports_;

  absl::Mutex mu_;
  AutoscalePolicy policy_ ABSL_GUARDED_BY(mu_);
  // The pool's totals at the previous step.
  absl::Time last_step_ ABSL_GUARDED_BY(mu_);
  absl::Duration last_busy_ ABSL_GUARDED_BY(mu_);
  absl::Duration last_alive_ ABSL_GUARDED_BY(mu_);
  uint64_t last_decoded_ ABSL_GUARDED_BY(mu_) = 0;
  // Images one worker decodes per second of work, smoothed; 0 until known.
  double images_per_busy_second_ ABSL_GUARDED_BY(mu_) = 0;
  double capacity_demand_ratio_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t grows_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t shrinks_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t step_backs_ ABSL_GUARDED_BY(mu_) = 0;
  std::string last_change_ ABSL_GUARDED_BY(mu_);
  absl::Time last_change_at_ ABSL_GUARDED_BY(mu_);

  absl::Notification stop_;
  std::thread thread_;  // last: starts after everything above exists
};

}  // namespace batchd::server

#endif  // BATCHD_SERVER_CONTROL_AUTOSCALER_H_
