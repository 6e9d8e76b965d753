#include "server/augment/color_ops.h"

namespace batchd::server::augment {}  // namespace batchd::server::augment
