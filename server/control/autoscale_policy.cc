#include "server/control/autoscale_policy.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace batchd::server {
namespace {

using Action = AutoscaleDecision::Action;

// A share as a whole percentage, for the log line.
int Percent(double ratio) { return static_cast<int>(std::lround(ratio * 100)); }

}  // namespace

absl::Status ValidateAutoscalePolicyOptions(const AutoscalePolicyOptions& o) {
  if (o.min_workers < 1 || o.max_workers < o.min_workers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--min-workers is ", o.min_workers, " and --max-workers ",
        o.max_workers, "; need 1 <= --min-workers <= --max-workers"));
  }
  if (!(o.idle_wait_ratio >= 0 && o.idle_wait_ratio <= o.grow_wait_ratio &&
        o.grow_wait_ratio < 1)) {
    return absl::InvalidArgumentError(
        "autoscale wait thresholds: need 0 <= idle_wait_ratio <= "
        "grow_wait_ratio < 1");
  }
  if (!(o.shrink_busy > 0 && o.shrink_busy < o.saturated_busy &&
        o.saturated_busy <= 1)) {
    return absl::InvalidArgumentError(
        "autoscale busy thresholds: need 0 < shrink_busy < saturated_busy "
        "<= 1");
  }
  if (o.min_gain < 0 || o.cooldown <= absl::ZeroDuration() ||
      o.grow_after < absl::ZeroDuration() ||
      o.shrink_after < absl::ZeroDuration() ||
      o.retry_after < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "autoscale: min_gain and the durations must not be negative, and the "
        "cooldown must be positive");
  }
  return absl::OkStatus();
}

AutoscalePolicy::AutoscalePolicy(AutoscalePolicyOptions options)
    : options_(options) {}

AutoscaleDecision AutoscalePolicy::Change(Action action, int from, int to,
                                          std::string why, absl::Time now) {
  changed_at_ = now;
  changed_to_ = to;
  input_bound_since_ = absl::InfiniteFuture();
  idle_since_ = absl::InfiniteFuture();
  const char* verb = action == Action::kGrow     ? "grow"
                     : action == Action::kShrink ? "shrink"
                                                 : "step back";
  return AutoscaleDecision{action, to,
                           absl::StrCat(verb, " ", from, " -> ", to, ": ", why)};
}

AutoscaleDecision AutoscalePolicy::Observe(const AutoscaleObservation& obs) {
  const int n = obs.workers;
  const absl::Time now = obs.now;
  const AutoscaleDecision hold{Action::kHold, n, ""};
  if (n < options_.min_workers) {
    return Change(Action::kGrow, n, options_.min_workers,
                  "below --min-workers", now);
  }
  if (n > options_.max_workers) {
    return Change(Action::kShrink, n, options_.max_workers,
                  "above --max-workers", now);
  }
  const AutoscaleObservation::Job* worst = nullptr;
  for (const AutoscaleObservation::Job& job : obs.jobs) {
    if (worst == nullptr || job.wait_ratio > worst->wait_ratio) worst = &job;
  }
  const double worst_wait = worst == nullptr ? 0 : worst->wait_ratio;
  const bool cooling = now < changed_at_ + options_.cooldown;

  if (judging_ && n != changed_to_) judging_ = false;  // SetWorkers moved it
  if (judging_) {
    if (cooling) {
      if (now >= changed_at_ + options_.cooldown / 2) {
        after_sum_ += obs.images_per_second;
        ++after_samples_;
      }
      return hold;
    }
    judging_ = false;
    const double after =
        after_samples_ > 0 ? after_sum_ / after_samples_ : obs.images_per_second;
    const double before = before_images_per_second_;
    const bool gained = after >= before * (1 + options_.min_gain);
    if (!gained && worst_wait > options_.grow_wait_ratio) {
      blocked_workers_ = n;
      blocked_until_ = now + options_.retry_after;
      return Change(
          Action::kStepBack, n, grown_from_,
          absl::StrFormat("%d workers decoded %.0f images/s, %d decoded %.0f "
                          "(%+d %%): more workers are not more images on this "
                          "host; not tried again for %s",
                          n, after, grown_from_, before,
                          before > 0 ? Percent(after / before - 1) : 0,
                          absl::FormatDuration(options_.retry_after)),
          now);
    }
  }
  if (cooling) return hold;

  // Grow: input-bound, with the workers the bottleneck.
  const int ceiling = now < blocked_until_
                          ? std::min(options_.max_workers, blocked_workers_ - 1)
                          : options_.max_workers;
  if (worst_wait > options_.grow_wait_ratio &&
      obs.busy_fraction >= options_.saturated_busy && n < ceiling) {
    if (input_bound_since_ == absl::InfiniteFuture()) {
      input_bound_since_ = now;
      input_bound_sum_ = 0;
      input_bound_samples_ = 0;
    }
    input_bound_sum_ += obs.images_per_second;
    ++input_bound_samples_;
    if (now - input_bound_since_ >= options_.grow_after) {
      judging_ = true;
      grown_from_ = n;
      before_images_per_second_ = input_bound_sum_ / input_bound_samples_;
      after_sum_ = 0;
      after_samples_ = 0;
      const int to = std::min(ceiling, n + std::max(1, n / 4));
      return Change(Action::kGrow, n, to,
                    absl::StrFormat("job \"%s\" waits %d %% of its time, "
                                    "workers %d %% busy",
                                    worst->job, Percent(worst_wait),
                                    Percent(obs.busy_fraction)),
                    now);
    }
  } else {
    input_bound_since_ = absl::InfiniteFuture();
  }

  // Shrink: every job compute-bound, and fewer workers would do.
  const int fewest = std::max(
      options_.min_workers,
      static_cast<int>(std::ceil(obs.busy_fraction * n / options_.shrink_busy -
                                 1e-9)));
  if (worst_wait < options_.idle_wait_ratio && fewest < n) {
    if (idle_since_ == absl::InfiniteFuture()) idle_since_ = now;
    if (now - idle_since_ >= options_.shrink_after) {
      const std::string trainers =
          worst == nullptr
              ? std::string("no trainer reports")
              : absl::StrFormat("trainers wait %d %% at most", Percent(worst_wait));
      return Change(Action::kShrink, n, fewest,
                    absl::StrFormat("%s, workers %d %% busy (%d %% with %d)",
                                    trainers, Percent(obs.busy_fraction),
                                    Percent(obs.busy_fraction * n / fewest),
                                    fewest),
                    now);
    }
  } else {
    idle_since_ = absl::InfiniteFuture();
  }
  return hold;
}

}  // namespace batchd::server
