#include "server/decode/jpeg_decoder.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "common/random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/decode/decode_internal.h"
#include "tools/jpeg_synth.h"

namespace batchd::server {
namespace {

using ::batchd::tools::ChromaSubsampling;
using ::batchd::tools::SynthOptions;
using ::testing::HasSubstr;

std::vector<uint8_t> MakeJpeg(const SynthOptions& options) {
  absl::StatusOr<std::vector<uint8_t>> jpeg = tools::SynthesizeJpeg(options);
  EXPECT_TRUE(jpeg.ok()) << jpeg.status();
  return jpeg.ok() ? *std::move(jpeg) : std::vector<uint8_t>();
}

// The kinds of file the decoder must handle.
struct Variant {
  const char* name;
  ChromaSubsampling subsampling;
  bool grayscale;
  bool cmyk;
  bool progressive;
  int restart_interval;
};
constexpr Variant kVariants[] = {
    {"420", ChromaSubsampling::k420, false, false, false, 0},
    {"422", ChromaSubsampling::k422, false, false, false, 0},
    {"444", ChromaSubsampling::k444, false, false, false, 0},
    {"gray", ChromaSubsampling::k444, true, false, false, 0},
    {"cmyk", ChromaSubsampling::k444, false, true, false, 0},
    {"420-progressive", ChromaSubsampling::k420, false, false, true, 0},
    {"422-progressive", ChromaSubsampling::k422, false, false, true, 0},
    {"420-restart", ChromaSubsampling::k420, false, false, false, 7},
    {"444-progressive-restart", ChromaSubsampling::k444, false, false, true, 3},
};

SynthOptions OptionsFor(const Variant& v, int width, int height,
                        uint64_t seed) {
  SynthOptions o;
  o.width = width;
  o.height = height;
  o.quality = 85;
  o.subsampling = v.subsampling;
  o.grayscale = v.grayscale;
  o.cmyk = v.cmyk;
  o.progressive = v.progressive;
  o.restart_interval = v.restart_interval;
  o.seed = seed;
  return o;
}

// Region decode (jpeg_crop_scanline + jpeg_skip_scanlines + early stop) must
// give exactly the pixels of a full decode at the same DCT scale, for every
// kind of file, scale and rectangle.
TEST(JpegDecoderTest, RegionDecodeMatchesFullDecodeExactly) {
  int checked = 0;
  for (const Variant& v : kVariants) {
    for (int i = 0; i < 6; ++i) {
      common::SampleRandom rng(/*seed=*/11, /*epoch=*/0, /*sample_index=*/i,
                               common::RandomPurpose::kAugment);
      const int width = 64 + static_cast<int>(rng.UniformInt(500));
      const int height = 64 + static_cast<int>(rng.UniformInt(400));
      const std::vector<uint8_t> jpeg =
          MakeJpeg(OptionsFor(v, width, height, /*seed=*/i));
      for (int denom : {1, 2, 4, 8}) {
        const int sw = (width + denom - 1) / denom;
        const int sh = (height + denom - 1) / denom;
        for (int r = 0; r < 4; ++r) {
          const int x0 = static_cast<int>(rng.UniformInt(sw));
          const int y0 = static_cast<int>(rng.UniformInt(sh));
          const int x1 = x0 + 1 + static_cast<int>(rng.UniformInt(sw - x0));
          const int y1 = y0 + 1 + static_cast<int>(rng.UniformInt(sh - y0));
          RegionPixels region, full;
          ASSERT_TRUE(DecodeScaledRegionForTest(jpeg, denom, x0, y0, x1, y1,
                                                /*use_region=*/true, &region)
                          .ok());
          ASSERT_TRUE(DecodeScaledRegionForTest(jpeg, denom, x0, y0, x1, y1,
                                                /*use_region=*/false, &full)
                          .ok());
          int diff = 0, max_diff = 0;
          for (size_t k = 0; k < full.rgb.size(); ++k) {
            const int d = std::abs(region.rgb[k] - full.rgb[k]);
            diff += d != 0;
            max_diff = std::max(max_diff, d);
          }
          if (diff && getenv("DEBUG_DIFF")) {
            std::set<int> cols, rows;
            for (size_t k = 0; k < full.rgb.size(); ++k) if (region.rgb[k] != full.rgb[k]) { cols.insert(x0 + (k/3) % full.width); rows.insert(y0 + (k/3) / full.width); }
            std::string c, rr; for (int q : cols) c += std::to_string(q) + " "; for (int q : rows) rr += std::to_string(q) + " ";
            printf("cols %s\nrows %s\n", c.substr(0, 200).c_str(), rr.substr(0, 200).c_str());
          }
          EXPECT_EQ(diff, 0) << v.name << " " << width << "x" << height
                             << " 1/" << denom << " rect [" << x0 << "," << x1
                             << ")x[" << y0 << "," << y1 << ") max diff "
                             << max_diff;
          ++checked;
        }
      }
    }
  }
  EXPECT_EQ(checked, 9 * 6 * 4 * 4);
}

}  // namespace
}  // namespace batchd::server
