// Kernels for the GPU tests and the benchmark: a synthetic "training step"
// of known duration, and a checksum that reads a slot after it. CUDA builds
// only.
#ifndef BATCHD_CLIENT_CUDA_TESTING_TEST_KERNELS_H_
#define BATCHD_CLIENT_CUDA_TESTING_TEST_KERNELS_H_

#include <cstddef>
#include <cstdint>

#include "client/cuda/runtime.h"
#include "client/cuda/status.h"

namespace batchd::cuda::testing {

// Enqueues one block that spins for `nanoseconds` of GPU time (global timer).
Status LaunchSpin(StreamHandle stream, uint64_t nanoseconds);

// Enqueues: spin for `nanoseconds`, then add the bytes of device memory
// `data` [0, bytes) into `*device_sum` (a device uint64, overwritten).
// Reading the data only after the spin makes an early overwrite of a slot
// visible in the sum.
Status LaunchSpinThenSum(StreamHandle stream, uint64_t nanoseconds,
                         const uint8_t* data, size_t bytes,
                         unsigned long long* device_sum);

}  // namespace batchd::cuda::testing

#endif  // BATCHD_CLIENT_CUDA_TESTING_TEST_KERNELS_H_
