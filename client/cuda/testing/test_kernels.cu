#include "client/cuda/testing/test_kernels.h"

#include <cuda_runtime.h>

#include "client/cuda/cuda_check.h"

namespace batchd::cuda::testing {
namespace {

__device__ uint64_t GlobalTimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ void Spin(uint64_t nanoseconds) {
  const uint64_t start = GlobalTimer();
  while (GlobalTimer() - start < nanoseconds) {
  }
}

__global__ void SpinKernel(uint64_t nanoseconds) {
  if (threadIdx.x == 0) Spin(nanoseconds);
}

__global__ void SpinThenSumKernel(uint64_t nanoseconds, const uint8_t* data,
                                  size_t bytes, unsigned long long* sum) {
  if (threadIdx.x == 0) Spin(nanoseconds);
  __syncthreads();
  unsigned long long local = 0;
  for (size_t i = threadIdx.x; i < bytes; i += blockDim.x) local += data[i];
  if (threadIdx.x == 0) *sum = 0;
  __syncthreads();
  atomicAdd(sum, local);
}

}  // namespace

Status LaunchSpin(StreamHandle stream, uint64_t nanoseconds) {
  SpinKernel<<<1, 32, 0, stream>>>(nanoseconds);
  BATCHD_CUDA_CALL(cudaGetLastError());
  return OkStatus();
}

Status LaunchSpinThenSum(StreamHandle stream, uint64_t nanoseconds,
                         const uint8_t* data, size_t bytes,
                         unsigned long long* device_sum) {
  SpinThenSumKernel<<<1, 256, 0, stream>>>(nanoseconds, data, bytes,
                                           device_sum);
  BATCHD_CUDA_CALL(cudaGetLastError());
  return OkStatus();
}

}  // namespace batchd::cuda::testing
