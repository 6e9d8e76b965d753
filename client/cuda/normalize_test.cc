// The CPU reference normaliser and the no-device path: built and run
// everywhere (no device needed).
#include "client/cuda/normalize.h"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "client/cuda/copy_engine.h"
#include "client/cuda/runtime.h"
#include "client/cuda/testing/mini_test.h"

namespace batchd::cuda {
namespace {

const std::vector<float> kMean = {0.485f, 0.456f, 0.406f};
const std::vector<float> kStd = {0.229f, 0.224f, 0.225f};

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> bytes(n);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
  return bytes;
}

// Index of (n, c, y, x) in a buffer of the given layout.
size_t At(Layout layout, const NormalizeParams& p, uint64_t n, uint64_t c,
          uint64_t y, uint64_t x) {
  if (layout == Layout::kNHWC) return ((n * p.h + y) * p.w + x) * p.c + c;
  return ((n * p.c + c) * p.h + y) * p.w + x;
}

MINI_TEST(Normalize, Float32MatchesFormulaInEveryLayout) {
  for (Layout in : {Layout::kNHWC, Layout::kNCHW}) {
    for (Layout out : {Layout::kNHWC, Layout::kNCHW}) {
      NormalizeSpec spec;
      spec.layout = out;
      spec.mean = kMean;
      spec.std = kStd;
      const std::vector<uint64_t> shape =
          in == Layout::kNHWC ? std::vector<uint64_t>{2, 5, 7, 3}
                              : std::vector<uint64_t>{2, 3, 5, 7};
      NormalizeParams p;
      MINI_ASSERT_OK(MakeNormalizeParams(shape, in, spec, &p));
      MINI_EXPECT_EQ(p.output_bytes(), 2u * 5 * 7 * 3 * 4);
      const std::vector<uint8_t> src = RandomBytes(p.input_bytes(), 1);
      std::vector<float> dst(p.elements());
      NormalizeCpu(src.data(), dst.data(), p);
      int bad = 0;
      for (uint64_t n = 0; n < p.n; ++n)
        for (uint64_t c = 0; c < p.c; ++c)
          for (uint64_t y = 0; y < p.h; ++y)
            for (uint64_t x = 0; x < p.w; ++x) {
              const double v = src[At(in, p, n, c, y, x)];
              const double want = (v / 255.0 - kMean[c]) / kStd[c];
              const double got = dst[At(out, p, n, c, y, x)];
              if (std::fabs(got - want) > 1e-5) ++bad;
            }
      MINI_EXPECT_EQ(bad, 0);
    }
  }
}

MINI_TEST(Normalize, Uint8OutputTransposesBytesExactly) {
  NormalizeSpec spec;
  spec.dtype = DType::kUint8;
  spec.layout = Layout::kNCHW;
  NormalizeParams p;
  MINI_ASSERT_OK(MakeNormalizeParams({3, 4, 6, 3}, Layout::kNHWC, spec, &p));
  const std::vector<uint8_t> src = RandomBytes(p.input_bytes(), 2);
  std::vector<uint8_t> dst(p.output_bytes());
  NormalizeCpu(src.data(), dst.data(), p);
  int bad = 0;
  for (uint64_t n = 0; n < p.n; ++n)
    for (uint64_t c = 0; c < p.c; ++c)
      for (uint64_t y = 0; y < p.h; ++y)
        for (uint64_t x = 0; x < p.w; ++x)
          if (dst[At(Layout::kNCHW, p, n, c, y, x)] !=
              src[At(Layout::kNHWC, p, n, c, y, x)])
            ++bad;
  MINI_EXPECT_EQ(bad, 0);
  // Same layout: a plain copy.
  spec.layout = Layout::kNHWC;
  MINI_ASSERT_OK(MakeNormalizeParams({3, 4, 6, 3}, Layout::kNHWC, spec, &p));
  NormalizeCpu(src.data(), dst.data(), p);
  MINI_EXPECT_TRUE(std::memcmp(src.data(), dst.data(), src.size()) == 0);
}

MINI_TEST(Normalize, HalfAndBFloat16AreRoundedFloat32) {
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    NormalizeSpec spec;
    spec.dtype = dtype;
    spec.mean = kMean;
    spec.std = kStd;
    NormalizeParams p;
    MINI_ASSERT_OK(MakeNormalizeParams({2, 8, 8, 3}, Layout::kNHWC, spec, &p));
    const std::vector<uint8_t> src = RandomBytes(p.input_bytes(), 3);
    std::vector<uint16_t> half(p.elements());
    NormalizeCpu(src.data(), half.data(), p);
    spec.dtype = DType::kFloat32;
    NormalizeParams pf;
    MINI_ASSERT_OK(MakeNormalizeParams({2, 8, 8, 3}, Layout::kNHWC, spec, &pf));
    std::vector<float> full(pf.elements());
    NormalizeCpu(src.data(), full.data(), pf);
    int bad = 0;
    for (size_t i = 0; i < full.size(); ++i) {
      const uint16_t want = dtype == DType::kFloat16
                                ? FloatToHalfBits(full[i])
                                : FloatToBFloat16Bits(full[i]);
      if (half[i] != want) ++bad;
    }
    MINI_EXPECT_EQ(bad, 0);
  }
}

