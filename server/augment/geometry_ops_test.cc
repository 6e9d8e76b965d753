#include "server/augment/geometry_ops.h"

#include <cstdint>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace batchd::server::augment {
namespace {

// An owned RGB image with `padding` bytes after each row, filled with a
// pattern that differs per pixel and per channel.
struct TestImage {
  TestImage(int width, int height, int padding = 0)
      : width(width),
        height(height),
        stride(3 * width + padding),
        bytes(static_cast<size_t>(stride) * height, 0xEE) {
    for (int y = 0; y < height; ++y) {
      for (int x = 0; x < width; ++x) {
        for (int c = 0; c < 3; ++c) {
          at(x, y, c) = static_cast<uint8_t>((x * 7 + y * 31 + c * 85) % 256);
        }
      }
    }
  }

  Image view() { return Image{bytes.data(), width, height, stride}; }
  uint8_t& at(int x, int y, int c) {
    return bytes[static_cast<size_t>(y) * stride + x * 3 + c];
  }

  int width;
  int height;
  ptrdiff_t stride;
  std::vector<uint8_t> bytes;
};

// Expects image(x, y) == original(map(x, y)) for every pixel, or `fill`
// where map returns false.
template <typename Map>
void ExpectMapped(TestImage& image, TestImage& original, Map map,
                  std::array<uint8_t, 3> fill = {0, 0, 0}) {
  for (int y = 0; y < image.height; ++y) {
    for (int x = 0; x < image.width; ++x) {
      int sx = 0, sy = 0;
      const bool inside = map(x, y, &sx, &sy);
      for (int c = 0; c < 3; ++c) {
        const int want = inside ? original.at(sx, sy, c) : fill[c];
        ASSERT_EQ(image.at(x, y, c), want)
            << "pixel (" << x << ", " << y << ") channel " << c;
      }
    }
  }
}

class GeometryOpsTest : public ::testing::TestWithParam<Interpolation> {
 protected:
  AffineParams Params() const {
    AffineParams params;
    params.interpolation = GetParam();
    return params;
  }
  std::vector<uint8_t> scratch_;
};

TEST_P(GeometryOpsTest, IdentityIsACopy) {
  for (auto [w, h] : {std::pair{224, 224}, std::pair{37, 23}}) {
    TestImage image(w, h), original(w, h);
    Affine(image.view(), Params(), &scratch_);
    EXPECT_EQ(image.bytes, original.bytes) << w << "x" << h;
  }
}

TEST_P(GeometryOpsTest, RotateQuarterTurnCounterClockwise) {
  TestImage image(16, 16), original(16, 16);
  Rotate(image.view(), /*angle=*/90, GetParam(), {0, 0, 0}, &scratch_);
  // torchvision: F.rotate(img, 90)[y][x] == img[x][w - 1 - y].
  ExpectMapped(image, original, [&](int x, int y, int* sx, int* sy) {
    *sx = image.width - 1 - y;
    *sy = x;
    return true;
  });
}

TEST_P(GeometryOpsTest, AffineQuarterTurnClockwise) {
  TestImage image(16, 16), original(16, 16);
  AffineParams params = Params();
  params.angle = 90;
  Affine(image.view(), params, &scratch_);
  // torchvision: F.affine(img, angle=90)[y][x] == img[h - 1 - x][y].
  ExpectMapped(image, original, [&](int x, int y, int* sx, int* sy) {
    *sx = y;
    *sy = image.height - 1 - x;
    return true;
  });
}

TEST_P(GeometryOpsTest, HalfTurnOfARectangle) {
  TestImage image(20, 11), original(20, 11);
  Rotate(image.view(), /*angle=*/180, GetParam(), {0, 0, 0}, &scratch_);
  ExpectMapped(image, original, [&](int x, int y, int* sx, int* sy) {
    *sx = image.width - 1 - x;
    *sy = image.height - 1 - y;
    return true;
  });
}

TEST_P(GeometryOpsTest, WholePixelTranslationMovesAndFills) {
  TestImage image(30, 20), original(30, 20);
  AffineParams params = Params();
  params.translate_x = 3;
  params.translate_y = -2;
  params.fill = {9, 200, 77};
  Affine(image.view(), params, &scratch_);
  ExpectMapped(
      image, original,
      [&](int x, int y, int* sx, int* sy) {
        *sx = x - 3;
        *sy = y + 2;
        return *sx >= 0 && *sy < image.height;
      },
      params.fill);
}

TEST_P(GeometryOpsTest, ShearAboutTheTopLeftCornerKeepsTheFirstRow) {
  // The policies' ShearX: centre (0, 0) in pixels, the top-left corner.
  // Row y's pixel centres, y + 0.5 below it, move along x by
  // tan(10 degrees) * (y + 0.5): under half a pixel for the first row, so
  // nearest keeps it (bilinear blends it with its neighbours).
  if (GetParam() == Interpolation::kBilinear) GTEST_SKIP();
  TestImage image(40, 10), original(40, 10);
  AffineParams params = Params();
  params.shear_x = 10;
  params.center_set = true;
  Affine(image.view(), params, &scratch_);
  for (int x = 0; x < image.width; ++x) {
    for (int c = 0; c < 3; ++c) {
      EXPECT_EQ(image.at(x, 0, c), original.at(x, 0, c));
    }
  }
}

TEST_P(GeometryOpsTest, LeavesTheBytesBetweenRowsAlone) {
  TestImage padded(25, 17, /*padding=*/13), original(25, 17, 13);
  TestImage packed(25, 17);
  AffineParams params = Params();
  params.angle = 17;
  params.translate_x = 2;
  params.scale = 0.9f;
  params.shear_y = 5;
  params.fill = {1, 2, 3};
  Affine(padded.view(), params, &scratch_);
  Affine(packed.view(), params, &scratch_);
  for (int y = 0; y < padded.height; ++y) {
    for (int x = 0; x < padded.width; ++x) {
      for (int c = 0; c < 3; ++c) {
        ASSERT_EQ(padded.at(x, y, c), packed.at(x, y, c));
      }
    }
    for (ptrdiff_t b = 3 * padded.width; b < padded.stride; ++b) {
      ASSERT_EQ(padded.bytes[y * padded.stride + b], 0xEE);
    }
  }
  EXPECT_NE(padded.bytes, original.bytes);
}

INSTANTIATE_TEST_SUITE_P(Interpolations, GeometryOpsTest,
                         ::testing::Values(Interpolation::kNearest,
                                           Interpolation::kBilinear),
                         [](const auto& info) {
                           return info.param == Interpolation::kNearest
                                      ? "Nearest"
                                      : "Bilinear";
                         });

TEST(GeometryOpsFillTest, BilinearBlendsAGivenFillButNotNone) {
  // Half a pixel right: column 0 samples half outside (mask 0.5).
  // torchvision: fill=None gives 0.5 * 200 = 100; fill=[0, 0, 0] blends
  // the sample by the mask once more: 0.5 * 100 + 0.5 * 0 = 50.
  std::vector<uint8_t> scratch;
  AffineParams params;
  params.translate_x = 0.5f;
  params.interpolation = Interpolation::kBilinear;
  for (bool none : {true, false}) {
    std::vector<uint8_t> pixels(8 * 4 * 3, 200);
    params.fill_none = none;
    Affine(Image{pixels.data(), 8, 4, 24}, params, &scratch);
    EXPECT_EQ(pixels[0], none ? 100 : 50);
    EXPECT_EQ(pixels[3], 200);  // column 1: both neighbours inside
  }
}

TEST(GeometryOpsFillTest, NearestFillNoneIsBlack) {
  std::vector<uint8_t> scratch;
  std::vector<uint8_t> pixels(8 * 4 * 3, 200);
  AffineParams params;
  params.translate_y = 1;
  params.fill = {5, 6, 7};
  params.fill_none = true;
  Affine(Image{pixels.data(), 8, 4, 24}, params, &scratch);
  EXPECT_THAT(std::vector<uint8_t>(pixels.begin(), pixels.begin() + 24),
              ::testing::Each(0));
  EXPECT_THAT(std::vector<uint8_t>(pixels.begin() + 24, pixels.end()),
              ::testing::Each(200));
}

TEST(VerticalFlipTest, MirrorsRowsAndTwiceIsIdentity) {
  for (int h : {1, 6, 7}) {
    TestImage image(9, h, /*padding=*/5), original(9, h, 5);
    VerticalFlip(image.view());
    ExpectMapped(image, original, [&](int x, int y, int* sx, int* sy) {
      *sx = x;
      *sy = h - 1 - y;
      return true;
    });
    VerticalFlip(image.view());
    EXPECT_EQ(image.bytes, original.bytes);
  }
}

}  // namespace
}  // namespace batchd::server::augment
