#include "server/decode/image_probe.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/png_synth.h"
#include "testing/jpeg_synth.h"

namespace batchd::server {
namespace {

absl::Span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

TEST(ImageProbeTest, JpegAndPngSizes) {
  for (bool progressive : {false, true}) {
    tools::SynthOptions options;
    options.width = 321;
    options.height = 123;
    options.progressive = progressive;
    absl::StatusOr<std::vector<uint8_t>> jpeg = tools::SynthesizeJpeg(options);
    ASSERT_TRUE(jpeg.ok());
    absl::StatusOr<ImageInfo> info = ProbeImage(*jpeg);
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(info->format, ImageFormat::kJpeg);
    EXPECT_EQ(info->width, 321);
    EXPECT_EQ(info->height, 123);
  }
  PngSpec spec;
  spec.width = 77;
  spec.height = 5;
  absl::StatusOr<ImageInfo> png = ProbeImage(Bytes(EncodePngForTest(spec)));
  ASSERT_TRUE(png.ok()) << png.status();
  EXPECT_EQ(png->format, ImageFormat::kPng);
  EXPECT_EQ(png->width, 77);
  EXPECT_EQ(png->height, 5);
}

TEST(ImageProbeTest, OtherDataIsInvalidArgument) {
  EXPECT_THAT(std::string(ProbeImage(Bytes("GIF89a...")).status().message()),
              ::testing::HasSubstr("GIF"));
  EXPECT_FALSE(ProbeImage(Bytes("")).ok());
  EXPECT_FALSE(ProbeImage(Bytes("\xFF\xD8\xFF\xE0\x00\x10JFIF")).ok());
  EXPECT_FALSE(ProbeImage(Bytes("\x89PNG\r\n\x1a\n")).ok());
  tools::SynthOptions options;
  absl::StatusOr<std::vector<uint8_t>> jpeg = tools::SynthesizeJpeg(options);
  ASSERT_TRUE(jpeg.ok());
  // Every prefix: a size or an error, never a crash.
  for (size_t cut = 0; cut < 700; ++cut) {
    (void)ProbeImage(absl::MakeConstSpan(jpeg->data(), cut));
  }
}

}  // namespace
}  // namespace batchd::server
