#include "common/malloc_tuning.h"

#include <malloc.h>

#include <mutex>

namespace batchd::common {

void TuneMallocForLargeBuffers() {
  static std::once_flag once;
  std::call_once(once, [] {
    // 32 MiB is the largest threshold glibc accepts (larger values are
    // silently ignored). Setting either value also stops glibc's dynamic
    // threshold adjustment, which is what made runs bimodal.
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
  });
}

}  // namespace batchd::common
