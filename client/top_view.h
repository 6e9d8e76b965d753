// TopView: renders `batchd top` frames: one or more daemons' admin status
// (jobs, streams, images/s, worker busy %, stage times, substitutions, the
// verdict, and the shard cache's hit rate, amplification, whole/range
// choices and prefetch depth) as text lines that fit a terminal of a given
// size.
//
//   std::vector<std::string> lines = RenderTop(samples, &previous, 80, 24);
//
// Pure functions; thread-safe.
#ifndef BATCHD_CLIENT_TOP_VIEW_H_
#define BATCHD_CLIENT_TOP_VIEW_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "batchd/v1/admin.pb.h"

namespace batchd::client {

// One daemon's status as polled at `at`.
struct DaemonSample {
  std::string endpoint;
  absl::StatusOr<batchd::v1::ServerStatus> status;
  absl::Time at;
};

// Renders a frame of at most `height` lines, each at most `width` columns
// (display width; the text is ASCII). `previous` (may be null, or hold other
// endpoints) turns cumulative stage times into figures over the last poll
// interval, marked "(now)"; without it they are averages since the daemon
// started, marked "(avg)".
std::vector<std::string> RenderTop(const std::vector<DaemonSample>& samples,
                                   const std::vector<DaemonSample>* previous,
                                   int width, int height);

// "3d04h", "1h02m", "5m07s", "42s".
std::string FormatUptime(double seconds);

}  // namespace batchd::client

#endif  // BATCHD_CLIENT_TOP_VIEW_H_
