#include "server/decode/capped_image.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "gtest/gtest.h"
#include "server/decode/jpeg_decoder.h"
#include "testing/jpeg_synth.h"

namespace batchd::server {
namespace {

std::vector<uint8_t> MakeJpeg(int width, int height, uint64_t seed,
                              tools::ChromaSubsampling subsampling =
                                  tools::ChromaSubsampling::k420) {
  tools::SynthOptions options;
  options.width = width;
  options.height = height;
  options.seed = seed;
  options.subsampling = subsampling;
  absl::StatusOr<std::vector<uint8_t>> jpeg = tools::SynthesizeJpeg(options);
  EXPECT_TRUE(jpeg.ok()) << jpeg.status();
  return jpeg.ok() ? *std::move(jpeg) : std::vector<uint8_t>();
}

TEST(CappedSizeTest, LongerSideBecomesTheCapShorterSideRounds) {
  EXPECT_EQ(CappedSize(500, 375, 256), std::make_pair(256, 192));
  EXPECT_EQ(CappedSize(375, 500, 256), std::make_pair(192, 256));
  EXPECT_EQ(CappedSize(500, 333, 300), std::make_pair(300, 200));  // 199.8
  EXPECT_EQ(CappedSize(256, 256, 256), std::make_pair(256, 256));
  EXPECT_EQ(CappedSize(200, 100, 256), std::make_pair(200, 100));
  EXPECT_EQ(CappedSize(3, 1000, 10), std::make_pair(1, 10));  // at least 1
}

TEST(DecodeCappedTest, ImageWithinTheCapIsDecodedAsItIs) {
  const std::vector<uint8_t> jpeg = MakeJpeg(200, 150, 1);
  ImageDecoder decoder;
  CappedImage image;
  ASSERT_TRUE(DecodeCapped(decoder, jpeg, /*max_side=*/256, &image).ok());
  ASSERT_EQ(image.width, 200);
  ASSERT_EQ(image.height, 150);
  std::vector<uint8_t> full(200 * 150 * 3);
  ASSERT_TRUE(DecodeReference(
                  jpeg,
                  [](int w, int h) {
                    return CropSpec{0, 0, double(w), double(h), w, h, false};
                  },
                  PixelLayout::kHWC, full.data())
                  .ok());
  EXPECT_EQ(image.rgb, full);
}

TEST(DecodeCappedTest, LargeImageIsCappedAndCloseToTheFullDecode) {
  const std::vector<uint8_t> jpeg = MakeJpeg(1600, 1200, 2);
  ImageDecoder decoder;
  CappedImage image;
  ASSERT_TRUE(DecodeCapped(decoder, jpeg, /*max_side=*/400, &image).ok());
  ASSERT_EQ(image.width, 400);
  ASSERT_EQ(image.height, 300);
  ASSERT_EQ(image.rgb.size(), 400u * 300 * 3);
  // The reference: decoded at full size, then the same antialiased resize.
  std::vector<uint8_t> reference(400 * 300 * 3);
  ASSERT_TRUE(DecodeReference(
                  jpeg,
                  [](int w, int h) {
                    return CropSpec{0, 0, double(w), double(h), 400, 300,
                                    false};
                  },
                  PixelLayout::kHWC, reference.data())
                  .ok());
  double sum = 0;
  for (size_t i = 0; i < reference.size(); ++i) {
    sum += std::abs(int{image.rgb[i]} - int{reference[i]});
  }
  // The bound the decoder's own DCT-scaled decodes meet
  // (jpeg_decoder_test); measured 4.3 here, at 1/4.
  EXPECT_LE(sum / reference.size(), 6.0);
}

// Within the cap, a crop that the decoder decodes at scale 1 gives the
// same bytes from the capped image as from the file.
TEST(TransformCappedTest, MatchesTheDecoderAtScaleOne) {
  for (auto subsampling :
       {tools::ChromaSubsampling::k420, tools::ChromaSubsampling::k444}) {
    const std::vector<uint8_t> jpeg = MakeJpeg(240, 180, 3, subsampling);
    ImageDecoder decoder;
    CappedImage image;
    ASSERT_TRUE(DecodeCapped(decoder, jpeg, /*max_side=*/256, &image).ok());
    for (bool flip : {false, true}) {
      for (PixelLayout layout : {PixelLayout::kHWC, PixelLayout::kCHW}) {
        // 150 / 2 < 100: the decoder keeps scale 1.
        auto crop = [&](int, int) {
          return CropSpec{10.5, 20.25, 150, 120, 100, 100, flip};
        };
        std::vector<uint8_t> from_file(100 * 100 * 3);
        ASSERT_TRUE(
            decoder.Decode(jpeg, crop, layout, from_file.data()).ok());
        std::vector<uint8_t> from_capped(100 * 100 * 3);
        Resizer resizer;
        ASSERT_TRUE(
            TransformCapped(resizer, image, crop, layout, from_capped.data())
                .ok());
        EXPECT_EQ(from_capped, from_file) << flip;
      }
    }
  }
}

// The crop is drawn for the original size (the uncapped pipeline's
// augmentation) and its window mapped onto the capped image: a window of
// the whole original image is the whole capped image.
TEST(TransformCappedTest, CropSeesTheOriginalSize) {
  const std::vector<uint8_t> jpeg = MakeJpeg(1000, 500, 4);
  ImageDecoder decoder;
  CappedImage image;
  ASSERT_TRUE(DecodeCapped(decoder, jpeg, /*max_side=*/300, &image).ok());
  int seen_w = 0, seen_h = 0;
  std::vector<uint8_t> out(32 * 32 * 3);
  Resizer resizer;
  ASSERT_TRUE(TransformCapped(
                  resizer, image,
                  [&](int w, int h) {
                    seen_w = w;
                    seen_h = h;
                    return CropSpec{0, 0, double(w), double(h), 32, 32, false};
                  },
                  PixelLayout::kHWC, out.data())
                  .ok());
  EXPECT_EQ(seen_w, 1000);
  EXPECT_EQ(seen_h, 500);
  EXPECT_EQ(image.width, 300);
  EXPECT_EQ(image.height, 150);
  std::vector<uint8_t> whole(32 * 32 * 3);
  ASSERT_TRUE(TransformCapped(
                  resizer, image,
                  [&](int, int) {
                    return CropSpec{0, 0, 300, 150, 32, 32, false};
                  },
                  PixelLayout::kHWC, whole.data())
                  .ok());
  // Not the same: (0, 0, 300, 150) of the original is its left part.
  EXPECT_NE(whole, out);
  // A window of the original maps to the same relative window.
  std::vector<uint8_t> half(32 * 32 * 3);
  ASSERT_TRUE(TransformCapped(
                  resizer, image,
                  [&](int, int) {
                    return CropSpec{500, 0, 500, 500, 32, 32, false};
                  },
                  PixelLayout::kHWC, half.data())
                  .ok());
  std::vector<uint8_t> direct(32 * 32 * 3);
  RgbView view{image.rgb.data() + 150 * 3, 150, 150, 300 * 3};
  ResizeRequest request;
  request.width = 150;
  request.height = 150;
  request.out_width = 32;
  request.out_height = 32;
  resizer.Resize(view, request, direct.data());
  EXPECT_EQ(half, direct);
}

TEST(TransformCappedTest, BadCropIsCorrupt) {
  const std::vector<uint8_t> jpeg = MakeJpeg(64, 64, 5);
  ImageDecoder decoder;
  CappedImage image;
  ASSERT_TRUE(DecodeCapped(decoder, jpeg, /*max_side=*/64, &image).ok());
  std::vector<uint8_t> out(8 * 8 * 3);
  Resizer resizer;
  const DecodeResult result = TransformCapped(
      resizer, image,
      [](int, int) {
        return CropSpec{std::numeric_limits<double>::quiet_NaN(), 0, 8, 8, 8,
                        8, false};
      },
      PixelLayout::kHWC, out.data());
  EXPECT_EQ(result.error, SampleError::kCorrupt);
}

// The buffer is the image's own size, whatever the cap: a plan with a huge
// cap costs nothing more for small images.
TEST(DecodeCappedTest, BufferIsTheCappedImagesSizeNotTheCaps) {
  const std::vector<uint8_t> jpeg = MakeJpeg(120, 80, 7);
  ImageDecoder decoder;
  CappedImage image;
  ASSERT_TRUE(DecodeCapped(decoder, jpeg, /*max_side=*/16384, &image).ok());
  EXPECT_EQ(image.width, 120);
  EXPECT_EQ(image.height, 80);
  EXPECT_EQ(image.rgb.capacity(), 120u * 80 * 3);
  EXPECT_EQ(image.source_width, 120);
  EXPECT_EQ(image.source_height, 80);
}

// Bad files fail as a plain decode does, so substitutes are picked alike.
TEST(DecodeCappedTest, BadFilesGiveTheDecodersErrors) {
  std::vector<uint8_t> jpeg = MakeJpeg(300, 200, 6);
  jpeg.resize(jpeg.size() / 2);
  const std::vector<std::vector<uint8_t>> files = {
      jpeg, {}, {'n', 'o', 't', ' ', 'a', 'n', ' ', 'i', 'm', 'a', 'g', 'e'}};
  for (const std::vector<uint8_t>& file : files) {
    ImageDecoder decoder;
    CappedImage image;
    const DecodeResult capped = DecodeCapped(decoder, file, 128, &image);
    std::vector<uint8_t> out(64 * 64 * 3);
    const DecodeResult plain = decoder.Decode(
        file,
        [](int w, int h) {
          return CropSpec{0, 0, double(w), double(h), 64, 64, false};
        },
        PixelLayout::kHWC, out.data());
    EXPECT_FALSE(capped.ok());
    EXPECT_EQ(capped.error, plain.error) << capped.detail;
  }
}

}  // namespace
}  // namespace batchd::server
