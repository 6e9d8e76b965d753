#include "server/augment/color_ops.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace batchd::server::augment {
namespace {

using ::testing::Each;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;

constexpr uint8_t kSentinel = 0xA5;

// An RGB image that owns its pixels, rows `pad` bytes longer than the
// pixels they hold; the padding holds kSentinel so that tests can check
// that no op writes past a row.
class TestImage {
 public:
  TestImage(int width, int height, int pad = 0)
      : width_(width),
        height_(height),
        stride_(3 * width + pad),
        bytes_(static_cast<size_t>(stride_) * height, kSentinel) {}

  Image image() { return Image{bytes_.data(), width_, height_, stride_}; }

  uint8_t* at(int x, int y) { return &bytes_[y * stride_ + 3 * x]; }

  void Fill(uint8_t r, uint8_t g, uint8_t b) {
    for (int y = 0; y < height_; ++y) {
      for (int x = 0; x < width_; ++x) Set(x, y, r, g, b);
    }
  }
  void Set(int x, int y, uint8_t r, uint8_t g, uint8_t b) {
    at(x, y)[0] = r;
    at(x, y)[1] = g;
    at(x, y)[2] = b;
  }
  // Varied colours: a deterministic pseudo-random image.
  void FillNoise(uint32_t seed) {
    for (int y = 0; y < height_; ++y) {
      for (int x = 0; x < width_; ++x) {
        for (int c = 0; c < 3; ++c) {
          seed = seed * 1664525u + 1013904223u;
          at(x, y)[c] = static_cast<uint8_t>(seed >> 24);
        }
      }
    }
  }

  // The pixels, without the padding, row after row.
  std::vector<uint8_t> Pixels() const {
    std::vector<uint8_t> out;
    for (int y = 0; y < height_; ++y) {
      const uint8_t* row = &bytes_[y * stride_];
      out.insert(out.end(), row, row + 3 * width_);
    }
    return out;
  }
  // The padding bytes of every row.
  std::vector<uint8_t> Padding() const {
    std::vector<uint8_t> out;
    for (int y = 0; y < height_; ++y) {
      const uint8_t* row = &bytes_[y * stride_];
      out.insert(out.end(), row + 3 * width_, row + stride_);
    }
    return out;
  }
  // The RGB value of pixel (x, y).
  std::vector<uint8_t> Pixel(int x, int y) {
    return std::vector<uint8_t>(at(x, y), at(x, y) + 3);
  }

