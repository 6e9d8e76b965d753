// LogLimiter: decides which lines of one kind are logged, so that a peer
// who can cause a log line (a refused handshake, a failed TLS connection)
// cannot fill the log. At most `burst` lines per `interval`; the first line
// let through after some were dropped says how many.
//
//   static LogLimiter limiter(/*burst=*/5, absl::Seconds(10));
//   uint64_t dropped = 0;
//   if (limiter.Allow(absl::Now(), &dropped)) {
//     fprintf(stderr, "batchd: refused: %s (%llu similar lines dropped)\n",
//             why, dropped);
//   }
//
// Thread-safe.
#ifndef BATCHD_COMMON_LOG_LIMITER_H_
#define BATCHD_COMMON_LOG_LIMITER_H_

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace batchd::common {

class LogLimiter {
 public:
  LogLimiter(int burst, absl::Duration interval)
      : burst_(burst), interval_(interval) {}

  // Whether to log one more line at `now`. When it is, `*dropped` gets the
  // number of lines refused since the last one allowed.
  bool Allow(absl::Time now, uint64_t* dropped) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const int burst_;
  const absl::Duration interval_;

  absl::Mutex mu_;
  absl::Time window_start_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  int lines_in_window_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace batchd::common

#endif  // BATCHD_COMMON_LOG_LIMITER_H_
