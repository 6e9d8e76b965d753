// The GPU normalisation kernel (see normalize.h for the arithmetic).
//
// General kernel: one thread per pixel (n, h, w); it reads the pixel's c
// bytes and writes c outputs. With NCHW output a warp's stores to each plane
// are contiguous; with NHWC input its loads are contiguous. Grid-stride loop,
// 64-bit indices.
//
// Fast path for the common case (NHWC RGB in, NCHW out, h*w a multiple of 4,
// 16-byte aligned buffers): one thread per 4 pixels, three 32-bit loads and
// one vector store (4 outputs) per channel plane. Its per-group body is
// __host__ __device__ so that a host test checks its indexing on machines
// without a GPU (NormalizeGroupsOnHostForTest).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
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

// Four outputs stored with one aligned vector store.
template <typename T>
struct alignas(4 * sizeof(T)) Vec4 {
  T v[4];
};

__host__ __device__ __forceinline__ float Fma(float x, float scale,
                                              float bias) {
#ifdef __CUDA_ARCH__
  return __fmaf_rn(x, scale, bias);
#else
  return std::fma(x, scale, bias);
#endif
}

template <typename T>
__host__ __device__ __forceinline__ T ConvertAny(float v, uint8_t x);
template <>
__host__ __device__ __forceinline__ float ConvertAny<float>(float v, uint8_t) {
  return v;
}
template <>
__host__ __device__ __forceinline__ uint8_t ConvertAny<uint8_t>(float,
                                                                uint8_t x) {
  return x;
}
template <>
__host__ __device__ __forceinline__ Half ConvertAny<Half>(float v, uint8_t) {
  return Half{__half_as_ushort(__float2half_rn(v))};
}
template <>
__host__ __device__ __forceinline__ BFloat16 ConvertAny<BFloat16>(float v,
                                                                  uint8_t) {
  return BFloat16{__bfloat16_as_ushort(__float2bfloat16_rn(v))};
}

// Pixels 4g .. 4g+3 (all in one image since h*w % 4 == 0) of an NHWC RGB
// batch to NCHW.
template <typename T>
__host__ __device__ __forceinline__ void NormalizeGroup(
    const uint8_t* __restrict__ src, T* __restrict__ dst,
    const KernelParams& p, uint64_t g) {
  const uint64_t pixel = g * 4;
  const uint64_t n = pixel / p.hw;
  const uint64_t i = pixel - n * p.hw;
  const uint32_t* in = reinterpret_cast<const uint32_t*>(src + pixel * 3);
  const uint32_t words[3] = {in[0], in[1], in[2]};
#pragma unroll
  for (int c = 0; c < 3; ++c) {
    Vec4<T> out;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int byte = k * 3 + c;  // little-endian bytes of the three words
      const uint8_t x =
          static_cast<uint8_t>(words[byte / 4] >> (8 * (byte % 4)));
      out.v[k] = ConvertAny<T>(Fma(static_cast<float>(x), p.scale[c], p.bias[c]),
                               x);
    }
    *reinterpret_cast<Vec4<T>*>(dst + (n * 3 + c) * p.hw + i) = out;
  }
}

template <typename T>
__global__ void NormalizeRgbGroupsKernel(const uint8_t* __restrict__ src,
                                         T* __restrict__ dst, KernelParams p) {
  const uint64_t groups = p.pixels / 4;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t g = static_cast<uint64_t>(blockIdx.x) * blockDim.x +
                    threadIdx.x;
       g < groups; g += stride) {
    NormalizeGroup<T>(src, dst, p, g);
  }
}

bool UseRgbGroups(const uint8_t* src, const void* dst,
                  const NormalizeParams& params) {
  return params.c == 3 && params.in_layout == Layout::kNHWC &&
         params.out_layout == Layout::kNCHW && (params.h * params.w) % 4 == 0 &&
         reinterpret_cast<uintptr_t>(src) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(dst) % 16 == 0;
}

template <typename T>
Status Launch(const uint8_t* src, void* dst, const NormalizeParams& params,
              const KernelParams& kp, cudaStream_t stream) {
  constexpr int kThreads = 256;
  // Enough blocks to fill any current GPU; the loop covers the rest.
  const uint64_t wanted = (kp.pixels + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(std::min<uint64_t>(wanted, 65535));
  T* out = static_cast<T*>(dst);
  if (UseRgbGroups(src, dst, params)) {
    const uint64_t groups = kp.pixels / 4;
    const int group_blocks = static_cast<int>(
        std::min<uint64_t>((groups + kThreads - 1) / kThreads, 65535));
    NormalizeRgbGroupsKernel<T><<<group_blocks, kThreads, 0, stream>>>(
        src, out, kp);
    BATCHD_CUDA_CALL(cudaGetLastError());
    return OkStatus();
  }
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

namespace {

KernelParams ToKernelParams(const NormalizeParams& params) {
  KernelParams kp;
  kp.pixels = params.n * params.h * params.w;
  kp.hw = params.h * params.w;
  kp.c = static_cast<int>(params.c);
  for (int c = 0; c < kMaxChannels; ++c) {
    kp.scale[c] = params.scale[c];
    kp.bias[c] = params.bias[c];
  }
  return kp;
}

template <typename T>
void GroupsOnHost(const uint8_t* src, void* dst, const KernelParams& kp) {
  for (uint64_t g = 0; g < kp.pixels / 4; ++g) {
    NormalizeGroup<T>(src, static_cast<T*>(dst), kp, g);
  }
}

}  // namespace

bool NormalizeGroupsOnHostForTest(const uint8_t* src, void* dst,
                                  const NormalizeParams& params) {
  if (!UseRgbGroups(src, dst, params)) return false;
  const KernelParams kp = ToKernelParams(params);
  switch (params.out_dtype) {
    case DType::kUint8:
      GroupsOnHost<uint8_t>(src, dst, kp);
      break;
    case DType::kFloat32:
      GroupsOnHost<float>(src, dst, kp);
      break;
    case DType::kFloat16:
      GroupsOnHost<Half>(src, dst, kp);
      break;
    case DType::kBFloat16:
      GroupsOnHost<BFloat16>(src, dst, kp);
      break;
  }
  return true;
}

Status NormalizeOnDevice(const uint8_t* device_src, void* device_dst,
                         const NormalizeParams& params, StreamHandle stream) {
  const KernelParams kp = ToKernelParams(params);
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