 private:
  int width_, height_;
  ptrdiff_t stride_;
  std::vector<uint8_t> bytes_;
};

// Every op, with fixed parameters, by name.
using Op = std::function<void(Image)>;
std::vector<std::pair<std::string, Op>> AllOps() {
  auto u8_scratch = std::make_shared<std::vector<uint8_t>>();
  auto float_scratch = std::make_shared<std::vector<float>>();
  return {
      {"brightness", [](Image i) { AdjustBrightness(i, 1.3); }},
      {"contrast", [](Image i) { AdjustContrast(i, 0.6); }},
      {"saturation", [](Image i) { AdjustSaturation(i, 1.7); }},
      {"hue", [](Image i) { AdjustHue(i, -0.27f); }},
      {"sharpness",
       [u8_scratch](Image i) { AdjustSharpness(i, 1.8, u8_scratch.get()); }},
      {"posterize", [](Image i) { Posterize(i, 3); }},
      {"solarize", [](Image i) { Solarize(i, 100.5f); }},
      {"invert", [](Image i) { Invert(i); }},
      {"autocontrast", [](Image i) { Autocontrast(i); }},
      {"equalize", [](Image i) { Equalize(i); }},
      {"grayscale", [](Image i) { Grayscale(i); }},
      {"gaussian_blur",
       [float_scratch](Image i) {
         GaussianBlur(i, 5, 3, 1.2f, 0.7f, float_scratch.get());
       }},
  };
}

TEST(ColorOpsTest, GrayscaleTruncatesTorchvisionsWeightedSum) {
  TestImage img(3, 1);
  img.Set(0, 0, 100, 100, 100);  // 0.9999 * 100 = 99.99
  img.Set(1, 0, 255, 255, 255);  // 254.97
  img.Set(2, 0, 10, 200, 30);    // 2.989 + 117.4 + 3.42 = 123.809
  Grayscale(img.image());
  EXPECT_THAT(img.Pixels(),
              ElementsAre(99, 99, 99, 254, 254, 254, 123, 123, 123));
}

TEST(ColorOpsTest, BrightnessScalesClampsAndTruncates) {
  TestImage img(1, 1);
  img.Set(0, 0, 100, 171, 1);
  AdjustBrightness(img.image(), 1.5);  // 150, 256.5 -> 255, 1.5 -> 1
  EXPECT_THAT(img.Pixel(0, 0), ElementsAre(150, 255, 1));
  AdjustBrightness(img.image(), 0.0);
  EXPECT_THAT(img.Pixel(0, 0), ElementsAre(0, 0, 0));
}

TEST(ColorOpsTest, IdentityFactorsKeepTheImage) {
  TestImage img(13, 7);
  img.FillNoise(1);
  const std::vector<uint8_t> before = img.Pixels();
  std::vector<uint8_t> scratch;
  AdjustBrightness(img.image(), 1.0);
  AdjustContrast(img.image(), 1.0);
  AdjustSaturation(img.image(), 1.0);
  AdjustSharpness(img.image(), 1.0, &scratch);
  Posterize(img.image(), 8);
  Solarize(img.image(), 255.5f);
  EXPECT_EQ(img.Pixels(), before);
  Invert(img.image());
  Invert(img.image());
  EXPECT_EQ(img.Pixels(), before);
}

TEST(ColorOpsTest, ContrastBlendsWithTheMeanOfTheTruncatedGrays) {
  TestImage img(2, 2);
  img.Set(0, 0, 100, 100, 100);  // gray 99
  img.Set(1, 0, 100, 100, 100);
  img.Set(0, 1, 0, 0, 0);
  img.Set(1, 1, 0, 0, 0);
  // mean = 49.5: 0.5 * 100 + 24.75 = 74.75 and 24.75.
  AdjustContrast(img.image(), 0.5);
  EXPECT_THAT(img.Pixels(), ElementsAre(74, 74, 74, 74, 74, 74, 24, 24, 24,
                                        24, 24, 24));
}

TEST(ColorOpsTest, ContrastZeroGivesTheMeanGray) {
  TestImage img(4, 4);
  img.Fill(40, 90, 200);  // gray 11.956 + 52.83 + 22.8 = 87.586 -> 87
  AdjustContrast(img.image(), 0.0);
  EXPECT_THAT(img.Pixels(), Each(87));
}

TEST(ColorOpsTest, SaturationZeroIsGrayscaleAndTwoExtrapolates) {
  TestImage img(1, 1);
  img.Set(0, 0, 10, 200, 30);  // gray 123
  AdjustSaturation(img.image(), 0.0);
  EXPECT_THAT(img.Pixel(0, 0), ElementsAre(123, 123, 123));
  img.Set(0, 0, 10, 200, 30);
  AdjustSaturation(img.image(), 2.0);  // 2x - 123: -103, 277, -63
  EXPECT_THAT(img.Pixel(0, 0), ElementsAre(0, 255, 0));
}

TEST(ColorOpsTest, HueRotatesPrimaries) {
  TestImage img(1, 1);
  img.Set(0, 0, 255, 0, 0);
  AdjustHue(img.image(), 1.0f / 3);
  EXPECT_THAT(img.Pixel(0, 0), ElementsAre(0, 255, 0));
  img.Set(0, 0, 255, 0, 0);
  AdjustHue(img.image(), -1.0f / 3);
  EXPECT_THAT(img.Pixel(0, 0), ElementsAre(0, 0, 255));
}

TEST(ColorOpsTest, HueKeepsGraysAtEveryLevel) {
  TestImage img(256, 1);
  for (int x = 0; x < 256; ++x) {
    img.Set(x, 0, static_cast<uint8_t>(x), static_cast<uint8_t>(x),
            static_cast<uint8_t>(x));
  }
  const std::vector<uint8_t> before = img.Pixels();
  AdjustHue(img.image(), 0.5f);
  EXPECT_EQ(img.Pixels(), before);
}

TEST(ColorOpsTest, SharpnessBlendsWithTheSmoothedInterior) {
  TestImage img(3, 3);
  img.Fill(0, 0, 0);
  img.Set(1, 1, 255, 255, 255);
  std::vector<uint8_t> scratch;
  // Factor 0 is the degenerate image: round(5 * 255 / 13) = round(98.08).
  AdjustSharpness(img.image(), 0.0, &scratch);
  EXPECT_THAT(img.Pixel(1, 1), ElementsAre(98, 98, 98));
  EXPECT_THAT(img.Pixel(0, 0), ElementsAre(0, 0, 0));
  img.Set(1, 1, 255, 255, 255);
  AdjustSharpness(img.image(), 2.0, &scratch);  // 510 - 98, clamped
  EXPECT_THAT(img.Pixel(1, 1), ElementsAre(255, 255, 255));
}

TEST(ColorOpsTest, SharpnessLeavesImagesTwoPixelsHighUnchanged) {
  TestImage img(5, 2);
  img.FillNoise(2);
  const std::vector<uint8_t> before = img.Pixels();
  std::vector<uint8_t> scratch;
  AdjustSharpness(img.image(), 0.0, &scratch);
  EXPECT_EQ(img.Pixels(), before);
}

TEST(ColorOpsTest, PosterizeKeepsTheTopBits) {
  TestImage img(1, 1);
  img.Set(0, 0, 0xFF, 0x9C, 0x1F);
  Posterize(img.image(), 3);
  EXPECT_THAT(img.Pixel(0, 0), ElementsAre(0xE0, 0x80, 0x00));
  Posterize(img.image(), 0);
  EXPECT_THAT(img.Pixel(0, 0), ElementsAre(0, 0, 0));
}

TEST(ColorOpsTest, SolarizeComparesWithAFractionalThreshold) {
  TestImage img(2, 1);
  img.Set(0, 0, 245, 246, 247);
  img.Set(1, 0, 255, 0, 128);
  Solarize(img.image(), 246.5f);  // policies' linspace(255, 0, 31)[1]
  EXPECT_THAT(img.Pixels(), ElementsAre(245, 246, 8, 0, 0, 128));
  img.Set(0, 0, 0, 1, 2);
  Solarize(img.image(), 0.0f);
  EXPECT_THAT(img.Pixel(0, 0), ElementsAre(255, 254, 253));
}

TEST(ColorOpsTest, AutocontrastStretchesEachChannel) {
  TestImage img(3, 1);
  img.Set(0, 0, 50, 7, 0);
  img.Set(1, 0, 100, 7, 1);
  img.Set(2, 0, 150, 7, 255);
  Autocontrast(img.image());
  // (100 - 50) * (1 / 100) * 255 = 127.5; a constant channel is kept.
  EXPECT_THAT(img.Pixels(), ElementsAre(0, 7, 0, 127, 7, 1, 255, 7, 255));
}

TEST(ColorOpsTest, EqualizeSpreadsTheHistogram) {
  TestImage img(32, 32);
  for (int y = 0; y < 32; ++y) {
    for (int x = 0; x < 32; ++x) {
      const uint8_t v = static_cast<uint8_t>(10 * (x % 4));
      img.Set(x, y, v, v, v);
    }
  }
  // 256 pixels of each of 0, 10, 20, 30: step = 768 // 255 = 3, and
  // lut[v] = (pixels below v + 1) // 3, clamped.
  Equalize(img.image());
  EXPECT_THAT(img.Pixel(0, 0), ElementsAre(0, 0, 0));
  EXPECT_THAT(img.Pixel(1, 0), ElementsAre(85, 85, 85));
  EXPECT_THAT(img.Pixel(2, 0), ElementsAre(171, 171, 171));
  EXPECT_THAT(img.Pixel(3, 0), ElementsAre(255, 255, 255));
}

TEST(ColorOpsTest, EqualizeKeepsAConstantImage) {
  TestImage img(9, 9);
  img.Fill(3, 90, 250);
  Equalize(img.image());
  EXPECT_THAT(img.Pixel(4, 4), ElementsAre(3, 90, 250));
}

TEST(ColorOpsTest, GaussianBlurOfAnImpulse) {
  TestImage img(5, 5);
  img.Fill(0, 0, 0);
  img.Set(2, 2, 255, 255, 255);
  std::vector<float> scratch;
  // Kernel exp(-x^2 / 2) / sum = [0.27407, 0.45186, 0.27407]: 255 times
  // 0.45186^2 = 52.07, 0.27407 * 0.45186 = 31.58, 0.27407^2 = 19.15.
  GaussianBlur(img.image(), 3, 3, 1.0f, 1.0f, &scratch);
  const std::vector<uint8_t> red = [&] {
    std::vector<uint8_t> v;
    for (int y = 0; y < 5; ++y) {
      for (int x = 0; x < 5; ++x) v.push_back(img.at(x, y)[0]);
    }
    return v;
  }();
  EXPECT_THAT(red, ElementsAreArray({0, 0,  0,  0,  0,  //
                                     0, 19, 32, 19, 0,  //
                                     0, 32, 52, 32, 0,  //
                                     0, 19, 32, 19, 0,  //
                                     0, 0,  0,  0,  0}));
}

TEST(ColorOpsTest, GaussianBlurReflectsAtTheEdges) {
  // Reflect padding (edge not repeated): column -1 is column 1.
  TestImage img(3, 1);
  img.Set(0, 0, 0, 0, 0);
  img.Set(1, 0, 255, 255, 255);
  img.Set(2, 0, 0, 0, 0);
  std::vector<float> scratch;
  GaussianBlur(img.image(), 3, 1, 1.0f, 1.0f, &scratch);
  // Edges: 2 * 0.27407 * 255 = 139.78; centre 0.45186 * 255 = 115.2.
  EXPECT_THAT(img.Pixels(), ElementsAre(140, 140, 140, 115, 115, 115, 140,
                                        140, 140));
}

TEST(ColorOpsTest, GaussianBlurKeepsAConstantImageAndKernelOne) {
  TestImage img(7, 5);
  img.Fill(17, 128, 254);
  std::vector<float> scratch;
  GaussianBlur(img.image(), 9, 23, 3.0f, 5.0f, &scratch);
  EXPECT_THAT(img.Pixel(3, 2), ElementsAre(17, 128, 254));
  EXPECT_THAT(img.Pixel(0, 0), ElementsAre(17, 128, 254));
  img.FillNoise(3);
  const std::vector<uint8_t> before = img.Pixels();
  GaussianBlur(img.image(), 1, 1, 0.5f, 0.5f, &scratch);
  EXPECT_EQ(img.Pixels(), before);
}

// Every op gives the same pixels on a strided image as on a contiguous
// one, and leaves the bytes between rows alone, at sizes down to 1x1.
TEST(ColorOpsTest, StridedImagesMatchContiguousOnes) {
  const std::pair<int, int> sizes[] = {{1, 1}, {1, 7}, {7, 1}, {5, 3},
                                       {3, 5}, {17, 9}, {33, 4}};
  for (const auto& [name, op] : AllOps()) {
    for (const auto& [w, h] : sizes) {
      SCOPED_TRACE(name + " " + std::to_string(w) + "x" + std::to_string(h));
      TestImage contiguous(w, h), strided(w, h, /*pad=*/5);
      contiguous.FillNoise(w * 31 + h);
      strided.FillNoise(w * 31 + h);
      op(contiguous.image());
      op(strided.image());
      EXPECT_EQ(strided.Pixels(), contiguous.Pixels());
      EXPECT_THAT(strided.Padding(), Each(kSentinel));
    }
  }
}

// The per-pixel loops run in vector blocks with scalar tails: an image
// whose rows are not a multiple of the block gives, pixel for pixel, what
// the same pixels give one at a time (as 1x1 images) for the pointwise
// ops.
TEST(ColorOpsTest, PointwiseOpsAgreeWithOnePixelAtATime) {
  const char* pointwise[] = {"brightness", "saturation", "hue", "posterize",
                             "solarize",   "invert",     "grayscale"};
  for (const auto& [name, op] : AllOps()) {
    if (std::find(std::begin(pointwise), std::end(pointwise), name) ==
        std::end(pointwise)) {
      continue;
    }
    SCOPED_TRACE(name);
    TestImage img(37, 3);
    img.FillNoise(7);
    TestImage one(1, 1);
    std::vector<uint8_t> expected;
    for (int y = 0; y < 3; ++y) {
      for (int x = 0; x < 37; ++x) {
        one.Set(0, 0, img.at(x, y)[0], img.at(x, y)[1], img.at(x, y)[2]);
        op(one.image());
        const std::vector<uint8_t> p = one.Pixel(0, 0);
        expected.insert(expected.end(), p.begin(), p.end());
      }
    }
    op(img.image());
    EXPECT_EQ(img.Pixels(), expected);
  }
}

}  // namespace
}  // namespace batchd::server::augment
