#include "common/log_limiter.h"

namespace batchd::common {

bool LogLimiter::Allow(absl::Time now, uint64_t* dropped) {
  absl::MutexLock lock(&mu_);
  if (now - window_start_ >= interval_) {
    window_start_ = now;
    lines_in_window_ = 0;
  }
  if (lines_in_window_ >= burst_) {
    ++dropped_;
    return false;
  }
  ++lines_in_window_;
  *dropped = dropped_;
  dropped_ = 0;
  return true;
}

}  // namespace batchd::common
