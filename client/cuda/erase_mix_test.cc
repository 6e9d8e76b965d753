// RandomErasing and MixUp/CutMix on the CPU (erase_mix.h): the staged CPU
// path against the per-element function the kernel runs (bit for bit),
// against the definitions, the noise's distribution, and the soft labels.
#include "client/cuda/erase_mix.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "client/cuda/erase_mix_math.h"
#include "client/cuda/normalize.h"
#include "client/cuda/testing/mini_test.h"

namespace batchd::cuda {
namespace {

constexpr uint64_t kN = 5, kH = 12, kW = 10, kC = 3;

std::vector<uint8_t> RandomBatch(uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(kN * kH * kW * kC);
  for (uint8_t& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

NormalizeParams Params(Layout in, Layout out, DType dtype) {
  NormalizeSpec spec;
  spec.dtype = dtype;
  spec.layout = out;
  spec.mean = {0.485f, 0.456f, 0.406f};
  spec.std = {0.229f, 0.224f, 0.225f};
  const std::vector<uint64_t> shape =
      in == Layout::kNHWC ? std::vector<uint64_t>{kN, kH, kW, kC}
                          : std::vector<uint64_t>{kN, kC, kH, kW};
  NormalizeParams p;
  MakeNormalizeParams(shape, in, spec, &p);
  return p;
}

EraseMix Rects(bool noise) {
  EraseMix em;
  em.rects.resize(kN);
  em.rects[0] = {.top = 1, .left = 2, .height = 4, .width = 3};
  em.rects[2] = {.top = 0, .left = 0, .height = 11, .width = 9};
  em.rects[4] = {.top = 7, .left = 5, .height = 5, .width = 5};
  for (EraseRect& r : em.rects) {
    r.noise = noise ? 1 : 0;
    r.noise_key = 0x1234567890abcdefull + r.top;
  }
  return em;
}

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// Every combination the kernel sees: layouts, erasing 0 / noise / none,
// no mix / MixUp / CutMix. The CPU path must equal the per-element
// function exactly.
MINI_TEST(EraseMix, CpuPathEqualsTheKernelsElementFunction) {
  const std::vector<uint8_t> src = RandomBatch(1);
  for (Layout in : {Layout::kNHWC, Layout::kNCHW}) {
    for (Layout out : {Layout::kNHWC, Layout::kNCHW}) {
      const NormalizeParams p = Params(in, out, DType::kFloat32);
      for (int erase = 0; erase < 3; ++erase) {
        for (MixKind kind : {MixKind::kNone, MixKind::kMixup,
                             MixKind::kCutmix}) {
          EraseMix em = erase == 0 ? EraseMix() : Rects(erase == 2);
          MINI_ASSERT_OK(MakeMixParams(kind, 0.3716,
                                       {.top = 3, .left = 1, .height = 6,
                                        .width = 8},
                                       &em.mix));
          MINI_ASSERT_OK(CheckEraseMix(p, em));
          std::vector<float> cpu(p.elements()), element(p.elements());
          NormalizeEraseMixCpu(src.data(), cpu.data(), p, em);
          NormalizeEraseMixElementwiseForTest(src.data(), element.data(), p,
                                              em);
          int differ = 0;
          for (size_t k = 0; k < cpu.size(); ++k) {
            differ += Bits(cpu[k]) != Bits(element[k]);
          }
          MINI_EXPECT_EQ(differ, 0);
        }
      }
    }
  }
}

// The definitions: erased values are 0 inside the rectangle and the plain
// normalised value outside; MixUp is fl(fl(lambda a) + fl((1 - lambda) b))
// with b the previous sample (the last for sample 0); CutMix pastes the
// previous sample's box.
MINI_TEST(EraseMix, MatchesTheDefinitions) {
  const std::vector<uint8_t> src = RandomBatch(2);
  const NormalizeParams p = Params(Layout::kNHWC, Layout::kNCHW,
                                   DType::kFloat32);
  std::vector<float> plain(p.elements());
  NormalizeCpu(src.data(), plain.data(), p);
  const uint64_t size = kC * kH * kW;
  auto at = [&](uint64_t n, uint64_t c, uint64_t y, uint64_t x) {
    return n * size + (c * kH + y) * kW + x;
  };
  // Erasing, value 0.
  EraseMix erase = Rects(false);
  std::vector<float> erased(p.elements());
  NormalizeEraseMixCpu(src.data(), erased.data(), p, erase);
  int wrong = 0;
  for (uint64_t n = 0; n < kN; ++n) {
    const EraseRect& r = erase.rects[n];
    for (uint64_t c = 0; c < kC; ++c) {
      for (uint64_t y = 0; y < kH; ++y) {
        for (uint64_t x = 0; x < kW; ++x) {
          const bool inside = y >= r.top && y < r.top + r.height &&
                              x >= r.left && x < r.left + r.width;
          const float want = inside ? 0.0f : plain[at(n, c, y, x)];
          wrong += Bits(erased[at(n, c, y, x)]) != Bits(want);
        }
      }
    }
  }
  MINI_EXPECT_EQ(wrong, 0);
  // MixUp.
  const double lambda = 0.6180339887;
  EraseMix mixup;
  MINI_ASSERT_OK(MakeMixParams(MixKind::kMixup, lambda, {}, &mixup.mix));
  std::vector<float> mixed(p.elements());
  NormalizeEraseMixCpu(src.data(), mixed.data(), p, mixup);
  const float ls = static_cast<float>(lambda);
  const float lr = static_cast<float>(1.0 - lambda);
  wrong = 0;
  for (uint64_t n = 0; n < kN; ++n) {
    const uint64_t prev = n == 0 ? kN - 1 : n - 1;
    for (uint64_t k = 0; k < size; ++k) {
      volatile float a = plain[n * size + k] * ls;
      volatile float b = plain[prev * size + k] * lr;
      wrong += Bits(mixed[n * size + k]) != Bits(a + b);
    }
  }
  MINI_EXPECT_EQ(wrong, 0);
  // CutMix.
  EraseMix cutmix;
  MINI_ASSERT_OK(MakeMixParams(
      MixKind::kCutmix, 0.5, {.top = 2, .left = 3, .height = 5, .width = 4},
      &cutmix.mix));
  NormalizeEraseMixCpu(src.data(), mixed.data(), p, cutmix);
  wrong = 0;
  for (uint64_t n = 0; n < kN; ++n) {
    const uint64_t prev = n == 0 ? kN - 1 : n - 1;
    for (uint64_t c = 0; c < kC; ++c) {
      for (uint64_t y = 0; y < kH; ++y) {
        for (uint64_t x = 0; x < kW; ++x) {
          const bool box = y >= 2 && y < 7 && x >= 3 && x < 7;
          wrong += mixed[at(n, c, y, x)] !=
                   plain[at(box ? prev : n, c, y, x)];
        }
      }
    }
  }
  MINI_EXPECT_EQ(wrong, 0);
}

// float16 and bfloat16 outputs are the float32 result rounded once.
MINI_TEST(EraseMix, HalfOutputsRoundTheFloatResultOnce) {
  const std::vector<uint8_t> src = RandomBatch(3);
  EraseMix em = Rects(true);
  MINI_ASSERT_OK(MakeMixParams(MixKind::kMixup, 0.25, {}, &em.mix));
  const NormalizeParams f32 =
      Params(Layout::kNHWC, Layout::kNCHW, DType::kFloat32);
  std::vector<float> want(f32.elements());
  NormalizeEraseMixCpu(src.data(), want.data(), f32, em);
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    const NormalizeParams p = Params(Layout::kNHWC, Layout::kNCHW, dtype);
    std::vector<uint16_t> got(p.elements());
    NormalizeEraseMixCpu(src.data(), got.data(), p, em);
    int wrong = 0;
    for (size_t k = 0; k < got.size(); ++k) {
      const uint16_t bits = dtype == DType::kFloat16
                                ? FloatToHalfBits(want[k])
                                : FloatToBFloat16Bits(want[k]);
      wrong += got[k] != bits;
    }
    MINI_EXPECT_EQ(wrong, 0);
  }
}

// The noise's own log and cosine (no libm, so that the GPU gives the same
// bits) against libm's, and its values Normal(0, 1) over 200,000 draws.
MINI_TEST(EraseMix, NoiseIsStandardNormal) {
  double worst_log = 0, worst_cos = 0;
  for (uint32_t k = 1; k <= (1u << 24); k += 97) {
    const float u = static_cast<float>(k) * (1.0f / 16777216.0f);
    const double want = std::log(static_cast<double>(u));
    worst_log = std::max(worst_log, std::fabs(erase_mix_math::Log(u) - want) /
                                        std::max(1.0, std::fabs(want)));
    const double c = std::cos(2 * M_PI * (k - 1) / 16777216.0);
    worst_cos =
        std::max(worst_cos, std::fabs(erase_mix_math::CosTurn(k - 1) - c));
  }
  MINI_EXPECT_LT(worst_log, 4e-7);
  MINI_EXPECT_LT(worst_cos, 4e-7);
  const int kValues = 200000;
  double sum = 0, sum2 = 0, within1 = 0, within2 = 0, worst = 0;
  for (int k = 0; k < kValues; ++k) {
    const float z = ErasingNoise(0xfeedfacecafebeefull, k);
    sum += z;
    sum2 += static_cast<double>(z) * z;
    within1 += std::fabs(z) < 1;
    within2 += std::fabs(z) < 2;
    worst = std::max(worst, std::fabs(static_cast<double>(z)));
  }
  const double mean = sum / kValues;
  const double var = sum2 / kValues - mean * mean;
  MINI_EXPECT_LT(std::fabs(mean), 5 / std::sqrt(kValues));
  MINI_EXPECT_LT(std::fabs(var - 1), 0.02);
  MINI_EXPECT_LT(std::fabs(within1 / kValues - 0.682689), 0.005);
  MINI_EXPECT_LT(std::fabs(within2 / kValues - 0.954500), 0.003);
  // 24-bit uniforms bound |z| by sqrt(2 ln 2^24) = 5.77.
  MINI_EXPECT_LT(worst, 5.8);
  // Another key, another stream; the same key, the same value.
  MINI_EXPECT_NE(ErasingNoise(1, 0), ErasingNoise(2, 0));
  MINI_EXPECT_EQ(Bits(ErasingNoise(7, 12345)), Bits(ErasingNoise(7, 12345)));
}

MINI_TEST(EraseMix, SoftLabelsAreSmoothedOneHotMixedAndSumToOne) {
  const std::vector<int32_t> labels = {3, 0, 9, 9, 1};
  MixParams mix;
  MINI_ASSERT_OK(MakeMixParams(MixKind::kMixup, 0.7, {}, &mix));
  std::vector<float> soft(labels.size() * 10);
  MINI_ASSERT_OK(SoftLabels(labels.data(), labels.size(), 10, 0.1f, mix,
                            soft.data()));
  const double off = 0.1f / 10.0, on = 1 - 0.1f + off;
  for (size_t i = 0; i < labels.size(); ++i) {
    double total = 0;
    for (int k = 0; k < 10; ++k) total += soft[i * 10 + k];
    MINI_EXPECT_LT(std::fabs(total - 1), 1e-6);
    const int32_t prev = labels[i == 0 ? labels.size() - 1 : i - 1];
    for (int k = 0; k < 10; ++k) {
      const double want = 0.7 * (k == labels[i] ? on : off) +
                          0.3 * (k == prev ? on : off);
      MINI_EXPECT_LT(std::fabs(soft[i * 10 + k] - want), 1e-6);
    }
  }
  // Unmixed: the smoothed one-hot, exactly.
  MixParams none;
  MINI_ASSERT_OK(MakeMixParams(MixKind::kNone, 1.0, {}, &none));
  MINI_ASSERT_OK(SoftLabels(labels.data(), labels.size(), 10, 0.0f, none,
                            soft.data()));
  MINI_EXPECT_EQ(soft[3], 1.0f);
  MINI_EXPECT_EQ(soft[4], 0.0f);
  const int32_t bad = 10;
  MINI_EXPECT_EQ(SoftLabels(&bad, 1, 10, 0.0f, none, soft.data()).code(),
                 StatusCode::kInvalidArgument);
  MINI_EXPECT_EQ(SoftLabels(labels.data(), 1, 10, 1.0f, none, soft.data())
                     .code(),
                 StatusCode::kInvalidArgument);
}

MINI_TEST(EraseMix, BadParametersAreRefused) {
  EraseMix em = Rects(false);
  const NormalizeParams u8 = Params(Layout::kNHWC, Layout::kNHWC,
                                    DType::kUint8);
  MINI_EXPECT_EQ(CheckEraseMix(u8, em).code(), StatusCode::kInvalidArgument);
  const NormalizeParams f32 = Params(Layout::kNHWC, Layout::kNCHW,
                                     DType::kFloat32);
  em.rects[1] = {.top = 10, .left = 0, .height = 3, .width = 1};
  MINI_EXPECT_EQ(CheckEraseMix(f32, em).code(), StatusCode::kInvalidArgument);
  em.rects.pop_back();
  MINI_EXPECT_EQ(CheckEraseMix(f32, em).code(), StatusCode::kInvalidArgument);
  EraseMix box;
  MINI_ASSERT_OK(MakeMixParams(MixKind::kCutmix, 0.5,
                               {.top = 0, .left = 5, .height = 1, .width = 6},
                               &box.mix));
  MINI_EXPECT_EQ(CheckEraseMix(f32, box).code(), StatusCode::kInvalidArgument);
  MixParams mix;
  MINI_EXPECT_EQ(MakeMixParams(MixKind::kMixup, 1.5, {}, &mix).code(),
                 StatusCode::kInvalidArgument);
  MINI_EXPECT_EQ(MakeMixParams(MixKind::kMixup, NAN, {}, &mix).code(),
                 StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace batchd::cuda

int main(int argc, char** argv) { return mini_test::RunAll(argc, argv); }
