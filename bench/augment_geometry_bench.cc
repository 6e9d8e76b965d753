// Microbenchmarks of the geometric augmentation ops (Affine, Rotate,
// VerticalFlip) on one 224x224 crop, and of the crop's resize with the
// bicubic filter against the bilinear one. Results: BENCHMARKS.md.
#include <array>
#include <cstdint>
#include <vector>

#include "benchmark/benchmark.h"
#include "server/augment/geometry_ops.h"
#include "server/decode/resize.h"
#include "testing/jpeg_synth.h"

namespace batchd {
namespace {

using server::augment::AffineParams;
using server::augment::Image;
using server::augment::Interpolation;

constexpr int kSide = 224;

Interpolation InterpolationArg(int64_t arg) {
  return arg == 0 ? Interpolation::kNearest : Interpolation::kBilinear;
}

// range(0): 0 nearest, 1 bilinear. RandomAffine-like parameters with a
// fill (the blended path).
void BM_Affine(benchmark::State& state) {
  std::vector<uint8_t> pixels =
      tools::SynthesizeRgb(kSide, kSide, /*seed=*/5);
  const Image image{pixels.data(), kSide, kSide, ptrdiff_t{3} * kSide};
  AffineParams params;
  params.angle = 17.5f;
  params.translate_x = 9;
  params.translate_y = -6;
  params.scale = 1.1f;
  params.shear_x = 6;
  params.shear_y = -3;
  params.fill = {128, 64, 192};
  params.interpolation = InterpolationArg(state.range(0));
  std::vector<uint8_t> scratch;
  for (auto _ : state) {
    server::augment::Affine(image, params, &scratch);
    benchmark::DoNotOptimize(pixels.data());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_Affine)->ArgName("bilinear")->Arg(0)->Arg(1);

// range(0): 0 nearest, 1 bilinear; the policies' Rotate, fill=None.
void BM_Rotate(benchmark::State& state) {
  std::vector<uint8_t> pixels =
      tools::SynthesizeRgb(kSide, kSide, /*seed=*/6);
  const Image image{pixels.data(), kSide, kSide, ptrdiff_t{3} * kSide};
  std::vector<uint8_t> scratch;
  for (auto _ : state) {
    server::augment::Rotate(image, /*angle=*/21, InterpolationArg(state.range(0)),
                            /*fill=*/{0, 0, 0}, &scratch);
    benchmark::DoNotOptimize(pixels.data());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_Rotate)->ArgName("bilinear")->Arg(0)->Arg(1);

void BM_VerticalFlip(benchmark::State& state) {
  std::vector<uint8_t> pixels =
      tools::SynthesizeRgb(kSide, kSide, /*seed=*/7);
  const Image image{pixels.data(), kSide, kSide, ptrdiff_t{3} * kSide};
  for (auto _ : state) {
    server::augment::VerticalFlip(image);
    benchmark::DoNotOptimize(pixels.data());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_VerticalFlip);

// A 500x375 window (a typical ImageNet image) to 224x224. range(0): 0
// bilinear, 1 bicubic; range(1): 1 for the portable code.
void BM_ResizeFilter(benchmark::State& state) {
  const int w = 500, h = 375;
  const std::vector<uint8_t> src = tools::SynthesizeRgb(w, h, /*seed=*/8);
  const server::RgbView view{src.data(), w, h, ptrdiff_t{3} * w};
  server::ResizeRequest request;
  request.width = w;
  request.height = h;
  request.out_width = kSide;
  request.out_height = kSide;
  request.filter = state.range(0) == 0 ? server::ResizeFilter::kBilinear
                                       : server::ResizeFilter::kBicubic;
  std::vector<uint8_t> out(size_t{3} * kSide * kSide);
  server::Resizer resizer;
  resizer.UsePortableCodeForTesting(state.range(1) != 0);
  for (auto _ : state) {
    resizer.Resize(view, request, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ResizeFilter)
    ->ArgNames({"bicubic", "portable"})
    ->Args({0, 0})
    ->Args({1, 0})
    ->Args({0, 1})
    ->Args({1, 1});

}  // namespace
}  // namespace batchd

BENCHMARK_MAIN();
