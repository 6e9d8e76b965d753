// WebpDecoder against PIL: WebP files and PIL's decode of each are made at
// test time (testing/make_webp_cases.py, Debian's python3-pil and the
// python3-skimage sample photographs), so both decoders read the same bytes.
//
// Tolerances (measured with libwebp 1.2.4, PIL 9.4 on Debian 12; the
// figures each run measures are printed):
// - Lossless: exact, whole image and every crop.
// - Lossy, whole image: exact (PIL decodes with the same libwebp and the
//   same fancy upsampling).
// - Lossy, a crop through libwebp's cropping against the same window of
//   the whole decode: max abs diff <= kLossyCropMaxDiff, mean <=
//   kLossyCropMeanDiff (the chroma upsampling at the crop's edges sees no
//   samples beyond them).
// - A crop resized to 32..112 (RandomResizedCrop-like), against the same
//   crop resized from PIL's whole decode: max <= kResizedMaxDiff, mean <=
//   kResizedMeanDiff. With libwebp's scaling (off in the daemon) the
//   figures are printed, not asserted: webp_decoder.h says why it is off.
#include "server/decode/webp_decoder.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/decode/capped_image.h"
#include "server/decode/decode_internal.h"
#include "server/decode/image_decoder.h"
#include "server/decode/image_probe.h"
#include "server/decode/resize.h"

namespace batchd::server {
namespace {

constexpr int kLossyCropMaxDiff = 24;
constexpr double kLossyCropMeanDiff = 0.05;
constexpr int kResizedMaxDiff = 32;
constexpr double kResizedMeanDiff = 0.25;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Case {
  std::string name;
  int width = 0;
  int height = 0;
  bool lossless = false;
  std::string webp;
  std::string pil_rgb;  // PIL's decode, .convert("RGB")

  absl::Span<const uint8_t> bytes() const {
    return {reinterpret_cast<const uint8_t*>(webp.data()), webp.size()};
  }
};

struct Diff {
  int max = 0;
  double mean = 0;
};

Diff Compare(const uint8_t* a, const uint8_t* b, size_t n) {
  Diff diff;
  uint64_t sum = 0;
  for (size_t i = 0; i < n; ++i) {
    const int d = std::abs(int{a[i]} - int{b[i]});
    diff.max = std::max(diff.max, d);
    sum += d;
  }
  diff.mean = n == 0 ? 0 : static_cast<double>(sum) / n;
  return diff;
}

CropSpec Window(double x, double y, double w, double h, int out_w, int out_h) {
  CropSpec crop;
  crop.x = x;
  crop.y = y;
  crop.width = w;
  crop.height = h;
  crop.out_width = out_w;
  crop.out_height = out_h;
  return crop;
}

class WebpDecoderTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char dir_template[] = "/tmp/batchd-webp-XXXXXX";
    ASSERT_NE(mkdtemp(dir_template), nullptr);
    const std::string dir = dir_template;
    const std::string command =
        absl::StrCat("/usr/bin/python3 " BATCHD_SOURCE_DIR
                     "/testing/make_webp_cases.py ",
                     dir);
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
    cases_ = new std::vector<Case>;
    std::ifstream list(dir + "/cases.txt");
    Case c;
    int lossless = 0;
    while (list >> c.name >> c.width >> c.height >> lossless) {
      c.lossless = lossless != 0;
      c.webp = ReadFile(dir + "/" + c.name + ".webp");
      c.pil_rgb = ReadFile(dir + "/" + c.name + ".rgb");
      ASSERT_EQ(c.pil_rgb.size(), size_t{3} * c.width * c.height) << c.name;
      cases_->push_back(c);
    }
    ASSERT_EQ(cases_->size(), 5u);
    std::filesystem::remove_all(dir);
  }
  static void TearDownTestSuite() { delete cases_; }

  static const Case& Get(const std::string& name) {
    for (const Case& c : *cases_) {
      if (c.name == name) return c;
    }
    ADD_FAILURE() << "no case " << name;
    return cases_->front();
  }

  static std::vector<Case>* cases_;
};

std::vector<Case>* WebpDecoderTest::cases_ = nullptr;

