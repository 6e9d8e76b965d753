#include "server/plan/transform.h"

#include <cmath>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace batchd::server {
namespace {

using common::RandomPurpose;
using common::SampleRandom;

// Python 3's round() for floats, written independently of the
// implementation: nearest integer, exact halves to the even neighbour.
double PythonRound(double x) {
  const double floor = std::floor(x);
  const double fraction = x - floor;  // exact for |x| < 2^52
  if (fraction < 0.5) return floor;
  if (fraction > 0.5) return floor + 1;
  return std::fmod(floor, 2.0) == 0 ? floor : floor + 1;
}

// Python's a // b for integers.
long FloorDiv(long a, long b) {
  long q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

struct RefCrop {
  long i, j, h, w;  // top, left, height, width, as torchvision returns them
  bool fallback;
  bool flip;
};

// torchvision 0.15 transforms.RandomResizedCrop.get_params, line by line,
// with torch's RNG calls replaced by the same SampleRandom draws
// (uniform_ -> Uniform(lo, hi), randint(0, n) -> UniformInt(n)), followed by
// RandomHorizontalFlip's `torch.rand(1) < p`.
RefCrop ReferenceGetParams(long width, long height, double scale[2],
                           double ratio[2], double flip_p, SampleRandom& rng) {
  RefCrop out{};
  // area = height * width
  const double area = static_cast<double>(height * width);
  // log_ratio = torch.log(torch.tensor(ratio))
  const double log_ratio[2] = {std::log(ratio[0]), std::log(ratio[1])};
  bool done = false;
  // for _ in range(10):
  for (int attempt = 0; attempt < 10; ++attempt) {
    // target_area = area * torch.empty(1).uniform_(scale[0], scale[1]).item()
    const double target_area = area * rng.Uniform(scale[0], scale[1]);
    // aspect_ratio = torch.exp(
    //     torch.empty(1).uniform_(log_ratio[0], log_ratio[1])).item()
    const double aspect_ratio =
        std::exp(rng.Uniform(log_ratio[0], log_ratio[1]));
    // w = int(round(math.sqrt(target_area * aspect_ratio)))
    const long w = static_cast<long>(
        PythonRound(std::sqrt(target_area * aspect_ratio)));
    // h = int(round(math.sqrt(target_area / aspect_ratio)))
    const long h = static_cast<long>(
        PythonRound(std::sqrt(target_area / aspect_ratio)));
    // if 0 < w <= width and 0 < h <= height:
    if (0 < w && w <= width && 0 < h && h <= height) {
      // i = torch.randint(0, height - h + 1, size=(1,)).item()
      const long i = static_cast<long>(rng.UniformInt(height - h + 1));
      // j = torch.randint(0, width - w + 1, size=(1,)).item()
      const long j = static_cast<long>(rng.UniformInt(width - w + 1));
      // return i, j, h, w
      out = {i, j, h, w, false, false};
      done = true;
      break;
    }
  }
  if (!done) {
    // Fallback to central crop
    // in_ratio = float(width) / float(height)
    const double in_ratio =
        static_cast<double>(width) / static_cast<double>(height);
    const double min_ratio = std::min(ratio[0], ratio[1]);
    const double max_ratio = std::max(ratio[0], ratio[1]);
    long w, h;
    if (in_ratio < min_ratio) {
      w = width;
      h = static_cast<long>(PythonRound(w / min_ratio));
    } else if (in_ratio > max_ratio) {
      h = height;
      w = static_cast<long>(PythonRound(h * max_ratio));
    } else {  // whole image
      w = width;
      h = height;
    }
    // i = (height - h) // 2; j = (width - w) // 2
    out = {FloorDiv(height - h, 2), FloorDiv(width - w, 2), h, w, true, false};
  }
  out.flip = rng.Uniform() < flip_p;
  return out;
}

struct Size {
  int width, height;
};

TEST(RandomResizedCropSpecTest, MatchesTorchvisionReferenceExactly) {
  const std::vector<Size> sizes = {
      {500, 375}, {375, 500}, {224, 224}, {640, 480}, {4000, 3000},
      {17, 13},   {3, 2},     {1, 1},     {1, 1000},  {1000, 1},
      {2000, 50}, {50, 2000}, {100, 74},  {74, 100},  {8192, 8192}};
  const std::vector<TrainTransform> transforms = [] {
    std::vector<TrainTransform> t(4);
    t[1].scale_min = 0.5;
    t[1].ratio_min = 1.0;
    t[1].ratio_max = 1.0;
    t[1].size = 128;
    t[2].scale_min = 0.9;  // large crops: frequent rejections
    t[2].ratio_min = 0.2;
    t[2].ratio_max = 5.0;
    t[2].flip_probability = 0.0;
    t[3].ratio_min = 4.0 / 3.0;  // reversed range, as torchvision allows
    t[3].ratio_max = 3.0 / 4.0;
    t[3].flip_probability = 1.0;
    return t;
  }();
  int fallbacks = 0;
  int checked = 0;
  for (const Size& size : sizes) {
    for (size_t t = 0; t < transforms.size(); ++t) {
      const TrainTransform& params = transforms[t];
      for (uint64_t sample = 0; sample < 300; ++sample) {
        SampleRandom rng(/*seed=*/11, /*epoch=*/t, sample,
                         RandomPurpose::kAugment);
        SampleRandom ref_rng = rng;
        const CropSpec spec =
            RandomResizedCropSpec(size.width, size.height, params, rng);
        double scale[2] = {params.scale_min, params.scale_max};
        double ratio[2] = {params.ratio_min, params.ratio_max};
        const RefCrop ref =
            ReferenceGetParams(size.width, size.height, scale, ratio,
                               params.flip_probability, ref_rng);
        SCOPED_TRACE(::testing::Message()
                     << size.width << "x" << size.height << " transform " << t
                     << " sample " << sample);
        ASSERT_EQ(spec.x, static_cast<double>(ref.j));
        ASSERT_EQ(spec.y, static_cast<double>(ref.i));
        ASSERT_EQ(spec.width, static_cast<double>(ref.w));
        ASSERT_EQ(spec.height, static_cast<double>(ref.h));
        ASSERT_EQ(spec.flip, ref.flip);
        ASSERT_EQ(spec.out_width, params.size);
        ASSERT_EQ(spec.out_height, params.size);
        // Same number of draws: both generators are at the same point.
        ASSERT_EQ(rng.NextU32(), ref_rng.NextU32());
        fallbacks += ref.fallback;
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 15 * 4 * 300);
  EXPECT_GT(fallbacks, 300 * 4);  // the extreme shapes exercised the fallback
}

TEST(RandomResizedCropSpecTest, ExtremeAspectRatioFallsBackToCentreCrop) {
  // 2000x50 (ratio 40): a 3/4..4/3 crop is at most 66x50 = 3300 px, below
  // the smallest target area 0.08 * 100000 = 8000, so all 10 attempts fail.
  // Fallback: h = 50, w = round(50 * 4/3) = round(66.67) = 67,
  // left = (2000 - 67) // 2 = 966, top = 0.
  TrainTransform params;
  for (uint64_t sample = 0; sample < 50; ++sample) {
    SampleRandom rng(1, 0, sample, RandomPurpose::kAugment);
    const CropSpec spec = RandomResizedCropSpec(2000, 50, params, rng);
    EXPECT_EQ(spec.x, 966);
    EXPECT_EQ(spec.y, 0);
    EXPECT_EQ(spec.width, 67);
    EXPECT_EQ(spec.height, 50);
  }
  // Portrait 50x2000: w = 50, h = round(50 / 0.75) = 67, top = 966.
  SampleRandom rng(1, 0, 0, RandomPurpose::kAugment);
  const CropSpec spec = RandomResizedCropSpec(50, 2000, params, rng);
  EXPECT_EQ(spec.x, 0);
  EXPECT_EQ(spec.y, 966);
  EXPECT_EQ(spec.width, 50);
  EXPECT_EQ(spec.height, 67);
}

TEST(RandomResizedCropSpecTest, DegenerateInputsDoNotCrash) {
  SampleRandom rng(1, 0, 0, RandomPurpose::kAugment);
  TrainTransform params;
  CropSpec spec = RandomResizedCropSpec(0, 100, params, rng);
  EXPECT_EQ(spec.width, 0);
  spec = RandomResizedCropSpec(-5, -5, params, rng);
  EXPECT_EQ(spec.width, 0);
  // Nonsense ratios give NaN sides: every attempt fails, the fallback stays
  // inside the image.
  params.ratio_min = -1;
  params.ratio_max = 0;
  spec = RandomResizedCropSpec(100, 80, params, rng);
  EXPECT_GE(spec.width, 1);
  EXPECT_LE(spec.x + spec.width, 100);
  EXPECT_LE(spec.y + spec.height, 80);
}

// Mean crop area fraction for `width` x `height` under `params`, by
// integrating over the two uniforms of one attempt (midpoint rule on a fine
// grid, with the same rounding as the transform). Attempts are independent,
// so an accepted crop has the single-attempt conditional distribution, and
// the fallback happens with probability (1 - accept)^10.
double ExpectedAreaFraction(int width, int height,
                            const TrainTransform& params,
                            double fallback_fraction) {
  constexpr int kGrid = 1500;
  const double area = static_cast<double>(width) * height;
  const double log_lo = std::log(params.ratio_min);
  const double log_hi = std::log(params.ratio_max);
  double accepted = 0, accepted_area = 0;
  for (int a = 0; a < kGrid; ++a) {
    const double s = params.scale_min +
                     (params.scale_max - params.scale_min) * (a + 0.5) / kGrid;
    for (int b = 0; b < kGrid; ++b) {
      const double r = std::exp(log_lo + (log_hi - log_lo) * (b + 0.5) / kGrid);
      const double w = PythonRound(std::sqrt(area * s * r));
      const double h = PythonRound(std::sqrt(area * s / r));
      if (w > 0 && w <= width && h > 0 && h <= height) {
        accepted += 1;
        accepted_area += w * h / area;
      }
    }
  }
  const double p_accept = accepted / (double{kGrid} * kGrid);
  const double p_fallback = std::pow(1 - p_accept, 10);
  return (1 - p_fallback) * (accepted_area / accepted) +
         p_fallback * fallback_fraction;
}

TEST(RandomResizedCropSpecTest, DistributionFor500x375) {
  constexpr int kWidth = 500, kHeight = 375;
  constexpr int kSamples = 20000;
  TrainTransform params;
  double sum_fraction = 0;
  int flips = 0;
  for (uint64_t sample = 0; sample < kSamples; ++sample) {
    SampleRandom rng(/*seed=*/2024, /*epoch=*/1, sample,
                     RandomPurpose::kAugment);
    const CropSpec spec = RandomResizedCropSpec(kWidth, kHeight, params, rng);
    // Inside the image, integral.
    ASSERT_GE(spec.x, 0);
    ASSERT_GE(spec.y, 0);
    ASSERT_GE(spec.width, 1);
    ASSERT_GE(spec.height, 1);
    ASSERT_LE(spec.x + spec.width, kWidth);
    ASSERT_LE(spec.y + spec.height, kHeight);
    ASSERT_EQ(spec.x, std::floor(spec.x));
    ASSERT_EQ(spec.width, std::floor(spec.width));
    // Area and aspect ratio in range, up to the rounding of the sides to
    // integers (< 0.5 px on sides of >= 100 px).
    const double fraction = spec.width * spec.height / (kWidth * kHeight);
    ASSERT_GE(fraction, 0.08 * 0.98);
    ASSERT_LE(fraction, 1.0);
    const double aspect = spec.width / spec.height;
    ASSERT_GE(aspect, 0.75 * 0.99);
    ASSERT_LE(aspect, 4.0 / 3.0 * 1.01);
    sum_fraction += fraction;
    flips += spec.flip;
  }
  // The fallback of a 4:3 image is the whole image.
  const double expected = ExpectedAreaFraction(kWidth, kHeight, params,
                                               /*fallback_fraction=*/1.0);
  // Std of the fraction is below 0.3, so the mean's std is below
  // 0.3 / sqrt(20000) = 0.0021; allow 5 of them.
  EXPECT_NEAR(sum_fraction / kSamples, expected, 0.011);
  // Sanity of the integral itself: between the scale range's bounds and
  // below the unconstrained mean 0.54 (large crops get rejected).
  EXPECT_GT(expected, 0.3);
  EXPECT_LT(expected, 0.54);
  // Flip ~ Binomial(20000, 0.5): std 70.7; allow 5 of them.
  EXPECT_NEAR(flips, kSamples / 2, 354);
}

void ExpectWindow(const CropSpec& spec, double x, double y, double width,
                  double height) {
  EXPECT_NEAR(spec.x, x, 1e-9);
  EXPECT_NEAR(spec.y, y, 1e-9);
  EXPECT_NEAR(spec.width, width, 1e-9);
  EXPECT_NEAR(spec.height, height, 1e-9);
  EXPECT_FALSE(spec.flip);
}

TEST(CenterCropSpecTest, Landscape500x375) {
  // Resize(256): shorter side 375 -> 256, longer 500 -> int(256*500/375) =
  // int(341.33) = 341; the resized image is 341x256.
  // CenterCrop(224): top = int(round((256-224)/2)) = 16,
  //                  left = int(round((341-224)/2)) = round(58.5) = 58
  //                  (half to even, as Python 3).
  // Back to the source: scale_x = 341/500, scale_y = 256/375, so
  //   x = 58 * 500/341 = 85.0439..., y = 16 * 375/256 = 23.4375,
  //   w = 224 * 500/341 = 328.4457..., h = 224 * 375/256 = 328.125.
  const CropSpec spec = CenterCropSpec(500, 375, EvalTransform{});
  ExpectWindow(spec, 58.0 * 500 / 341, 23.4375, 224.0 * 500 / 341, 328.125);
  EXPECT_EQ(spec.out_width, 224);
  EXPECT_EQ(spec.out_height, 224);
}

TEST(CenterCropSpecTest, Portrait375x500) {
  // The transpose of the landscape case: resized 256x341.
  const CropSpec spec = CenterCropSpec(375, 500, EvalTransform{});
  ExpectWindow(spec, 23.4375, 58.0 * 500 / 341, 328.125, 224.0 * 500 / 341);
}

TEST(CenterCropSpecTest, Square300) {
  // 300x300 -> 256x256; crop at (16, 16); scale 256/300:
  // x = y = 16 * 300/256 = 18.75, w = h = 224 * 300/256 = 262.5.
  ExpectWindow(CenterCropSpec(300, 300, EvalTransform{}), 18.75, 18.75, 262.5,
               262.5);
}

TEST(CenterCropSpecTest, RoundsHalfToEvenUpward) {
  // 1000x746: longer -> int(256*1000/746) = int(343.16) = 343;
  // left = round((343-224)/2) = round(59.5) = 60 (even); top = 16.
  ExpectWindow(CenterCropSpec(1000, 746, EvalTransform{}), 60.0 * 1000 / 343,
               16.0 * 746 / 256, 224.0 * 1000 / 343, 224.0 * 746 / 256);
}

TEST(CenterCropSpecTest, TinyImagesAreUpscaled) {
  // 1x1 -> 256x256; crop (16, 16): x = y = 16/256, w = h = 224/256.
  ExpectWindow(CenterCropSpec(1, 1, EvalTransform{}), 0.0625, 0.0625, 0.875,
               0.875);
  // 10x7 -> int(256*10/7) = 365 x 256; left = round(70.5) = 70, top = 16:
  // x = 70*10/365, y = 16*7/256 = 0.4375, w = 224*10/365, h = 224*7/256.
  ExpectWindow(CenterCropSpec(10, 7, EvalTransform{}), 70.0 * 10 / 365,
               0.4375, 224.0 * 10 / 365, 6.125);
}

TEST(CenterCropSpecTest, CropLargerThanResizeIsClampedToTheImage) {
  // Resize(200) of 400x200 keeps it 400x200; CenterCrop(224) would pad 12
  // rows above and below (torchvision); a CropSpec clamps to the rows there
  // are: left = 88, top = 0, 224 x 200.
  EvalTransform params;
  params.resize_shorter = 200;
  ExpectWindow(CenterCropSpec(400, 200, params), 88, 0, 224, 200);
}

TEST(CenterCropSpecTest, WindowAlwaysInsideTheImage) {
  for (int width : {1, 2, 7, 223, 224, 255, 256, 257, 500, 1001, 5000}) {
    for (int height : {1, 3, 224, 256, 375, 999, 4000}) {
      for (int resize : {32, 224, 256, 300}) {
        EvalTransform params;
        params.resize_shorter = resize;
        const CropSpec spec = CenterCropSpec(width, height, params);
        EXPECT_GE(spec.x, 0);
        EXPECT_GE(spec.y, 0);
        EXPECT_GT(spec.width, 0);
        EXPECT_GT(spec.height, 0);
        EXPECT_LE(spec.x + spec.width, width * (1 + 1e-12));
        EXPECT_LE(spec.y + spec.height, height * (1 + 1e-12));
      }
    }
  }
  // Degenerate inputs give an empty window instead of dividing by zero.
  EXPECT_EQ(CenterCropSpec(0, 10, EvalTransform{}).width, 0);
  EXPECT_EQ(CenterCropSpec(10, 10, EvalTransform{0, 224}).width, 0);
}

}  // namespace
}  // namespace batchd::server
