#include "client/prefetch_growth.h"

#include <algorithm>

namespace batchd::client {

size_t PrefetchGrowth::Look(absl::Time now, const Steps& steps, size_t active,
                            size_t capacity) {
  if (active == capacity) return 0;
  if (at_ == absl::InfinitePast()) {
    at_ = now;
    last_ = steps;
    return 0;
  }
  if (now - at_ < kLookInterval) return 0;
  const uint64_t new_steps = steps.steps - last_.steps;
  if (new_steps < kMinSteps) return 0;  // too few to judge; wait
  const uint64_t waited_steps = steps.waited_steps - last_.waited_steps;
  const double waited_share =
      absl::FDivDuration(steps.waited - last_.waited, now - at_);
  at_ = now;
  last_ = steps;
  // Waits that matter, but on few steps: the daemons keep up on average,
  // so only the bursts hurt, and depth hides bursts.
  if (waited_share <= 0.05 || 2 * waited_steps > new_steps) return 0;
  return std::min(capacity - active, std::max<size_t>(1, active / 2));
}

}  // namespace batchd::client
