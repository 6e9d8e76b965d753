#include "common/large_buffer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "common/errno_status.h"

namespace batchd::common {

void LargeBufferDeleter::operator()(uint8_t* data) const {
  if (data != nullptr) ::munmap(data, mapped_bytes);
}

namespace {

absl::Status MapError(size_t bytes, int error) {
  return absl::ResourceExhaustedError(ErrnoMessage(
      error, absl::StrCat("cannot map a ", bytes, "-byte buffer")));
}

}  // namespace

absl::StatusOr<LargeBuffer> AllocateLargeBuffer(size_t bytes) {
  if (bytes == 0) bytes = 1;
  if (bytes > SIZE_MAX - 2 * kHugePageBytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot map a ", bytes, "-byte buffer"));
  }
  if (bytes < kHugePageBytes) {
    // Smaller than a huge page: whole ordinary pages, no advice (a huge page
    // would commit 2 MiB for it).
    const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    const size_t rounded = (bytes + page - 1) / page * page;
    void* raw = ::mmap(nullptr, rounded, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return MapError(bytes, errno);
    return LargeBuffer(static_cast<uint8_t*>(raw), LargeBufferDeleter{rounded});
  }
  // Whole huge pages, starting on a huge-page boundary: map one huge page
  // more than needed, then unmap the unaligned head and the tail.
  const size_t rounded =
      (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  const size_t mapped = rounded + kHugePageBytes;
  void* raw = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return MapError(bytes, errno);
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned =
      (start + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  if (aligned > start) ::munmap(raw, aligned - start);
  const uintptr_t end = start + mapped;
  if (end > aligned + rounded) {
    ::munmap(reinterpret_cast<void*>(aligned + rounded),
             end - (aligned + rounded));
  }
  uint8_t* data = reinterpret_cast<uint8_t*>(aligned);
  // Advice only: without THP support the buffer keeps ordinary pages.
  ::madvise(data, rounded, MADV_HUGEPAGE);
  return LargeBuffer(data, LargeBufferDeleter{rounded});
}

}  // namespace batchd::common
