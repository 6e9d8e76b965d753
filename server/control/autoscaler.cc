#include "server/control/autoscaler.h"

#include <pthread.h>

#include <algorithm>
#include <cstdio>
#include <map>

namespace batchd::server {
namespace {

// Smoothing of the per-worker decode rate: about the last 5 periods.
constexpr double kRateSmoothing = 0.2;

}  // namespace

Autoscaler::Autoscaler(AutoscalerOptions options, Pipeline* pipeline,
                       TrainerReports* reports)
    : options_(options),
      pipeline_(pipeline),
      reports_(reports),
      policy_(options.policy),
      last_step_(absl::Now()),
      last_busy_(pipeline->workers().busy_time()),
      last_alive_(pipeline->workers().alive_time()),
      last_decoded_(pipeline->counters().samples_decoded),
      thread_([this] { Loop(); }) {}

Autoscaler::~Autoscaler() {
  stop_.Notify();
  thread_.join();
}

void Autoscaler::Loop() {
  pthread_setname_np(pthread_self(), "batchd-autoscale");
  while (!stop_.WaitForNotificationWithTimeout(options_.period)) {
    Step(absl::Now());
  }
}

void Autoscaler::Step(absl::Time now) {
  WorkerPool& pool = pipeline_->workers();
  const absl::Duration busy = pool.busy_time();
  const absl::Duration alive = pool.alive_time();
  const uint64_t decoded = pipeline_->counters().samples_decoded;
  const std::map<std::string, batchd::v1::TrainerLoad> loads =
      reports_->Loads(now);

  AutoscaleDecision decision;
  {
    absl::MutexLock lock(&mu_);
    AutoscaleObservation obs;
    obs.now = now;
    obs.workers = pool.num_workers();
    const double busy_seconds = absl::ToDoubleSeconds(busy - last_busy_);
    const double alive_seconds = absl::ToDoubleSeconds(alive - last_alive_);
    const double seconds = absl::ToDoubleSeconds(now - last_step_);
    const double images = static_cast<double>(decoded - last_decoded_);
    obs.busy_fraction =
        alive_seconds > 0 ? std::min(1.0, busy_seconds / alive_seconds) : 0;
    obs.images_per_second = seconds > 0 ? images / seconds : 0;
    double demand = 0;
    for (const auto& [job, load] : loads) {
      obs.jobs.push_back({job, load.wait_ratio()});
      demand += load.demand_images_per_second();
    }
    last_step_ = now;
    last_busy_ = busy;
    last_alive_ = alive;
    last_decoded_ = decoded;

    // Capacity: what one busy worker decodes, times the most workers. A
    // period with little work says little about the rate, so it is skipped.
    if (busy_seconds > 0.05 && images > 0) {
      const double rate = images / busy_seconds;
      images_per_busy_second_ =
          images_per_busy_second_ == 0
              ? rate
              : images_per_busy_second_ +
                    kRateSmoothing * (rate - images_per_busy_second_);
    }
    const int most =
        options_.enabled ? options_.policy.max_workers : pool.num_workers();
    const double capacity = images_per_busy_second_ * most;
    capacity_demand_ratio_ = capacity > 0 ? demand / capacity : 0;

    if (!options_.enabled) return;
    decision = policy_.Observe(obs);
    if (decision.action == AutoscaleDecision::Action::kHold) return;
  }
  // Shrinking waits for the surplus workers' current samples: not under
  // mu_, which the status reads.
  pool.SetNumWorkers(decision.workers);
  std::fprintf(stderr, "batchd: autoscale: %s\n", decision.reason.c_str());
  absl::MutexLock lock(&mu_);
  switch (decision.action) {
    case AutoscaleDecision::Action::kGrow: ++grows_; break;
    case AutoscaleDecision::Action::kShrink: ++shrinks_; break;
    case AutoscaleDecision::Action::kStepBack: ++step_backs_; break;
    case AutoscaleDecision::Action::kHold: break;
  }
  last_change_ = decision.reason;
  last_change_at_ = now;
}

void Autoscaler::Fill(batchd::v1::ServerStatus* status) {
  absl::MutexLock lock(&mu_);
  batchd::v1::AutoscaleStatus* autoscale = status->mutable_autoscale();
  autoscale->set_enabled(options_.enabled);
  if (options_.enabled) {
    autoscale->set_min_workers(options_.policy.min_workers);
    autoscale->set_max_workers(options_.policy.max_workers);
  }
  autoscale->set_grows(grows_);
  autoscale->set_shrinks(shrinks_);
  autoscale->set_step_backs(step_backs_);
  autoscale->set_last_change(last_change_);
  if (!last_change_.empty()) {
    autoscale->set_last_change_seconds_ago(
        absl::ToDoubleSeconds(absl::Now() - last_change_at_));
  }
  status->set_capacity_demand_ratio(capacity_demand_ratio_);
}

}  // namespace batchd::server
