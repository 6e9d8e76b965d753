// RandomErasing and MixUp/CutMix applied in the normalise step: the
// daemon draws the parameters (BatchHeader.erased, BatchHeader.mix), the
// client normalises (normalize.h), erases each sample's rectangle (0 or
// Normal(0, 1) noise from a counter-based generator keyed per sample), then
// mixes the batch with itself rolled by one sample, and makes the float
// soft labels. On the CPU (NormalizeEraseMixCpu) or in one GPU kernel
// (NormalizeEraseMixOnDevice), bit-identical (erase_mix_math.h says how).
// torchvision's order: RandomErasing is a per-sample transform after
// Normalize; the mix runs on the collated batch.
//
//   EraseMix em;
//   em.rects.resize(n);                 // one per sample; height 0: none
//   em.rects[3] = {.top = 10, .left = 20, .height = 30, .width = 40};
//   BATCHD_CUDA_RETURN_IF_ERROR(MakeMixParams(MixKind::kMixup, 0.7, {}, &em.mix));
//   BATCHD_CUDA_RETURN_IF_ERROR(CheckEraseMix(params, em));
//   NormalizeEraseMixCpu(src, dst, params, em);
//
// Pure functions; thread-safe.
#ifndef BATCHD_CLIENT_CUDA_ERASE_MIX_H_
#define BATCHD_CLIENT_CUDA_ERASE_MIX_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "client/cuda/normalize.h"
#include "client/cuda/runtime.h"
#include "client/cuda/status.h"

namespace batchd::cuda {

// One sample's erased rectangle, output pixels; height or width 0: none.
// Plain data, copied to the device as it is.
struct EraseRect {
  uint32_t top = 0, left = 0, height = 0, width = 0;
  uint32_t noise = 0;  // 0: the values become 0; 1: Normal(0, 1) noise
  uint32_t reserved = 0;
  uint64_t noise_key = 0;
};

enum class MixKind : uint32_t { kNone = 0, kMixup = 1, kCutmix = 2 };

// One batch's mix. lambda_self = float(lambda) and lambda_rolled =
// float(1 - lambda) (1 - lambda in double, then rounded), the scalars torch
// multiplies float tensors by.
struct MixParams {
  MixKind kind = MixKind::kNone;
  float lambda_self = 1.0f;
  float lambda_rolled = 0.0f;
  uint32_t box_top = 0, box_left = 0, box_height = 0, box_width = 0;
};

struct CutmixBox {
  uint32_t top = 0, left = 0, height = 0, width = 0;
};

// Fills `mix`; INVALID_ARGUMENT for a lambda outside [0, 1] or not finite.
Status MakeMixParams(MixKind kind, double lambda, CutmixBox box,
                     MixParams* mix);

struct EraseMix {
  // Empty (no erasing) or one per sample of the batch.
  std::vector<EraseRect> rects;
  MixParams mix;
  bool active() const { return !rects.empty() || mix.kind != MixKind::kNone; }
};

// What the per-element function reads (erase_mix_math.h).
struct EraseMixElementParams {
  uint64_t n = 0, c = 0, h = 0, w = 0;
  bool in_nhwc = true;
  float scale[kMaxChannels] = {};
  float bias[kMaxChannels] = {};
  MixParams mix;
};

// INVALID_ARGUMENT unless `em` fits `params`: float output (erasing and
// mixing need it), rects empty or one per sample, every rectangle and the
// CutMix box inside the h x w image.
Status CheckEraseMix(const NormalizeParams& params, const EraseMix& em);

// Normalises, erases and mixes `src` into `dst` as NormalizeCpu does
// (same buffers, same layouts). REQUIRES: CheckEraseMix(params, em) is OK.
void NormalizeEraseMixCpu(const uint8_t* src, void* dst,
                          const NormalizeParams& params, const EraseMix& em);

// The same on `stream`. `device_rects` holds params.n EraseRects in device
// memory, or is null for none; the mix comes from `mix`. UNAVAILABLE when
// built without CUDA. REQUIRES: as NormalizeEraseMixCpu.
Status NormalizeEraseMixOnDevice(const uint8_t* device_src, void* device_dst,
                                 const NormalizeParams& params,
                                 const EraseRect* device_rects,
                                 const MixParams& mix, StreamHandle stream);

// The soft labels [n, num_classes], row-major float: each label one-hot,
// smoothed (off = smoothing / num_classes, on = 1 - smoothing + off, as
// timm), then mixed as the pixels: row i = lambda_self * t[i] +
// lambda_rolled * t[i - 1] (t[n - 1] for i = 0). Each row sums to 1 up to
// float rounding. INVALID_ARGUMENT for a label outside 0..num_classes-1,
// num_classes 0 or a smoothing outside [0, 1).
Status SoftLabels(const int32_t* labels, size_t n, uint32_t num_classes,
                  float smoothing, const MixParams& mix, float* out);

// The per-element function the kernel runs, on the host, into float32
// `dst` (output layout): to check the CPU path against it without a device.
void NormalizeEraseMixElementwiseForTest(const uint8_t* src, float* dst,
                                         const NormalizeParams& params,
                                         const EraseMix& em);

// Noise value number `k` of a rectangle with `key` (ErasedRegion.noise),
// for tests.
float ErasingNoise(uint64_t key, uint64_t k);

}  // namespace batchd::cuda

#endif  // BATCHD_CLIENT_CUDA_ERASE_MIX_H_