MINI_TEST(Normalize, HalfConversionRoundsToNearestEven) {
  MINI_EXPECT_EQ(FloatToHalfBits(1.0f), 0x3c00);
  MINI_EXPECT_EQ(FloatToHalfBits(-2.0f), 0xc000);
  MINI_EXPECT_EQ(FloatToHalfBits(65504.0f), 0x7bff);
  MINI_EXPECT_EQ(FloatToHalfBits(65519.0f), 0x7bff);
  MINI_EXPECT_EQ(FloatToHalfBits(65520.0f), 0x7c00);
  MINI_EXPECT_EQ(FloatToHalfBits(std::ldexp(1.0f, -24)), 0x0001);
  MINI_EXPECT_EQ(FloatToHalfBits(std::ldexp(1.0f, -25)), 0x0000);  // tie->even
  MINI_EXPECT_EQ(FloatToHalfBits(std::ldexp(1.5f, -25)), 0x0001);
  MINI_EXPECT_EQ(FloatToHalfBits(std::ldexp(3.0f, -25)), 0x0002);  // tie->even
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even (1.0).
  MINI_EXPECT_EQ(FloatToHalfBits(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  MINI_EXPECT_EQ(FloatToHalfBits(1.0f + std::ldexp(3.0f, -11)), 0x3c02);
  // Every finite half survives a round trip through float.
  int bad = 0;
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    if ((bits & 0x7c00) == 0x7c00) continue;
    if (FloatToHalfBits(HalfBitsToFloat(static_cast<uint16_t>(bits))) != bits)
      ++bad;
  }
  MINI_EXPECT_EQ(bad, 0);
  MINI_EXPECT_EQ(FloatToBFloat16Bits(1.0f), 0x3f80);
  MINI_EXPECT_EQ(FloatToBFloat16Bits(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  MINI_EXPECT_EQ(FloatToBFloat16Bits(1.0f + std::ldexp(3.0f, -8)), 0x3f82);
  MINI_EXPECT_EQ(BFloat16BitsToFloat(0x3f80), 1.0f);
}

MINI_TEST(Normalize, RejectsBadParameters) {
  NormalizeParams p;
  NormalizeSpec spec;
  MINI_EXPECT_EQ(MakeNormalizeParams({2, 3, 4}, Layout::kNHWC, spec, &p).code(),
                 StatusCode::kInvalidArgument);
  MINI_EXPECT_EQ(
      MakeNormalizeParams({2, 3, 4, 5}, Layout::kNHWC, spec, &p).code(),
      StatusCode::kInvalidArgument);  // 5 channels
  MINI_EXPECT_EQ(
      MakeNormalizeParams({2, 0, 4, 4}, Layout::kNCHW, spec, &p).code(),
      StatusCode::kInvalidArgument);  // 0 channels
  spec.mean = {0.1f, 0.2f};
  MINI_EXPECT_EQ(
      MakeNormalizeParams({2, 4, 4, 3}, Layout::kNHWC, spec, &p).code(),
      StatusCode::kInvalidArgument);
  spec.mean = {0.5f};
  spec.std = {0.0f};
  MINI_EXPECT_EQ(
      MakeNormalizeParams({2, 4, 4, 3}, Layout::kNHWC, spec, &p).code(),
      StatusCode::kInvalidArgument);
  spec.std = {NAN};
  MINI_EXPECT_EQ(
      MakeNormalizeParams({2, 4, 4, 3}, Layout::kNHWC, spec, &p).code(),
      StatusCode::kInvalidArgument);
  spec.std = {0.5f};
  MINI_EXPECT_TRUE(
      MakeNormalizeParams({2, 4, 4, 3}, Layout::kNHWC, spec, &p).ok());
  // One value applies to every channel: (x/255 - 0.5) / 0.5.
  std::vector<uint8_t> src = {0, 255, 51};
  NormalizeParams one;
  MINI_ASSERT_OK(MakeNormalizeParams({1, 1, 1, 3}, Layout::kNHWC, spec, &one));
  float out[3];
  NormalizeCpu(src.data(), out, one);
  MINI_EXPECT_EQ(out[0], -1.0f);
  MINI_EXPECT_TRUE(std::fabs(out[1] - 1.0f) < 1e-6f);
  MINI_EXPECT_TRUE(std::fabs(out[2] - (-0.6f)) < 1e-6f);
}

// The GPU kernel's fast path (4 pixels per thread, vector stores), run on
// the host: same bytes as the reference for every output type.
MINI_TEST(Normalize, KernelFastPathIndexingMatchesReference) {
  if (!BuiltWithCuda()) MINI_SKIP("built without CUDA");
  for (DType dtype :
       {DType::kUint8, DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    NormalizeSpec spec;
    spec.dtype = dtype;
    spec.mean = kMean;
    spec.std = kStd;
    NormalizeParams p;
    MINI_ASSERT_OK(MakeNormalizeParams({3, 8, 12, 3}, Layout::kNHWC, spec, &p));
    const std::vector<uint8_t> bytes = RandomBytes(p.input_bytes(), 5);
    std::unique_ptr<uint8_t, void (*)(void*)> src(
        static_cast<uint8_t*>(std::aligned_alloc(64, 64 * 1024)), std::free);
    std::unique_ptr<uint8_t, void (*)(void*)> got(
        static_cast<uint8_t*>(std::aligned_alloc(64, 64 * 1024)), std::free);
    std::memcpy(src.get(), bytes.data(), bytes.size());
    std::memset(got.get(), 0xee, p.output_bytes());
    MINI_ASSERT_TRUE(NormalizeGroupsOnHostForTest(src.get(), got.get(), p));
    std::vector<uint8_t> want(p.output_bytes());
    NormalizeCpu(src.get(), want.data(), p);
    MINI_EXPECT_TRUE(std::memcmp(got.get(), want.data(), want.size()) == 0);
    // Not taken for other layouts, channel counts or h*w % 4 != 0.
    NormalizeParams other;
    MINI_ASSERT_OK(MakeNormalizeParams({3, 7, 5, 3}, Layout::kNHWC, spec, &other));
    MINI_EXPECT_TRUE(!NormalizeGroupsOnHostForTest(src.get(), got.get(), other));
    spec.layout = Layout::kNHWC;
    MINI_ASSERT_OK(MakeNormalizeParams({3, 8, 12, 3}, Layout::kNHWC, spec, &other));
    MINI_EXPECT_TRUE(!NormalizeGroupsOnHostForTest(src.get(), got.get(), other));
  }
}

// A batch of views (Plan.views): each part reads its view's bytes and
// writes its output where the previous one's ended, and normalising the
// parts is normalising each view on its own.
MINI_TEST(Normalize, PartsAreTheViewsOneAfterAnother) {
  NormalizeSpec spec;
  spec.dtype = DType::kFloat16;
  spec.mean = kMean;
  spec.std = kStd;
  const std::vector<std::vector<uint64_t>> shapes = {
      {2, 6, 6, 3}, {2, 6, 6, 3}, {2, 3, 5, 3}};
  std::vector<NormalizePart> parts;
  MINI_ASSERT_OK(MakeNormalizeParts(shapes, Layout::kNHWC, spec, &parts));
  MINI_ASSERT_EQ(parts.size(), 3u);
  MINI_EXPECT_EQ(parts[1].input_offset, 216u);
  MINI_EXPECT_EQ(parts[1].output_offset, 432u);
  MINI_EXPECT_EQ(parts[2].input_offset, 432u);
  MINI_EXPECT_EQ(parts[2].output_offset, 864u);
  MINI_EXPECT_EQ(PartsInputBytes(parts), 522u);
  MINI_EXPECT_EQ(PartsOutputBytes(parts), 1044u);
  const std::vector<uint8_t> bytes = RandomBytes(PartsInputBytes(parts), 9);
  std::vector<uint8_t> got(PartsOutputBytes(parts), 0xee);
  NormalizePartsCpu(bytes.data(), got.data(), parts);
  for (const NormalizePart& part : parts) {
    std::vector<uint8_t> want(part.params.output_bytes());
    NormalizeCpu(bytes.data() + part.input_offset, want.data(), part.params);
    MINI_EXPECT_TRUE(std::memcmp(got.data() + part.output_offset, want.data(),
                                 want.size()) == 0);
  }
  // A bad view is named; no shapes at all is refused.
  Status bad = MakeNormalizeParts({{2, 6, 6, 3}, {2, 6, 6}}, Layout::kNHWC,
                                  spec, &parts);
  MINI_EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  MINI_EXPECT_TRUE(bad.message().find("view 1: ") == 0);
  MINI_EXPECT_EQ(MakeNormalizeParts({}, Layout::kNHWC, spec, &parts).code(),
                 StatusCode::kInvalidArgument);
}

// Without a device (or without CUDA) everything reports UNAVAILABLE, which
// is what makes callers take the host path.
MINI_TEST(NoDevice, EverythingReportsUnavailable) {
  if (ProbeDevice().ok()) MINI_SKIP("a CUDA device is present");
  MINI_EXPECT_EQ(ProbeDevice().code(), StatusCode::kUnavailable);
  std::printf("probe: %s\n", ProbeDevice().ToString().c_str());
  std::unique_ptr<PinnedBuffer> pinned;
  MINI_EXPECT_EQ(PinnedBuffer::Allocate(1024, &pinned).code(),
                 StatusCode::kUnavailable);
  MINI_EXPECT_TRUE(pinned == nullptr);
  std::unique_ptr<CopyEngine> engine;
  CopyEngineOptions options;
  options.max_input_bytes = 1024;
  MINI_EXPECT_EQ(CopyEngine::Create(options, &engine).code(),
                 StatusCode::kUnavailable);
  MINI_EXPECT_TRUE(engine == nullptr);
  MINI_EXPECT_EQ(PinnedBuffer::LiveCount(), 0u);
}

}  // namespace
}  // namespace batchd::cuda

int main(int argc, char** argv) { return mini_test::RunAll(argc, argv); }
