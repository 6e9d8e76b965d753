#include "tools/augment_replay.h"

namespace batchd::tools {

absl::StatusOr<bool> ReplayGeometryOp(const std::string& op,
                                  const ReplayArgs& args,
                                  server::augment::Image image) {
  (void)op;
  (void)args;
  (void)image;
  return false;
}

}  // namespace batchd::tools
