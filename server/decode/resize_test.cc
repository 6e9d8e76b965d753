#include "server/decode/resize.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace batchd::server {
namespace {

using ::testing::Each;
using ::testing::ElementsAreArray;

std::vector<uint8_t> Pattern(int width, int height) {
  std::vector<uint8_t> rgb(static_cast<size_t>(width) * height * 3);
  for (size_t i = 0; i < rgb.size(); ++i) {
    rgb[i] = static_cast<uint8_t>((i * 37 + (i / 7) * 11) & 0xFF);
  }
  return rgb;
}

RgbView View(const std::vector<uint8_t>& rgb, int width, int height) {
  return RgbView{rgb.data(), width, height, static_cast<ptrdiff_t>(width) * 3};
}

ResizeRequest Request(double x, double y, double w, double h, int out_w,
                      int out_h, bool flip = false,
                      PixelLayout layout = PixelLayout::kHWC,
                      ResizeFilter filter = ResizeFilter::kBilinear) {
  ResizeRequest r;
  r.x = x;
  r.y = y;
  r.width = w;
  r.height = h;
  r.out_width = out_w;
  r.out_height = out_h;
  r.flip = flip;
  r.layout = layout;
  r.filter = filter;
  return r;
}

ResizeRequest BicubicRequest(double x, double y, double w, double h,
                             int out_w, int out_h) {
  return Request(x, y, w, h, out_w, out_h, /*flip=*/false, PixelLayout::kHWC,
                 ResizeFilter::kBicubic);
}

TEST(ResizeTest, ConstantImageStaysConstant) {
  Resizer resizer;
  for (int value : {0, 1, 127, 200, 255}) {
    std::vector<uint8_t> src(97 * 61 * 3, static_cast<uint8_t>(value));
    for (auto [out_w, out_h] : {std::pair{13, 7}, {97, 61}, {224, 224}, {40, 90}}) {
      for (ResizeFilter filter :
           {ResizeFilter::kBilinear, ResizeFilter::kBicubic}) {
        std::vector<uint8_t> out(out_w * out_h * 3, 0x5A);
        resizer.Resize(View(src, 97, 61),
                       Request(3.25, 1.5, 80.5, 50.75, out_w, out_h,
                               /*flip=*/false, PixelLayout::kHWC, filter),
                       out.data());
        EXPECT_THAT(out, Each(value))
            << out_w << "x" << out_h << " filter " << static_cast<int>(filter);
      }
    }
  }
}

TEST(ResizeTest, IdentitySizeCopiesTheWindow) {
  const int w = 37, h = 23;
  std::vector<uint8_t> src = Pattern(w, h);
  Resizer resizer;
  std::vector<uint8_t> out(w * h * 3);
  resizer.Resize(View(src, w, h), Request(0, 0, w, h, w, h), out.data());
  EXPECT_EQ(out, src);

  // An integer sub-window at its own size is copied too.
  std::vector<uint8_t> sub(10 * 5 * 3);
  resizer.Resize(View(src, w, h), Request(4, 6, 10, 5, 10, 5), sub.data());
  for (int y = 0; y < 5; ++y) {
    for (int x = 0; x < 10 * 3; ++x) {
      ASSERT_EQ(sub[y * 30 + x], src[(y + 6) * w * 3 + 4 * 3 + x]);
    }
  }
}

TEST(ResizeTest, BicubicIdentitySizeCopiesTheWindow) {
  // At scale 1 the cubic is 1 at distance 0 and 0 at distances 1 and 2.
  const int w = 37, h = 23;
  std::vector<uint8_t> src = Pattern(w, h);
  Resizer resizer;
  std::vector<uint8_t> out(w * h * 3);
  resizer.Resize(View(src, w, h), BicubicRequest(0, 0, w, h, w, h),
                 out.data());
  EXPECT_EQ(out, src);
  std::vector<uint8_t> sub(10 * 5 * 3);
  resizer.Resize(View(src, w, h), BicubicRequest(4, 6, 10, 5, 10, 5),
                 sub.data());
  for (int y = 0; y < 5; ++y) {
    for (int x = 0; x < 10 * 3; ++x) {
      ASSERT_EQ(sub[y * 30 + x], src[(y + 6) * w * 3 + 4 * 3 + x]);
    }
  }
}

TEST(ResizeTest, BicubicMatchesTorchvisionAndClampsOvershoot) {
  // torchvision: F.resize(tensor([[[0, 255]]]), [1, 4], BICUBIC,
  // antialias=True) == [0, 53, 202, 255]: the outer pixels overshoot to
  // -22.5 and 277.5 and are clamped.
  Resizer resizer;
  std::vector<uint8_t> step = {0, 0, 0, 255, 255, 255};
  std::vector<uint8_t> out(4 * 3);
  resizer.Resize(View(step, 2, 1), BicubicRequest(0, 0, 2, 1, 4, 1),
                 out.data());
  EXPECT_THAT(out, ElementsAreArray({0, 0, 0, 53, 53, 53, 202, 202, 202, 255,
                                     255, 255}));
  // Halving, the cubic widened to 4 source pixels each side:
  // F.resize(tensor([[[0, 80, 160, 240, 16, 32, 64, 128]]]), [1, 4],
  // BICUBIC, antialias=True) == [47, 180, 44, 89].
  const int values[8] = {0, 80, 160, 240, 16, 32, 64, 128};
  std::vector<uint8_t> row(8 * 3);
  for (int i = 0; i < 8; ++i) row[3 * i] = row[3 * i + 1] = row[3 * i + 2] = values[i];
  resizer.Resize(View(row, 8, 1), BicubicRequest(0, 0, 8, 1, 4, 1),
                 out.data());
  EXPECT_THAT(out, ElementsAreArray({47, 47, 47, 180, 180, 180, 44, 44, 44,
                                     89, 89, 89}));
}

TEST(ResizeTest, HalvingAveragesWithTheWidenedTriangle) {
  // Halving: scale 2, the triangle's support widens to 2 source pixels.
  // Output pixel j is centred at source 2j + 1; source pixel i (centre
  // i + 0.5) gets weight 1 - |i + 0.5 - (2j + 1)| / 2: pixels 2j-1, 2j,
  // 2j+1, 2j+2 get 1/4, 3/4, 3/4, 1/4 (normalised: 1/8, 3/8, 3/8, 1/8),
  // clamped at the edges (pixel -1 missing: 3/7, 3/7, 1/7).
  // Source: one row, one channel pattern replicated to RGB.
  const int values[8] = {0, 80, 160, 240, 16, 32, 64, 128};
  std::vector<uint8_t> src(8 * 3);
  for (int i = 0; i < 8; ++i) src[3 * i] = src[3 * i + 1] = src[3 * i + 2] = values[i];
  Resizer resizer;
  std::vector<uint8_t> out(4 * 3);
  resizer.Resize(View(src, 8, 1), Request(0, 0, 8, 1, 4, 1), out.data());
  // j = 0: (3*0 + 3*80 + 1*160) / 7 = 57.14 -> 57
  // j = 1: (80 + 3*160 + 3*240 + 16) / 8 = 162
  // j = 2: (240 + 3*16 + 3*32 + 64) / 8 = 56
  // j = 3: (32 + 3*64 + 3*128) / 7 = 86.86 -> 87
  const uint8_t expected[4] = {57, 162, 56, 87};
  for (int j = 0; j < 4; ++j) {
    EXPECT_EQ(out[3 * j], expected[j]) << j;
    EXPECT_EQ(out[3 * j + 1], expected[j]) << j;
    EXPECT_EQ(out[3 * j + 2], expected[j]) << j;
  }
}

TEST(ResizeTest, UpscaleInterpolatesLinearly) {
  // Doubling a 2-pixel row 0, 200: output centres at source 0.25, 0.75,
  // 1.25, 1.75 -> (edge clamp) 0, 50, 150, 200.
  std::vector<uint8_t> src = {0, 0, 0, 200, 200, 200};
  Resizer resizer;
  std::vector<uint8_t> out(4 * 3);
  resizer.Resize(View(src, 2, 1), Request(0, 0, 2, 1, 4, 1), out.data());
  EXPECT_THAT(out, ElementsAreArray({0, 0, 0, 50, 50, 50, 150, 150, 150, 200,
                                     200, 200}));
}

TEST(ResizeTest, FlipIsAnExactMirrorAndChwAnExactTranspose) {
  const int w = 123, h = 77, out_w = 45, out_h = 31;
  std::vector<uint8_t> src = Pattern(w, h);
  Resizer resizer;
  std::vector<uint8_t> hwc(out_w * out_h * 3), flipped(hwc.size()),
      chw(hwc.size()), chw_flipped(hwc.size());
  const auto view = View(src, w, h);
  resizer.Resize(view, Request(5.5, 2, 100, 70, out_w, out_h), hwc.data());
  resizer.Resize(view, Request(5.5, 2, 100, 70, out_w, out_h, true),
                 flipped.data());
  resizer.Resize(view,
                 Request(5.5, 2, 100, 70, out_w, out_h, false, PixelLayout::kCHW),
                 chw.data());
  resizer.Resize(view,
                 Request(5.5, 2, 100, 70, out_w, out_h, true, PixelLayout::kCHW),
                 chw_flipped.data());
  const size_t plane = out_w * out_h;
  for (int y = 0; y < out_h; ++y) {
    for (int x = 0; x < out_w; ++x) {
      for (int c = 0; c < 3; ++c) {
        const uint8_t v = hwc[(y * out_w + x) * 3 + c];
        ASSERT_EQ(flipped[(y * out_w + (out_w - 1 - x)) * 3 + c], v);
        ASSERT_EQ(chw[c * plane + y * out_w + x], v);
        ASSERT_EQ(chw_flipped[c * plane + y * out_w + (out_w - 1 - x)], v);
      }
    }
  }
}

TEST(ResizeTest, RespectsRowStride) {
  const int w = 20, h = 10;
  std::vector<uint8_t> packed = Pattern(w, h);
  const int stride = w * 3 + 17;
  std::vector<uint8_t> padded(stride * h, 0xEE);
  for (int y = 0; y < h; ++y) {
    std::copy_n(&packed[y * w * 3], w * 3, &padded[y * stride]);
  }
  Resizer resizer;
  std::vector<uint8_t> a(7 * 4 * 3), b(a.size());
  resizer.Resize(View(packed, w, h), Request(1, 1, 18, 8, 7, 4), a.data());
  resizer.Resize(RgbView{padded.data(), w, h, stride}, Request(1, 1, 18, 8, 7, 4),
                 b.data());
  EXPECT_EQ(a, b);
}

// The straightforward implementation Resizer::Resize must match byte for
// byte: per-axis 14-bit weights as Resizer computes them, a vertical pass
// rounded to bytes, then a horizontal pass rounded to bytes, both as
// (1 << 13 + sum of weight * value) >> 14.
struct ReferenceAxis {
  std::vector<int> start, count;
  std::vector<std::vector<int>> weights;
};

ReferenceAxis ReferenceWeights(ResizeFilter filter, double window_start,
                               double window_size, int in_size, int out_size,
                               bool reverse) {
  constexpr int kOne = 1 << kResizeWeightBits;
  const bool cubic = filter == ResizeFilter::kBicubic;
  const double scale = window_size / out_size;
  const double filter_scale = std::max(scale, 1.0);
  const double support = (cubic ? 2 : 1) * filter_scale;
  const int max_taps = static_cast<int>(std::ceil(support)) * 2 + 1;
  ReferenceAxis axis;
  axis.start.assign(out_size, 0);
  axis.count.assign(out_size, 0);
  axis.weights.assign(out_size, {});
  for (int j = 0; j < out_size; ++j) {
    const double center = window_start + (j + 0.5) * scale;
    int lo = static_cast<int>(std::floor(center - support + 0.5));
    int hi = static_cast<int>(std::floor(center + support + 0.5));
    lo = std::clamp(lo, 0, in_size - 1);
    hi = std::clamp(hi, lo + 1, in_size);
    int n = std::min(hi - lo, max_taps);
    std::vector<double> w(n);
    double total = 0;
    for (int k = 0; k < n; ++k) {
      const double x = std::fabs((lo + k - center + 0.5) / filter_scale);
      if (!cubic) {
        w[k] = x < 1.0 ? 1.0 - x : 0.0;
      } else {  // Keys, a = -0.5
        w[k] = x < 1.0   ? 1.5 * x * x * x - 2.5 * x * x + 1
               : x < 2.0 ? -0.5 * x * x * x + 2.5 * x * x - 4 * x + 2
                         : 0.0;
      }
      total += w[k];
    }
    bool degenerate = total <= 0;
    for (int k = 0; k < n; ++k) {
      degenerate = degenerate || std::fabs(w[k]) > 1.75 * total;
    }
    if (degenerate) {  // outside the view; the cubic's taps nearly cancel
      n = 1;
      w.assign(1, 1.0);
      total = 1;
    }
    int first = 0;
    while (first < n - 1 && w[first] == 0) ++first;
    int last = n;
    while (last > first + 1 && w[last - 1] == 0) --last;
    const int out_j = reverse ? out_size - 1 - j : j;
    std::vector<int>& fixed = axis.weights[out_j];
    int sum = 0;
    int largest = first;
    for (int k = first; k < last; ++k) {
      fixed.push_back(static_cast<int>(std::lround(w[k] / total * kOne)));
      sum += fixed.back();
      if (w[k] > w[largest]) largest = k;
    }
    fixed[largest - first] += kOne - sum;
    axis.start[out_j] = lo + first;
    axis.count[out_j] = last - first;
  }
  return axis;
}

std::vector<uint8_t> ReferenceResize(const RgbView& src,
                                     const ResizeRequest& r) {
  const ReferenceAxis h = ReferenceWeights(r.filter, r.x, r.width, src.width,
                                           r.out_width, r.flip);
  const ReferenceAxis v = ReferenceWeights(r.filter, r.y, r.height,
                                           src.height, r.out_height, false);
  constexpr int kHalf = 1 << (kResizeWeightBits - 1);
  // Each pass rounds to a byte, clamped (the cubic overshoots).
  auto to_byte = [](int acc) {
    return static_cast<uint8_t>(std::clamp(acc >> kResizeWeightBits, 0, 255));
  };
  // Vertical pass over every source column.
  std::vector<uint8_t> mid(static_cast<size_t>(r.out_height) * src.width * 3);
  for (int i = 0; i < r.out_height; ++i) {
    for (int x = 0; x < src.width * 3; ++x) {
      int acc = kHalf;
      for (int k = 0; k < v.count[i]; ++k) {
        acc += v.weights[i][k] * src.data[(v.start[i] + k) * src.stride + x];
      }
      mid[static_cast<size_t>(i) * src.width * 3 + x] = to_byte(acc);
    }
  }
  std::vector<uint8_t> out(static_cast<size_t>(r.out_height) * r.out_width *
                           3);
  const size_t plane = static_cast<size_t>(r.out_height) * r.out_width;
  for (int i = 0; i < r.out_height; ++i) {
    const uint8_t* row = &mid[static_cast<size_t>(i) * src.width * 3];
    for (int j = 0; j < r.out_width; ++j) {
      for (int c = 0; c < 3; ++c) {
        int acc = kHalf;
        for (int k = 0; k < h.count[j]; ++k) {
          acc += h.weights[j][k] * row[(h.start[j] + k) * 3 + c];
        }
        const uint8_t value = to_byte(acc);
        const size_t pixel = static_cast<size_t>(i) * r.out_width + j;
        if (r.layout == PixelLayout::kHWC) {
          out[pixel * 3 + c] = value;
        } else {
          out[c * plane + pixel] = value;
        }
      }
    }
  }
  return out;
}

// Random sources, windows (fractional, partly outside the view, tiny and
// huge), output sizes, flips and layouts, on both the fastest code path the
// CPU supports and the portable one, for each filter.
class ResizeFilterTest : public ::testing::TestWithParam<ResizeFilter> {};

TEST_P(ResizeFilterTest, MatchesTheReferenceOnRandomRequests) {
  std::mt19937 rng(20240611);
  auto uniform = [&](double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(rng);
  };
  auto integer = [&](int lo, int hi) {
    return std::uniform_int_distribution<int>(lo, hi)(rng);
  };
  for (int trial = 0; trial < 600; ++trial) {
    int w, h;
    switch (trial % 4) {
      case 0: w = integer(1, 4), h = integer(1, 4); break;
      case 1: w = integer(1, 40), h = integer(1, 40); break;
      default: w = integer(1, 520), h = integer(1, 520); break;
    }
    const int stride = w * 3 + (trial % 3 == 0 ? integer(0, 40) : 0);
    std::vector<uint8_t> data(static_cast<size_t>(stride) * h);
    for (auto& b : data) b = static_cast<uint8_t>(rng());
    if (trial % 7 == 0) {  // extremes: 0 and 255 everywhere
      for (auto& b : data) b = (b & 1) ? 255 : 0;
    }
    const RgbView view{data.data(), w, h, stride};
    ResizeRequest r;
    switch (trial % 5) {
      case 0:  // the whole view
        r.x = r.y = 0, r.width = w, r.height = h;
        break;
      case 1:  // an integer window
        r.x = integer(0, w - 1), r.y = integer(0, h - 1);
        r.width = integer(1, w - static_cast<int>(r.x));
        r.height = integer(1, h - static_cast<int>(r.y));
        break;
      default:  // fractional, possibly reaching outside the view
        r.x = uniform(-0.2 * w, 1.1 * w), r.y = uniform(-0.2 * h, 1.1 * h);
        r.width = uniform(0.01, 1.5 * w), r.height = uniform(0.01, 1.5 * h);
        break;
    }
    switch (trial % 3) {
      case 0: r.out_width = integer(1, 9), r.out_height = integer(1, 9); break;
      case 1: r.out_width = 224, r.out_height = 224; break;
      default:
        r.out_width = integer(1, 300), r.out_height = integer(1, 300);
        break;
    }
    r.flip = integer(0, 1) == 1;
    r.layout = integer(0, 1) == 1 ? PixelLayout::kCHW : PixelLayout::kHWC;
    r.filter = GetParam();
    const std::vector<uint8_t> expected = ReferenceResize(view, r);
    for (bool portable : {false, true}) {
      Resizer resizer;
      resizer.UsePortableCodeForTesting(portable);
      std::vector<uint8_t> out(expected.size() + 64, 0xA5);
      resizer.Resize(view, r, out.data());
      // Nothing written past the output.
      ASSERT_THAT(std::vector<uint8_t>(out.begin() + expected.size(), out.end()),
                  Each(0xA5));
      out.resize(expected.size());
      ASSERT_EQ(out, expected)
          << "trial " << trial << " portable " << portable << " src " << w
          << "x" << h << " stride " << stride << " window " << r.x << ","
          << r.y << " " << r.width << "x" << r.height << " out "
          << r.out_width << "x" << r.out_height << " flip " << r.flip
          << " chw " << (r.layout == PixelLayout::kCHW);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Filters, ResizeFilterTest,
                         ::testing::Values(ResizeFilter::kBilinear,
                                           ResizeFilter::kBicubic),
                         [](const auto& info) {
                           return info.param == ResizeFilter::kBilinear
                                      ? "Bilinear"
                                      : "Bicubic";
                         });

}  // namespace
}  // namespace batchd::server
