// batchd-augment-replay: applies one augmentation op with fixed parameters
// to raw RGB images, so that the parity tests (tests/augment/) can compare
// batchd's ops with torchvision's on the same pixels and parameters.
//
// Input, one command per line on stdin:
//   op=<name> in=<raw RGB file> width=<w> height=<h> out=<file> [k=v ...]
// Each command writes `out` (the op's output, raw RGB, same size) and
// prints "ok" or "error: <why>" on its own line of stdout.
#ifndef BATCHD_TOOLS_AUGMENT_REPLAY_H_
#define BATCHD_TOOLS_AUGMENT_REPLAY_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "server/augment/image.h"

namespace batchd::tools {

// A command's `k=v` parameters.
class ReplayArgs {
 public:
  explicit ReplayArgs(std::map<std::string, std::string> values)
      : values_(std::move(values)) {}

  // The value of `key` as a number; an error naming the key when it is
  // missing or not a number.
  absl::StatusOr<double> Number(const std::string& key) const;
  // `key`'s value, or `fallback` when absent.
  double NumberOr(const std::string& key, double fallback) const;
  std::string Text(const std::string& key) const;

 private:
  std::map<std::string, std::string> values_;
};

// Applies op `op` of the colour ops (server/augment/color_ops.h) to
// `image`: true when `op` is one of them, false when it is not (another
// table may know it), an error for bad parameters.
absl::StatusOr<bool> ReplayColorOp(const std::string& op,
                                   const ReplayArgs& args,
                                   server::augment::Image image);

// The same for the geometric ops (server/augment/geometry_ops.h) and the
// crop's resize interpolations.
absl::StatusOr<bool> ReplayGeometryOp(const std::string& op,
                                      const ReplayArgs& args,
                                      server::augment::Image image);

}  // namespace batchd::tools

#endif  // BATCHD_TOOLS_AUGMENT_REPLAY_H_
