#include "tools/jpeg_encoder.h"

#include <cstdlib>
#include <vector>

#include "gtest/gtest.h"
#include "server/decode/image_probe.h"
#include "server/decode/jpeg_decoder.h"
#include "testing/jpeg_synth.h"

namespace batchd::tools {
namespace {

absl::Span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

TEST(JpegEncoderTest, DecodesBackCloseToTheInputAndIsDeterministic) {
  const int w = 96, h = 64;
  const std::vector<uint8_t> rgb = SynthesizeRgb(w, h, /*seed=*/5, 0.3);
  absl::StatusOr<std::string> jpeg = EncodeJpeg(rgb.data(), w, h, {});
  ASSERT_TRUE(jpeg.ok()) << jpeg.status();
  absl::StatusOr<std::string> again = EncodeJpeg(rgb.data(), w, h, {});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*jpeg, *again);
  absl::StatusOr<server::ImageInfo> info = server::ProbeImage(Bytes(*jpeg));
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->width, w);
  EXPECT_EQ(info->height, h);

  std::vector<uint8_t> decoded(rgb.size());
  const server::DecodeResult result = server::DecodeReference(
      Bytes(*jpeg),
      [&](int width, int height) {
        server::CropSpec crop;
        crop.width = width;
        crop.height = height;
        crop.out_width = width;
        crop.out_height = height;
        return crop;
      },
      server::PixelLayout::kHWC, decoded.data());
  ASSERT_TRUE(result.ok()) << result.detail;
  double error = 0;
  for (size_t i = 0; i < rgb.size(); ++i) error += std::abs(rgb[i] - decoded[i]);
  // Quality 90 with 4:2:0 chroma loses the synthetic image's sharp colour
  // edges (mean error ~8 here); at quality 100, 4:4:4, only rounding is left.
  EXPECT_LT(error / rgb.size(), 12.0);
  JpegEncodeOptions best;
  best.quality = 100;
  best.subsample = false;
  absl::StatusOr<std::string> exact = EncodeJpeg(rgb.data(), w, h, best);
  ASSERT_TRUE(exact.ok());
  ASSERT_TRUE(server::DecodeReference(
                  Bytes(*exact),
                  [&](int width, int height) {
                    server::CropSpec crop;
                    crop.width = width;
                    crop.height = height;
                    crop.out_width = width;
                    crop.out_height = height;
                    return crop;
                  },
                  server::PixelLayout::kHWC, decoded.data())
                  .ok());
  error = 0;
  for (size_t i = 0; i < rgb.size(); ++i) error += std::abs(rgb[i] - decoded[i]);
  EXPECT_LT(error / rgb.size(), 1.5);

  // Lower quality: smaller file.
  JpegEncodeOptions low;
  low.quality = 30;
  absl::StatusOr<std::string> small = EncodeJpeg(rgb.data(), w, h, low);
  ASSERT_TRUE(small.ok());
  EXPECT_LT(small->size(), jpeg->size());
}

TEST(JpegEncoderTest, BadArguments) {
  const uint8_t pixel[3] = {1, 2, 3};
  EXPECT_EQ(EncodeJpeg(pixel, 0, 1, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  JpegEncodeOptions bad;
  bad.quality = 101;
  EXPECT_EQ(EncodeJpeg(pixel, 1, 1, bad).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(EncodeJpeg(pixel, 1, 1, {}).ok());
}

}  // namespace
}  // namespace batchd::tools