TEST_F(WebpDecoderTest, WholeImageMatchesPil) {
  for (const Case& c : *cases_) {
    SCOPED_TRACE(c.name);
    std::vector<uint8_t> out(c.pil_rgb.size());
    WebpDecoder decoder;
    const DecodeResult result = decoder.Decode(
        c.bytes(),
        [&](int w, int h) {
          EXPECT_EQ(w, c.width);
          EXPECT_EQ(h, c.height);
          return Window(0, 0, w, h, w, h);
        },
        PixelLayout::kHWC, out.data());
    ASSERT_TRUE(result.ok()) << result.detail;
    const Diff diff =
        Compare(out.data(),
                reinterpret_cast<const uint8_t*>(c.pil_rgb.data()), out.size());
    std::printf("%s: whole image against PIL: max %d, mean %.4f\n",
                c.name.c_str(), diff.max, diff.mean);
    // Alpha dropped as PIL drops it, lossy or not: the same libwebp.
    EXPECT_EQ(diff.max, 0);
  }
}

TEST_F(WebpDecoderTest, CropThroughLibwebpEqualsCropOfWholeDecode) {
  std::mt19937 rng(7);
  for (const Case& c : *cases_) {
    SCOPED_TRACE(c.name);
    Diff worst;
    double mean_sum = 0;
    constexpr int kCrops = 60;
    for (int i = 0; i < kCrops; ++i) {
      // Integer windows, odd and even origins, output = window size: the
      // resize is then an exact copy, so the pixels are libwebp's.
      const int w = 1 + static_cast<int>(rng() % c.width);
      const int h = 1 + static_cast<int>(rng() % c.height);
      const int x = static_cast<int>(rng() % (c.width - w + 1));
      const int y = static_cast<int>(rng() % (c.height - h + 1));
      std::vector<uint8_t> out(size_t{3} * w * h);
      WebpDecoder decoder;
      const DecodeResult result = decoder.Decode(
          c.bytes(), [&](int, int) { return Window(x, y, w, h, w, h); },
          PixelLayout::kHWC, out.data());
      ASSERT_TRUE(result.ok()) << result.detail;
      std::vector<uint8_t> want(out.size());
      for (int row = 0; row < h; ++row) {
        memcpy(&want[size_t{3} * w * row],
               c.pil_rgb.data() + 3 * ((size_t{1} * (y + row) * c.width) + x),
               size_t{3} * w);
      }
      const Diff diff = Compare(out.data(), want.data(), out.size());
      worst.max = std::max(worst.max, diff.max);
      worst.mean = std::max(worst.mean, diff.mean);
      mean_sum += diff.mean;
    }
    std::printf(
        "%s: %d crops through libwebp against the whole decode: max %d, "
        "worst mean %.4f, mean %.4f\n",
        c.name.c_str(), kCrops, worst.max, worst.mean, mean_sum / kCrops);
    if (c.lossless) {
      EXPECT_EQ(worst.max, 0);
    } else {
      EXPECT_LE(worst.max, kLossyCropMaxDiff);
      EXPECT_LE(mean_sum / kCrops, kLossyCropMeanDiff);
    }
  }
}

