#include "server/decode/resize.h"

#include <cstdint>
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
                      PixelLayout layout = PixelLayout::kHWC) {
  ResizeRequest r;
  r.x = x;
  r.y = y;
  r.width = w;
  r.height = h;
  r.out_width = out_w;
  r.out_height = out_h;
  r.flip = flip;
  r.layout = layout;
  return r;
}

TEST(ResizeTest, ConstantImageStaysConstant) {
  Resizer resizer;
  for (int value : {0, 1, 127, 200, 255}) {
    std::vector<uint8_t> src(97 * 61 * 3, static_cast<uint8_t>(value));
    for (auto [out_w, out_h] : {std::pair{13, 7}, {97, 61}, {224, 224}, {40, 90}}) {
      std::vector<uint8_t> out(out_w * out_h * 3, 0x5A);
      resizer.Resize(View(src, 97, 61),
                     Request(3.25, 1.5, 80.5, 50.75, out_w, out_h), out.data());
      EXPECT_THAT(out, Each(value)) << out_w << "x" << out_h;
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

}  // namespace
}  // namespace batchd::server
