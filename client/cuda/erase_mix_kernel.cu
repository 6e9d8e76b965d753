// The GPU path of erase_mix.h: one thread per output element computes
// normalise + erase + mix through erase_mix_math.h's Mixed(), the function
// the CPU path is checked against, and rounds once to the output dtype.
// Grid-stride loop, 64-bit indices. Each element reads one or two input
// bytes (MixUp reads the rolled sample's too); RandomErasing's noise costs
// a Philox block per two values inside a rectangle.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "client/cuda/cuda_check.h"
#include "client/cuda/erase_mix.h"
#include "client/cuda/erase_mix_math.h"

namespace batchd::cuda {
namespace {

struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};

template <typename T>
__device__ __forceinline__ T FromFloat(float v);
template <>
__device__ __forceinline__ float FromFloat<float>(float v) { return v; }
template <>
__device__ __forceinline__ Half FromFloat<Half>(float v) {
  return Half{__half_as_ushort(__float2half_rn(v))};
}
template <>
__device__ __forceinline__ BFloat16 FromFloat<BFloat16>(float v) {
  return BFloat16{__bfloat16_as_ushort(__float2bfloat16_rn(v))};
}

template <typename T, bool kOutNHWC>
__global__ void EraseMixKernel(const uint8_t* __restrict__ src,
                               T* __restrict__ dst,
                               const EraseRect* __restrict__ rects,
                               EraseMixElementParams p) {
  const uint64_t total = p.n * p.c * p.h * p.w;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x +
                    threadIdx.x;
       i < total; i += stride) {
    uint64_t n, c, y, x;
    if (kOutNHWC) {
      c = i % p.c;
      const uint64_t pixel = i / p.c;
      x = pixel % p.w;
      y = (pixel / p.w) % p.h;
      n = pixel / (p.w * p.h);
    } else {
      x = i % p.w;
      y = (i / p.w) % p.h;
      c = (i / (p.w * p.h)) % p.c;
      n = i / (p.w * p.h * p.c);
    }
    dst[i] = FromFloat<T>(erase_mix_math::Mixed(src, p, rects, n, c, y, x));
  }
}

template <typename T>
Status Launch(const uint8_t* src, void* dst, const EraseRect* rects,
              const EraseMixElementParams& p, bool out_nhwc,
              cudaStream_t stream) {
  constexpr int kThreads = 256;
  const uint64_t total = p.n * p.c * p.h * p.w;
  const int blocks = static_cast<int>(
      std::min<uint64_t>((total + kThreads - 1) / kThreads, 65535));
  T* out = static_cast<T*>(dst);
  if (out_nhwc) {
    EraseMixKernel<T, true><<<blocks, kThreads, 0, stream>>>(src, out, rects, p);
  } else {
    EraseMixKernel<T, false><<<blocks, kThreads, 0, stream>>>(src, out, rects,
                                                              p);
  }
  BATCHD_CUDA_CALL(cudaGetLastError());
  return OkStatus();
}

}  // namespace

Status NormalizeEraseMixOnDevice(const uint8_t* device_src, void* device_dst,
                                 const NormalizeParams& params,
                                 const EraseRect* device_rects,
                                 const MixParams& mix, StreamHandle stream) {
  if (params.elements() == 0) return OkStatus();
  EraseMixElementParams p;
  p.n = params.n;
  p.c = params.c;
  p.h = params.h;
  p.w = params.w;
  p.in_nhwc = params.in_layout == Layout::kNHWC;
  for (int c = 0; c < kMaxChannels; ++c) {
    p.scale[c] = params.scale[c];
    p.bias[c] = params.bias[c];
  }
  p.mix = mix;
  const bool out_nhwc = params.out_layout == Layout::kNHWC;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (params.out_dtype) {
    case DType::kFloat32:
      return Launch<float>(device_src, device_dst, device_rects, p, out_nhwc, s);
    case DType::kFloat16:
      return Launch<Half>(device_src, device_dst, device_rects, p, out_nhwc, s);
    case DType::kBFloat16:
      return Launch<BFloat16>(device_src, device_dst, device_rects, p,
                              out_nhwc, s);
    case DType::kUint8:
      break;
  }
  return InvalidArgumentError(
      "RandomErasing and MixUp/CutMix need a float output dtype");
}

}  // namespace batchd::cuda
