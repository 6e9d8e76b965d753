// Keeps glibc malloc from returning multi-megabyte buffers to the kernel
// after every use.
//
// gRPC allocates and frees a buffer per received or sent message (up to
// 4 MiB here). With glibc's defaults those come from mmap and go back with
// munmap, so every message pays page faults and, on a VM, TLB shootdowns:
// measured on a 2-core VM, a client streaming 3 epochs used 4.0 s of CPU
// without this and 0.6 s with it (BENCHMARKS.md). The cost is that up to
// 256 MiB of freed memory may stay in the process's heap.
//
// Idempotent and thread-safe; call once at start-up.
#ifndef BATCHD_COMMON_MALLOC_TUNING_H_
#define BATCHD_COMMON_MALLOC_TUNING_H_

namespace batchd::common {

void TuneMallocForLargeBuffers();

}  // namespace batchd::common

#endif  // BATCHD_COMMON_MALLOC_TUNING_H_
