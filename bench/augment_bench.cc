// Microbenchmarks of the colour ops (server/augment/color_ops.h): the time
// of one op on one crop-sized RGB image (224x224 and 176x176), including a
// copy of the source image into the work buffer each iteration (the ops
// work in place); BM_Copy times that copy alone.
//
// The image is a synthetic photograph-like pattern (smooth colour
// gradients with noise), so histograms and hue branches see varied values.
//
//   build/bench/batchd_augment_bench --benchmark_repetitions=5 \
//       --benchmark_report_aggregates_only=true
#include <cstdint>
#include <cstring>
#include <vector>

#include "benchmark/benchmark.h"
#include "server/augment/color_ops.h"
#include "server/augment/image.h"

namespace batchd::bench {
namespace {

namespace augment = server::augment;

std::vector<uint8_t> SyntheticPhoto(int side) {
  std::vector<uint8_t> pixels(static_cast<size_t>(side) * side * 3);
  uint32_t state = 12345;
  for (int y = 0; y < side; ++y) {
    for (int x = 0; x < side; ++x) {
      state = state * 1664525u + 1013904223u;
      const int noise = static_cast<int>(state >> 28) - 8;
      uint8_t* p = &pixels[(static_cast<size_t>(y) * side + x) * 3];
      const int r = 40 + 180 * x / side + noise;
      const int g = 30 + 150 * y / side - noise;
      const int b = 200 - 160 * (x + y) / (2 * side) + noise / 2;
      p[0] = static_cast<uint8_t>(r < 0 ? 0 : r > 255 ? 255 : r);
      p[1] = static_cast<uint8_t>(g < 0 ? 0 : g > 255 ? 255 : g);
      p[2] = static_cast<uint8_t>(b < 0 ? 0 : b > 255 ? 255 : b);
    }
  }
  return pixels;
}

// Runs `op(image)` on a fresh copy of the source image each iteration.
template <typename Op>
void RunOp(benchmark::State& state, Op op) {
  const int side = static_cast<int>(state.range(0));
  const std::vector<uint8_t> source = SyntheticPhoto(side);
  std::vector<uint8_t> work(source.size());
  const augment::Image image{work.data(), side, side, ptrdiff_t{3} * side};
  for (auto _ : state) {
    std::memcpy(work.data(), source.data(), source.size());
    op(image);
    benchmark::DoNotOptimize(work.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_Copy(benchmark::State& state) {
  RunOp(state, [](augment::Image) {});
}
void BM_AdjustBrightness(benchmark::State& state) {
  RunOp(state, [](augment::Image image) {
    augment::AdjustBrightness(image, /*factor=*/1.5);
  });
}
void BM_AdjustContrast(benchmark::State& state) {
  RunOp(state, [](augment::Image image) {
    augment::AdjustContrast(image, /*factor=*/1.5);
  });
}
void BM_AdjustSaturation(benchmark::State& state) {
  RunOp(state, [](augment::Image image) {
    augment::AdjustSaturation(image, /*factor=*/1.5);
  });
}
void BM_AdjustHue(benchmark::State& state) {
  RunOp(state, [](augment::Image image) {
    augment::AdjustHue(image, /*hue_factor=*/0.2f);
  });
}
void BM_AdjustSharpness(benchmark::State& state) {
  std::vector<uint8_t> scratch;
  RunOp(state, [&scratch](augment::Image image) {
    augment::AdjustSharpness(image, /*factor=*/1.5, &scratch);
  });
}
void BM_Posterize(benchmark::State& state) {
  RunOp(state, [](augment::Image image) { augment::Posterize(image, 4); });
}
void BM_Solarize(benchmark::State& state) {
  RunOp(state, [](augment::Image image) {
    augment::Solarize(image, /*threshold=*/128.0f);
  });
}
void BM_Invert(benchmark::State& state) {
  RunOp(state, [](augment::Image image) { augment::Invert(image); });
}
void BM_Autocontrast(benchmark::State& state) {
  RunOp(state, [](augment::Image image) { augment::Autocontrast(image); });
}
void BM_Equalize(benchmark::State& state) {
  RunOp(state, [](augment::Image image) { augment::Equalize(image); });
}
void BM_Grayscale(benchmark::State& state) {
  RunOp(state, [](augment::Image image) { augment::Grayscale(image); });
}
// GaussianBlur at kernel sizes 3, 9 and 23 (SimCLR's 23 for 224 px).
void BM_GaussianBlur(benchmark::State& state) {
  const int kernel = static_cast<int>(state.range(1));
  std::vector<float> scratch;
  RunOp(state, [kernel, &scratch](augment::Image image) {
    augment::GaussianBlur(image, kernel, kernel, /*sigma_x=*/1.5f,
                          /*sigma_y=*/1.5f, &scratch);
  });
}

#define BATCHD_AUGMENT_BENCH(fn) BENCHMARK(fn)->Arg(224)->Arg(176)
BATCHD_AUGMENT_BENCH(BM_Copy);
BATCHD_AUGMENT_BENCH(BM_AdjustBrightness);
BATCHD_AUGMENT_BENCH(BM_AdjustContrast);
BATCHD_AUGMENT_BENCH(BM_AdjustSaturation);
BATCHD_AUGMENT_BENCH(BM_AdjustHue);
BATCHD_AUGMENT_BENCH(BM_AdjustSharpness);
BATCHD_AUGMENT_BENCH(BM_Posterize);
BATCHD_AUGMENT_BENCH(BM_Solarize);
BATCHD_AUGMENT_BENCH(BM_Invert);
BATCHD_AUGMENT_BENCH(BM_Autocontrast);
BATCHD_AUGMENT_BENCH(BM_Equalize);
BATCHD_AUGMENT_BENCH(BM_Grayscale);
BENCHMARK(BM_GaussianBlur)->Args({224, 3})->Args({224, 9})->Args({224, 23});
#undef BATCHD_AUGMENT_BENCH

}  // namespace
}  // namespace batchd::bench

BENCHMARK_MAIN();
