#include "testing/jpeg_synth.h"

#include <cstdint>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/decode/jpeg_decoder.h"

namespace batchd::tools {
namespace {

// Reads the SOF: size, component count and the first component's sampling.
struct SofInfo {
  int width = 0, height = 0, components = 0, h_samp = 0, v_samp = 0;
  bool progressive = false;
  bool restart = false;  // a DRI marker is present
};

SofInfo ParseSof(const std::vector<uint8_t>& jpeg) {
  SofInfo info;
  size_t i = 2;
  while (i + 4 < jpeg.size() && jpeg[i] == 0xFF) {
    const uint8_t marker = jpeg[i + 1];
    const int length = (jpeg[i + 2] << 8) | jpeg[i + 3];
    if (marker == 0xDD) info.restart = true;
    if (marker == 0xC0 || marker == 0xC2) {
      info.progressive = marker == 0xC2;
      info.height = (jpeg[i + 5] << 8) | jpeg[i + 6];
      info.width = (jpeg[i + 7] << 8) | jpeg[i + 8];
      info.components = jpeg[i + 9];
      info.h_samp = jpeg[i + 11] >> 4;
      info.v_samp = jpeg[i + 11] & 0xF;
    }
    if (marker == 0xDA) break;
    i += 2 + length;
  }
  return info;
}

TEST(JpegSynthTest, WritesTheRequestedFormat) {
  struct Case {
    SynthOptions options;
    int components, h_samp, v_samp;
  };
  std::vector<Case> cases;
  SynthOptions o;
  o.width = 123;
  o.height = 77;
  o.seed = 4;
  cases.push_back({o, 3, 2, 2});
  o.subsampling = ChromaSubsampling::k422;
  cases.push_back({o, 3, 2, 1});
  o.subsampling = ChromaSubsampling::k444;
  o.progressive = true;
  cases.push_back({o, 3, 1, 1});
  o.progressive = false;
  o.grayscale = true;
  o.restart_interval = 4;
  cases.push_back({o, 1, 1, 1});
  o.grayscale = false;
  o.cmyk = true;
  cases.push_back({o, 4, 1, 1});
  for (const Case& c : cases) {
    absl::StatusOr<std::vector<uint8_t>> jpeg = SynthesizeJpeg(c.options);
    ASSERT_TRUE(jpeg.ok()) << jpeg.status();
    const SofInfo sof = ParseSof(*jpeg);
    EXPECT_EQ(sof.width, 123);
    EXPECT_EQ(sof.height, 77);
    EXPECT_EQ(sof.components, c.components);
    EXPECT_EQ(sof.h_samp, c.h_samp);
    EXPECT_EQ(sof.v_samp, c.v_samp);
    EXPECT_EQ(sof.progressive, c.options.progressive);
    EXPECT_EQ(sof.restart, c.options.restart_interval > 0);
    // And it decodes.
    server::JpegDecoder decoder;
    std::vector<uint8_t> out(32 * 32 * 3);
    int seen_w = 0, seen_h = 0;
    const server::DecodeResult result = decoder.Decode(
        *jpeg,
        [&](int w, int h) {
          seen_w = w;
          seen_h = h;
          return server::CropSpec{0, 0, double(w), double(h), 32, 32, false};
        },
        server::PixelLayout::kHWC, out.data());
    EXPECT_TRUE(result.ok()) << result.detail;
    EXPECT_EQ(seen_w, 123);
    EXPECT_EQ(seen_h, 77);
  }
}

TEST(JpegSynthTest, IsDeterministic) {
  SynthOptions o;
  o.width = 200;
  o.height = 100;
  o.seed = 9;
  EXPECT_EQ(*SynthesizeJpeg(o), *SynthesizeJpeg(o));
  SynthOptions other = o;
  other.seed = 10;
  EXPECT_NE(*SynthesizeJpeg(o), *SynthesizeJpeg(other));
}

// Photo-like cost: ImageNet's 500x375-ish JPEGs average ~110 KB.
TEST(JpegSynthTest, FileSizeIsPhotoLike) {
  double total = 0;
  constexpr int kImages = 20;
  for (int i = 0; i < kImages; ++i) {
    SynthOptions o;  // 500x375, quality 85, 4:2:0
    o.seed = i;
    total += SynthesizeJpeg(o)->size();
  }
  const double mean_kb = total / kImages / 1024;
  EXPECT_GE(mean_kb, 60);
  EXPECT_LE(mean_kb, 160);
}

TEST(JpegSynthTest, RejectsBadOptions) {
  SynthOptions o;
  o.width = 0;
  EXPECT_EQ(SynthesizeJpeg(o).status().code(),
            absl::StatusCode::kInvalidArgument);
  o.width = 10;
  o.quality = 101;
  EXPECT_EQ(SynthesizeJpeg(o).status().code(),
            absl::StatusCode::kInvalidArgument);
  o.quality = 80;
  o.grayscale = o.cmyk = true;
  EXPECT_EQ(SynthesizeJpeg(o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace batchd::tools