TEST_F(WebpDecoderTest, ResizedCropsMatchAResizeOfPilsDecode) {
  std::mt19937 rng(11);
  Resizer resizer;
  for (const Case& c : *cases_) {
    SCOPED_TRACE(c.name);
    Diff worst;
    double mean_sum = 0;
    int scaled = 0;
    int unscaled_max = 0;
    double unscaled_mean_sum = 0;
    constexpr int kCrops = 60;
    for (int i = 0; i < kCrops; ++i) {
      // Large windows to small outputs: where libwebp's scaling is used.
      const int out_side = (i % 3 == 0) ? 32 : (i % 3 == 1) ? 64 : 112;
      const double w = c.width * (0.5 + 0.5 * (rng() % 1000) / 1000.0);
      const double h = c.height * (0.5 + 0.5 * (rng() % 1000) / 1000.0);
      const double x = (c.width - w) * ((rng() % 1000) / 1000.0);
      const double y = (c.height - h) * ((rng() % 1000) / 1000.0);
      const CropSpec crop = Window(x, y, w, h, out_side, out_side);
      scaled += ChooseScaleDenom(w, h, out_side, out_side) > 1 ? 1 : 0;
      std::vector<uint8_t> got(size_t{3} * out_side * out_side);
      std::vector<uint8_t> want(got.size());
      WebpDecoder decoder(DecodeLimits(), /*use_scaling=*/true);
      const DecodeResult result = decoder.Decode(
          c.bytes(), [&](int, int) { return crop; }, PixelLayout::kHWC,
          got.data());
      ASSERT_TRUE(result.ok()) << result.detail;
      // The reference: the same crop resized from PIL's whole decode.
      RgbView view;
      view.data = reinterpret_cast<const uint8_t*>(c.pil_rgb.data());
      view.width = c.width;
      view.height = c.height;
      view.stride = ptrdiff_t{3} * c.width;
      ResizeRequest request;
      request.x = x;
      request.y = y;
      request.width = w;
      request.height = h;
      request.out_width = out_side;
      request.out_height = out_side;
      resizer.Resize(view, request, want.data());
      const Diff diff = Compare(got.data(), want.data(), got.size());
      worst.max = std::max(worst.max, diff.max);
      worst.mean = std::max(worst.mean, diff.mean);
      mean_sum += diff.mean;
      // The daemon's decoder: no libwebp scaling.
      WebpDecoder unscaled;
      ASSERT_TRUE(unscaled
                      .Decode(c.bytes(), [&](int, int) { return crop; },
                              PixelLayout::kHWC, got.data())
                      .ok());
      const Diff plain = Compare(got.data(), want.data(), got.size());
      unscaled_max = std::max(unscaled_max, plain.max);
      unscaled_mean_sum += plain.mean;
    }
    std::printf(
        "%s: %d crops against a resize of PIL's decode: libwebp scaling "
        "(%d scaled): max %d, worst mean %.4f, mean %.4f; the daemon's "
        "(unscaled): max %d, mean %.4f\n",
        c.name.c_str(), kCrops, scaled, worst.max, worst.mean,
        mean_sum / kCrops, unscaled_max, unscaled_mean_sum / kCrops);
    EXPECT_GT(scaled, 0);
    EXPECT_LE(unscaled_max, kResizedMaxDiff);
    EXPECT_LE(unscaled_mean_sum / kCrops, kResizedMeanDiff);
  }
}

TEST_F(WebpDecoderTest, TruncatedFilesAreTruncatedNeverACrash) {
  for (const Case& c : *cases_) {
    SCOPED_TRACE(c.name);
    std::vector<uint8_t> out(size_t{3} * 16 * 16);
    for (size_t cut : {size_t{12}, size_t{20}, size_t{30}, size_t{40},
                       c.webp.size() / 4, c.webp.size() / 2,
                       c.webp.size() - 1}) {
      SCOPED_TRACE(cut);
      WebpDecoder decoder;
      const DecodeResult result = decoder.Decode(
          c.bytes().subspan(0, cut),
          [&](int w, int h) { return Window(0, 0, w, h, 16, 16); },
          PixelLayout::kHWC, out.data());
      EXPECT_EQ(result.error, SampleError::kTruncated) << result.detail;
      EXPECT_FALSE(result.detail.empty());
    }
  }
}

TEST_F(WebpDecoderTest, DamagedBitstreamsFailCleanly) {
  // Bytes flipped all over the data: an error or a decode, never a crash
  // (ASan checks the reads); the header's damage is kCorrupt.
  std::mt19937 rng(3);
  std::vector<uint8_t> out(size_t{3} * 16 * 16);
  int errors = 0;
  for (const Case& c : *cases_) {
    for (int i = 0; i < 40; ++i) {
      std::string damaged = c.webp;
      for (int k = 0; k < 8; ++k) {
        damaged[20 + rng() % (damaged.size() - 20)] ^=
            static_cast<char>(1 + rng() % 255);
      }
      WebpDecoder decoder;
      const DecodeResult result = decoder.Decode(
          {reinterpret_cast<const uint8_t*>(damaged.data()), damaged.size()},
          [&](int w, int h) { return Window(0, 0, w, h, 16, 16); },
          PixelLayout::kHWC, out.data());
      if (!result.ok()) {
        ++errors;
        EXPECT_FALSE(result.detail.empty());
      }
    }
  }
  EXPECT_GT(errors, 0);
  // "RIFF" <size> "WEBP" and a chunk that is neither VP8, VP8L nor VP8X.
  const std::string junk = std::string("RIFF\x1c\0\0\0WEBPJUNK\x10\0\0\0", 20) +
                           std::string(16, 'x');
  WebpDecoder decoder;
  const DecodeResult result = decoder.Decode(
      {reinterpret_cast<const uint8_t*>(junk.data()), junk.size()},
      [&](int w, int h) { return Window(0, 0, w, h, 16, 16); },
      PixelLayout::kHWC, out.data());
  EXPECT_EQ(result.error, SampleError::kCorrupt) << result.detail;
}

