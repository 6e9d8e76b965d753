// The CPU path of erase_mix.h. It normalises with NormalizeCpu's table,
// then erases and mixes in place, sample by sample, in float32 (a scratch
// batch for float16/bfloat16 output, rounded once at the end): the same
// operations, in the same order, as the per-element function the kernel
// runs (erase_mix_math.h), so both give the same bits; the test checks it
// against that function run on the host. Compiled with -ffp-contract=off.
#include "client/cuda/erase_mix.h"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "client/cuda/erase_mix_math.h"

namespace batchd::cuda {
namespace {

namespace math = erase_mix_math;

EraseMixElementParams ToElementParams(const NormalizeParams& p,
                                      const MixParams& mix) {
  EraseMixElementParams e;
  e.n = p.n;
  e.c = p.c;
  e.h = p.h;
  e.w = p.w;
  e.in_nhwc = p.in_layout == Layout::kNHWC;
  for (int c = 0; c < kMaxChannels; ++c) {
    e.scale[c] = p.scale[c];
    e.bias[c] = p.bias[c];
  }
  e.mix = mix;
  return e;
}

// Offset of (c, y, x) within one sample in `layout`.
inline uint64_t At(const NormalizeParams& p, bool out_nhwc, uint64_t c,
                   uint64_t y, uint64_t x) {
  return out_nhwc ? (y * p.w + x) * p.c + c : (c * p.h + y) * p.w + x;
}

void Erase(float* sample, const NormalizeParams& p, bool out_nhwc,
           const EraseRect& r) {
  for (uint64_t c = 0; c < p.c; ++c) {
    for (uint64_t y = 0; y < r.height; ++y) {
      for (uint64_t x = 0; x < r.width; ++x) {
        sample[At(p, out_nhwc, c, r.top + y, r.left + x)] =
            r.noise ? math::Noise(r.noise_key, (c * r.height + y) * r.width + x)
                    : 0.0f;
      }
    }
  }
}

// Sample `i` (in place) mixed with `rolled`, the previous sample as it was
// before mixing.
void Mix(float* sample, const float* rolled, const NormalizeParams& p,
         bool out_nhwc, const MixParams& mix) {
  const uint64_t size = p.c * p.h * p.w;
  if (mix.kind == MixKind::kMixup) {
    for (uint64_t k = 0; k < size; ++k) {
      sample[k] = math::Add(math::Mul(sample[k], mix.lambda_self),
                            math::Mul(rolled[k], mix.lambda_rolled));
    }
    return;
  }
  for (uint64_t c = 0; c < p.c; ++c) {
    for (uint64_t y = mix.box_top; y < mix.box_top + uint64_t{mix.box_height};
         ++y) {
      for (uint64_t x = mix.box_left;
           x < mix.box_left + uint64_t{mix.box_width}; ++x) {
        const uint64_t at = At(p, out_nhwc, c, y, x);
        sample[at] = rolled[at];
      }
    }
  }
}

// `out` (float32, output layout) normalised, erased and mixed.
void EraseMixFloat(const uint8_t* src, float* out, const NormalizeParams& p,
                   const EraseMix& em) {
  NormalizeParams f32 = p;
  f32.out_dtype = DType::kFloat32;
  NormalizeCpu(src, out, f32);
  const bool out_nhwc = p.out_layout == Layout::kNHWC;
  const uint64_t size = p.c * p.h * p.w;
  for (uint64_t n = 0; n < em.rects.size(); ++n) {
    const EraseRect& r = em.rects[n];
    if (r.height > 0 && r.width > 0) Erase(out + n * size, p, out_nhwc, r);
  }
  if (em.mix.kind == MixKind::kNone || p.n == 0) return;
  // Sample 0 mixes with the last as it was: keep it before it changes.
  const std::vector<float> last(out + (p.n - 1) * size, out + p.n * size);
  for (uint64_t n = p.n; n-- > 0;) {
    const float* rolled = n == 0 ? last.data() : out + (n - 1) * size;
    Mix(out + n * size, rolled, p, out_nhwc, em.mix);
  }
}

}  // namespace

Status MakeMixParams(MixKind kind, double lambda, CutmixBox box,
                     MixParams* mix) {
  if (!(lambda >= 0 && lambda <= 1)) {
    return InvalidArgumentError("mix lambda " + std::to_string(lambda) +
                                " is outside [0, 1]");
  }
  MixParams m;
  m.kind = kind;
  m.lambda_self = static_cast<float>(lambda);
  m.lambda_rolled = static_cast<float>(1.0 - lambda);
  if (kind == MixKind::kCutmix) {
    m.box_top = box.top;
    m.box_left = box.left;
    m.box_height = box.height;
    m.box_width = box.width;
  }
  *mix = m;
  return OkStatus();
}

Status CheckEraseMix(const NormalizeParams& p, const EraseMix& em) {
  if (!em.active()) return OkStatus();
  if (p.out_dtype == DType::kUint8) {
    return InvalidArgumentError(
        "RandomErasing and MixUp/CutMix work on the normalised tensor: ask "
        "for a float output (normalize, or a float dtype), not uint8");
  }
  if (!em.rects.empty() && em.rects.size() != p.n) {
    return InvalidArgumentError(
        "erasing has " + std::to_string(em.rects.size()) +
        " rectangles for a batch of " + std::to_string(p.n));
  }
  auto inside = [&](uint64_t top, uint64_t left, uint64_t height,
                    uint64_t width) {
    return top + height <= p.h && left + width <= p.w;
  };
  for (size_t i = 0; i < em.rects.size(); ++i) {
    const EraseRect& r = em.rects[i];
    if (!inside(r.top, r.left, r.height, r.width)) {
      return InvalidArgumentError(
          "erased rectangle of sample " + std::to_string(i) + " (top " +
          std::to_string(r.top) + ", left " + std::to_string(r.left) +
          ", " + std::to_string(r.height) + "x" + std::to_string(r.width) +
          ") is outside the " + std::to_string(p.h) + "x" +
          std::to_string(p.w) + " image");
    }
  }
  const MixParams& m = em.mix;
  if (m.kind == MixKind::kCutmix &&
      !inside(m.box_top, m.box_left, m.box_height, m.box_width)) {
    return InvalidArgumentError("CutMix box is outside the " +
                                std::to_string(p.h) + "x" +
                                std::to_string(p.w) + " image");
  }
  return OkStatus();
}

void NormalizeEraseMixCpu(const uint8_t* src, void* dst,
                          const NormalizeParams& p, const EraseMix& em) {
  if (p.out_dtype == DType::kFloat32) {
    EraseMixFloat(src, static_cast<float*>(dst), p, em);
    return;
  }
  std::vector<float> scratch(p.elements());
  EraseMixFloat(src, scratch.data(), p, em);
  uint16_t* out = static_cast<uint16_t*>(dst);
  const bool half = p.out_dtype == DType::kFloat16;
  for (size_t k = 0; k < scratch.size(); ++k) {
    out[k] = half ? FloatToHalfBits(scratch[k])
                  : FloatToBFloat16Bits(scratch[k]);
  }
}

void NormalizeEraseMixElementwiseForTest(const uint8_t* src, float* dst,
                                         const NormalizeParams& p,
                                         const EraseMix& em) {
  const EraseMixElementParams e = ToElementParams(p, em.mix);
  const EraseRect* rects = em.rects.empty() ? nullptr : em.rects.data();
  const bool out_nhwc = p.out_layout == Layout::kNHWC;
  const uint64_t size = p.c * p.h * p.w;
  for (uint64_t n = 0; n < p.n; ++n) {
    for (uint64_t c = 0; c < p.c; ++c) {
      for (uint64_t y = 0; y < p.h; ++y) {
        for (uint64_t x = 0; x < p.w; ++x) {
          dst[n * size + At(p, out_nhwc, c, y, x)] =
              math::Mixed(src, e, rects, n, c, y, x);
        }
      }
    }
  }
}

Status SoftLabels(const int32_t* labels, size_t n, uint32_t num_classes,
                  float smoothing, const MixParams& mix, float* out) {
  if (num_classes == 0) {
    return InvalidArgumentError("soft labels need num_classes >= 1");
  }
  if (!(smoothing >= 0 && smoothing < 1)) {
    return InvalidArgumentError("label smoothing " +
                                std::to_string(smoothing) +
                                " is outside [0, 1)");
  }
  for (size_t i = 0; i < n; ++i) {
    if (labels[i] < 0 || static_cast<uint32_t>(labels[i]) >= num_classes) {
      return InvalidArgumentError(
          "label " + std::to_string(labels[i]) + " of sample " +
          std::to_string(i) + " is outside 0.." +
          std::to_string(num_classes - 1) +
          ": raise the plan's mix num_classes to the dataset's classes");
    }
  }
  // timm's off_value = smoothing / num_classes, on_value = 1 - smoothing
  // + off_value, in double, then float32.
  const double off_d = static_cast<double>(smoothing) / num_classes;
  const float off = static_cast<float>(off_d);
  const float on = static_cast<float>(1.0 - smoothing + off_d);
  for (size_t i = 0; i < n; ++i) {
    const int32_t self = labels[i];
    const int32_t rolled = labels[i == 0 ? n - 1 : i - 1];
    float* row = out + i * num_classes;
    for (uint32_t k = 0; k < num_classes; ++k) {
      const float t_self = static_cast<int32_t>(k) == self ? on : off;
      const float t_rolled = static_cast<int32_t>(k) == rolled ? on : off;
      row[k] = math::Add(math::Mul(t_self, mix.lambda_self),
                         math::Mul(t_rolled, mix.lambda_rolled));
    }
  }
  return OkStatus();
}

float ErasingNoise(uint64_t key, uint64_t k) { return math::Noise(key, k); }

}  // namespace batchd::cuda
