// The GPU normalisation kernel (see normalize.h for the arithmetic).
//
// One thread per pixel (n, h, w): it reads the pixel's c bytes and writes c
// outputs. With NCHW output a warp's stores to each plane are contiguous; with
// NHWC input its loads are contiguous. Grid-stride loop, 64-bit indices.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "client/cuda/cuda_check.h"
#include "client/cuda/normalize.h"

namespace batchd::cuda {
namespace {

struct KernelParams {
  uint64_t pixels;  // n * h * w
  uint64_t hw;
  int c;
  float scale[kMaxChannels];
  float bias[kMaxChannels];
};

template <typename T>
__device__ __forceinline__ T Convert(float v, uint8_t x);

template <>
__device__ __forceinline__ float Convert<float>(float v, uint8_t) { return v; }
template <>
__device__ __forceinline__ uint8_t Convert<uint8_t>(float, uint8_t x) {
  return x;
}

struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};
template <>
__device__ __forceinline__ Half Convert<Half>(float v, uint8_t) {
  return Half{__half_as_ushort(__float2half_rn(v))};
}
template <>
__device__ __forceinline__ BFloat16 Convert<BFloat16>(float v, uint8_t) {
  return BFloat16{__bfloat16_as_ushort(__float2bfloat16_rn(v))};
}

template <typename T, bool kInNHWC, bool kOutNHWC>
__global__ void NormalizeKernel(const uint8_t* __restrict__ src,
                                T* __restrict__ dst, KernelParams p) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t pixel = static_cast<uint64_t>(blockIdx.x) * blockDim.x +
                        threadIdx.x;
       pixel < p.pixels; pixel += stride) {
    const uint64_t n = pixel / p.hw;
    const uint64_t i = pixel - n * p.hw;
    const uint64_t image = n * p.hw * p.c;
#pragma unroll
    for (int c = 0; c < kMaxChannels; ++c) {
      if (c < p.c) {
        const uint64_t in = kInNHWC ? image + i * p.c + c : image + c * p.hw + i;
        const uint64_t out =
            kOutNHWC ? image + i * p.c + c : image + c * p.hw + i;
        const uint8_t x = src[in];
        dst[out] = Convert<T>(
            __fmaf_rn(static_cast<float>(x), p.scale[c], p.bias[c]), x);
      }
    }
  }
}

template <typename T>
Status Launch(const uint8_t* src, void* dst, const NormalizeParams& params,
              const KernelParams& kp, cudaStream_t stream) {
  constexpr int kThreads = 256;
  // Enough blocks to fill any current GPU; the loop covers the rest.
  const uint64_t wanted = (kp.pixels + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(std::min<uint64_t>(wanted, 65535));
  T* out = static_cast<T*>(dst);
  const bool in_nhwc = params.in_layout == Layout::kNHWC;
  const bool out_nhwc = params.out_layout == Layout::kNHWC;
  if (in_nhwc && out_nhwc) {
    NormalizeKernel<T, true, true><<<blocks, kThreads, 0, stream>>>(src, out, kp);
  } else if (in_nhwc) {
    NormalizeKernel<T, true, false><<<blocks, kThreads, 0, stream>>>(src, out, kp);
  } else if (out_nhwc) {
    NormalizeKernel<T, false, true><<<blocks, kThreads, 0, stream>>>(src, out, kp);
  } else {
    NormalizeKernel<T, false, false><<<blocks, kThreads, 0, stream>>>(src, out, kp);
  }
  BATCHD_CUDA_CALL(cudaGetLastError());
  return OkStatus();
}

}  // namespace

Status NormalizeOnDevice(const uint8_t* device_src, void* device_dst,
                         const NormalizeParams& params, StreamHandle stream) {
  KernelParams kp;
  kp.pixels = params.n * params.h * params.w;
  kp.hw = params.h * params.w;
  kp.c = static_cast<int>(params.c);
  for (int c = 0; c < kMaxChannels; ++c) {
    kp.scale[c] = params.scale[c];
    kp.bias[c] = params.bias[c];
  }
  if (kp.pixels == 0) return OkStatus();
  switch (params.out_dtype) {
    case DType::kUint8:
      return Launch<uint8_t>(device_src, device_dst, params, kp, stream);
    case DType::kFloat32:
      return Launch<float>(device_src, device_dst, params, kp, stream);
    case DType::kFloat16:
      return Launch<Half>(device_src, device_dst, params, kp, stream);
    case DType::kBFloat16:
      return Launch<BFloat16>(device_src, device_dst, params, kp, stream);
  }
  return InvalidArgumentError("unknown output dtype");
}

}  // namespace batchd::cuda