TEST_F(WebpDecoderTest, PixelLimitBeforeAnyDecoding) {
  const Case& c = Get("lossy");
  DecodeLimits limits;
  limits.max_pixels = static_cast<uint64_t>(c.width) * c.height - 1;
  WebpDecoder decoder(limits);
  std::vector<uint8_t> out(size_t{3} * 16 * 16);
  bool asked = false;
  const DecodeResult result = decoder.Decode(
      c.bytes(),
      [&](int w, int h) {
        asked = true;
        return Window(0, 0, w, h, 16, 16);
      },
      PixelLayout::kHWC, out.data());
  EXPECT_EQ(result.error, SampleError::kTooManyPixels);
  EXPECT_NE(result.detail.find("451x300"), std::string::npos) << result.detail;
  EXPECT_FALSE(asked);
}

TEST_F(WebpDecoderTest, ProbeReadsTheSize) {
  for (const Case& c : *cases_) {
    absl::StatusOr<ImageInfo> info = ProbeImage(c.bytes());
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(info->format, ImageFormat::kWebp);
    EXPECT_EQ(info->width, c.width);
    EXPECT_EQ(info->height, c.height);
  }
  EXPECT_FALSE(ProbeImage(Get("lossy").bytes().subspan(0, 16)).ok());
}

TEST_F(WebpDecoderTest, CappedDecodeOfAWebpMatchesPilsDecodeResized) {
  // decoded_max_side: the header gives the size (ProbeImage), then one
  // decode straight to the capped size.
  const Case& c = Get("lossless");
  ImageDecoder decoder;
  CappedImage image;
  ASSERT_TRUE(DecodeCapped(decoder, c.bytes(), /*max_side=*/111, &image).ok());
  EXPECT_EQ(image.source_width, c.width);
  EXPECT_EQ(image.source_height, c.height);
  EXPECT_EQ(image.width, 111);
  std::vector<uint8_t> want(image.rgb.size());
  RgbView view{reinterpret_cast<const uint8_t*>(c.pil_rgb.data()), c.width,
               c.height, ptrdiff_t{3} * c.width};
  ResizeRequest request;
  request.width = c.width;
  request.height = c.height;
  request.out_width = image.width;
  request.out_height = image.height;
  Resizer resizer;
  resizer.Resize(view, request, want.data());
  EXPECT_EQ(image.rgb, want);  // lossless: the same pixels, the same resize
}

TEST_F(WebpDecoderTest, ImageDecoderRoutesByContent) {
  ImageDecoder decoder;
  std::vector<uint8_t> out(size_t{3} * 16 * 16);
  auto whole = [](int w, int h) { return Window(0, 0, w, h, 16, 16); };
  EXPECT_TRUE(
      decoder.Decode(Get("lossless").bytes(), whole, PixelLayout::kCHW,
                     out.data())
          .ok());
  const std::string html =
      "\xEF\xBB\xBF\n  <!DOCTYPE html><html><body>404 Not Found</body></html>";
  const DecodeResult result = decoder.Decode(
      {reinterpret_cast<const uint8_t*>(html.data()), html.size()}, whole,
      PixelLayout::kHWC, out.data());
  EXPECT_EQ(result.error, SampleError::kHtmlPage) << result.detail;
}

}  // namespace
}  // namespace batchd::server
