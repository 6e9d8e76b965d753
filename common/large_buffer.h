// Large, long-lived byte buffers (the daemon's batch buffers, the client's
// ring slots), mapped straight from the kernel. From 2 MiB up they are 2 MiB
// aligned, whole huge pages, advised as transparent huge pages
// (MADV_HUGEPAGE; the kernel's default THP mode on Debian is "madvise", so
// nothing is huge unless asked); smaller ones are whole ordinary pages.
//
// Why: a 9.6 MB batch written for the first time takes ~2,350 page faults
// with 4 KiB pages and 5 with 2 MiB pages; on a VM each fault is expensive
// (BENCHMARKS.md). Where the kernel has no huge page to give, the buffer is
// still valid, with ordinary pages.
//
// Thread-safe functions.
#ifndef BATCHD_COMMON_LARGE_BUFFER_H_
#define BATCHD_COMMON_LARGE_BUFFER_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"

namespace batchd::common {

// Unmaps a LargeBuffer's memory.
struct LargeBufferDeleter {
  size_t mapped_bytes = 0;  // what the buffer costs: its size, rounded up
  void operator()(uint8_t* data) const;
};

using LargeBuffer = std::unique_ptr<uint8_t[], LargeBufferDeleter>;

// Huge pages are 2 MiB on x86-64 and most arm64 kernels.
inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// A buffer of at least `bytes` bytes (>= 1), zero-filled by the kernel on
// first touch. RESOURCE_EXHAUSTED when the kernel refuses the mapping.
absl::StatusOr<LargeBuffer> AllocateLargeBuffer(size_t bytes);

}  // namespace batchd::common

#endif  // BATCHD_COMMON_LARGE_BUFFER_H_
