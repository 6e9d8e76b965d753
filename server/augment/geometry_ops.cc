#include "server/augment/geometry_ops.h"

namespace batchd::server::augment {}  // namespace batchd::server::augment
