#include "server/decode/png_decoder.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/decode/crop.h"
#include "server/decode/image_decoder.h"
#include "testing/png_synth.h"
#include "server/decode/resize.h"

namespace batchd::server {
namespace {

using ::testing::HasSubstr;

absl::Span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// A deterministic sample value below 2^bits.
uint16_t Value(int i, int bits) {
  const uint32_t h = static_cast<uint32_t>(i) * 2654435761u;
  return static_cast<uint16_t>((h >> 7) & ((1u << bits) - 1));
}

PngSpec Spec(int color_type, int bit_depth, int width = 13, int height = 9) {
  PngSpec spec;
  spec.width = width;
  spec.height = height;
  spec.color_type = color_type;
  spec.bit_depth = bit_depth;
  const int channels = color_type == 0 || color_type == 3 ? 1
                       : color_type == 4                  ? 2
                       : color_type == 2                  ? 3
                                                          : 4;
  const int bits = color_type == 3 ? std::min(bit_depth, 4) : bit_depth;
  for (int i = 0; i < width * height * channels; ++i) {
    spec.samples.push_back(Value(i, bits));
  }
  return spec;
}

// The image's RGB pixels, decoded whole at its own size (an identity crop:
// the resize copies a same-size integer window exactly).
std::vector<uint8_t> DecodeWhole(const std::string& png, int width, int height,
                                 DecodeResult* result) {
  PngDecoder decoder;
  std::vector<uint8_t> out(static_cast<size_t>(width) * height * 3);
  *result = decoder.Decode(
      Bytes(png),
      [&](int w, int h) {
        EXPECT_EQ(w, width);
        EXPECT_EQ(h, height);
        CropSpec crop;
        crop.width = width;
        crop.height = height;
        crop.out_width = width;
        crop.out_height = height;
        return crop;
      },
      PixelLayout::kHWC, out.data(), nullptr);
  return out;
}

uint8_t Scale16(uint16_t v) {
  return static_cast<uint8_t>(std::lround(v * 255.0 / 65535.0));
}

// Expected RGB of `spec`, as 8-bit.
std::vector<uint8_t> Expected(const PngSpec& spec) {
  std::vector<uint8_t> rgb;
  const int n = spec.width * spec.height;
  auto to8 = [&](uint16_t v) -> uint8_t {
    if (spec.bit_depth == 16) return Scale16(v);
    if (spec.bit_depth < 8) return static_cast<uint8_t>(v * 255 / ((1 << spec.bit_depth) - 1));
    return static_cast<uint8_t>(v);
  };
  for (int p = 0; p < n; ++p) {
    switch (spec.color_type) {
      case 0:
      case 4: {
        const int channels = spec.color_type == 0 ? 1 : 2;
        const uint8_t g = to8(spec.samples[p * channels]);
        rgb.insert(rgb.end(), {g, g, g});
        break;
      }
      case 3: {
        const int index = spec.samples[p];
        for (int c = 0; c < 3; ++c) rgb.push_back(spec.palette_rgb[3 * index + c]);
        break;
      }
      default: {
        const int channels = spec.color_type == 2 ? 3 : 4;
        for (int c = 0; c < 3; ++c) rgb.push_back(to8(spec.samples[p * channels + c]));
      }
    }
  }
  return rgb;
}

struct Case {
  const char* name;
  int color_type;
  int bit_depth;
  bool interlaced;
};

class PngFormatsTest : public ::testing::TestWithParam<Case> {};

TEST_P(PngFormatsTest, DecodedPixelsEqualTheSource) {
  const Case& c = GetParam();
  PngSpec spec = Spec(c.color_type, c.bit_depth);
  spec.interlaced = c.interlaced;
  if (c.color_type == 3) {
    for (int i = 0; i < 16; ++i) {
      spec.palette_rgb.insert(spec.palette_rgb.end(),
                              {static_cast<uint8_t>(i * 16 + 3),
                               static_cast<uint8_t>(255 - i * 9),
                               static_cast<uint8_t>(i * i)});
      // Transparency that must be dropped, not composited.
      spec.palette_alpha.push_back(static_cast<uint8_t>(i * 17));
    }
  }
  const std::string png = EncodePngForTest(spec);
  ASSERT_FALSE(png.empty());
  DecodeResult result;
  const std::vector<uint8_t> rgb =
      DecodeWhole(png, spec.width, spec.height, &result);
  ASSERT_TRUE(result.ok()) << result.detail;
  EXPECT_EQ(rgb, Expected(spec));
}

INSTANTIATE_TEST_SUITE_P(
    AllFormats, PngFormatsTest,
    ::testing::Values(Case{"rgb8", 2, 8, false}, Case{"rgba8", 6, 8, false},
                      Case{"rgb16", 2, 16, false},
                      Case{"rgba16", 6, 16, false},
                      Case{"gray8", 0, 8, false}, Case{"gray1", 0, 1, false},
                      Case{"gray2", 0, 2, false}, Case{"gray4", 0, 4, false},
                      Case{"gray16", 0, 16, false},
                      Case{"gray_alpha8", 4, 8, false},
                      Case{"gray_alpha16", 4, 16, false},
                      Case{"palette8", 3, 8, false},
                      Case{"palette4", 3, 4, false},
                      Case{"rgb8_interlaced", 2, 8, true},
                      Case{"palette4_interlaced", 3, 4, true},
                      Case{"gray16_interlaced", 0, 16, true}),
    [](const ::testing::TestParamInfo<Case>& info) {
      return std::string(info.param.name);
    });

// Crop + resize + flip + layout: the same as resizing the source's crop
// window with the daemon's resizer, whatever rows the crop starts and ends
// at (the decoder reads rows above the window into scratch and stops after
// it).
TEST(PngDecoderTest, CropThenResizeMatchesTheResizerOnTheSource) {
  PngSpec spec = Spec(2, 8, /*width=*/64, /*height=*/48);
  const std::string png = EncodePngForTest(spec);
  const std::vector<uint8_t> source = Expected(spec);
  PngSpec interlaced_spec = spec;
  interlaced_spec.interlaced = true;
  const std::string interlaced = EncodePngForTest(interlaced_spec);
  PngDecoder decoder;
  Resizer resizer;
  for (int trial = 0; trial < 20; ++trial) {
    CropSpec crop;
    crop.x = trial * 1.7;
    crop.y = trial * 1.3;
    crop.width = 64 - crop.x - (trial % 5);
    crop.height = 48 - crop.y - (trial % 3) * 2.5;
    crop.out_width = 16 + trial;
    crop.out_height = 16 + trial;
    crop.flip = trial % 2 == 1;
    const PixelLayout layout = trial % 3 == 0 ? PixelLayout::kCHW
                                              : PixelLayout::kHWC;
    CropSpec clamped;
    ASSERT_TRUE(ClampCrop(crop, 64, 48, &clamped).ok());
    const CropWindow window = WindowAt(clamped, 64, 48, 1, layout);
    RgbView view;
    view.data = source.data() + (window.y0 * 64 + window.x0) * 3;
    view.width = window.x1 - window.x0;
    view.height = window.y1 - window.y0;
    view.stride = 64 * 3;
    std::vector<uint8_t> expected(crop.out_width * crop.out_height * 3);
    resizer.Resize(view, window.resize, expected.data());
    for (const std::string* file : {&png, &interlaced}) {
      std::vector<uint8_t> out(expected.size());
      const DecodeResult result = decoder.Decode(
          Bytes(*file), [&](int, int) { return crop; }, layout, out.data());
      ASSERT_TRUE(result.ok()) << result.detail;
      EXPECT_EQ(out, expected) << "trial " << trial;
    }
  }
}

DecodeResult DecodeSmall(const std::string& data, DecodeLimits limits = {}) {
  PngDecoder decoder(limits);
  std::vector<uint8_t> out(8 * 8 * 3);
  return decoder.Decode(
      Bytes(data),
      [](int width, int height) {
        CropSpec crop;
        crop.width = width;
        crop.height = height;
        crop.out_width = 8;
        crop.out_height = 8;
        return crop;
      },
      PixelLayout::kHWC, out.data());
}

// Offset of the first chunk of `type` in `png`.
size_t FindChunk(const std::string& png, const char* type) {
  return png.find(type) - 4;
}

uint32_t Crc(const std::string& bytes) {
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char b : bytes) {
    crc ^= b;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1)));
  }
  return ~crc;
}

std::string Big32(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16),
          static_cast<char>(v >> 8), static_cast<char>(v)};
}

TEST(PngDecoderTest, BadFilesAreErrorsWithReasons) {
  const std::string png = EncodePngForTest(Spec(2, 8, 40, 30));
  ASSERT_TRUE(DecodeSmall(png).ok());
  EXPECT_EQ(DecodeSmall("").error, SampleError::kEmptyFile);
  EXPECT_EQ(DecodeSmall("GIF89a....").error, SampleError::kUnsupportedFormat);

  // Cut anywhere: truncated or corrupt, never a crash and never success.
  for (size_t cut = 8; cut < png.size() - 12; cut += 3) {
    const DecodeResult result = DecodeSmall(png.substr(0, cut));
    EXPECT_FALSE(result.ok()) << "cut at " << cut;
    EXPECT_TRUE(result.error == SampleError::kTruncated ||
                result.error == SampleError::kCorrupt)
        << "cut at " << cut << ": " << result.detail;
  }
  EXPECT_EQ(DecodeSmall(png.substr(0, png.size() / 2)).error,
            SampleError::kTruncated);

  // A flipped bit in the compressed image data: zlib notices before the
  // chunk's CRC is checked.
  std::string bad_data = png;
  bad_data[FindChunk(png, "IDAT") + 12] ^= 0x10;
  EXPECT_EQ(DecodeSmall(bad_data).error, SampleError::kCorrupt);
  // A wrong CRC on the header chunk.
  std::string bad_crc = png;
  bad_crc[8 + 8 + 13] ^= 0x01;
  const DecodeResult crc = DecodeSmall(bad_crc);
  EXPECT_EQ(crc.error, SampleError::kCorrupt);
  EXPECT_THAT(crc.detail, HasSubstr("CRC"));

  // Garbage after the signature: its first "chunk length" runs past the end.
  EXPECT_FALSE(DecodeSmall(png.substr(0, 8) + std::string(100, 'x')).ok());
  // A chunk of a known type with bad contents.
  std::string bad_ihdr = png;
  bad_ihdr[8 + 8 + 8] = 3;  // bit depth 3 does not exist
  EXPECT_EQ(DecodeSmall(bad_ihdr).error, SampleError::kCorrupt);
}

TEST(PngDecoderTest, DecompressionBombIsRejectedBeforeAllocation) {
  // A 100 000 x 100 000 RGB IHDR (30 GB of pixels) with a valid CRC and a
  // few bytes of data: the pixel limit rejects it from the header alone.
  std::string ihdr = "IHDR" + Big32(100000) + Big32(100000) +
                     std::string("\x08\x02\x00\x00\x00", 5);
  std::string bomb = std::string("\x89PNG\r\n\x1a\n", 8) + Big32(13) + ihdr +
                     Big32(Crc(ihdr));
  bomb += Big32(4) + "IDAT" + "abcd" + Big32(Crc("IDATabcd"));
  const DecodeResult result = DecodeSmall(bomb);
  EXPECT_EQ(result.error, SampleError::kTooManyPixels);
  EXPECT_THAT(result.detail, HasSubstr("100000x100000"));
  // A normal image over a small limit.
  DecodeLimits limits;
  limits.max_pixels = 100;
  EXPECT_EQ(DecodeSmall(EncodePngForTest(Spec(2, 8, 11, 10)), limits).error,
            SampleError::kTooManyPixels);
}

TEST(PngDecoderTest, DecoderWorksAfterErrors) {
  PngDecoder decoder;
  const std::string good = EncodePngForTest(Spec(2, 8, 20, 20));
  std::vector<uint8_t> first(8 * 8 * 3), again(8 * 8 * 3);
  auto crop = [](int w, int h) {
    CropSpec c;
    c.width = w;
    c.height = h;
    c.out_width = 8;
    c.out_height = 8;
    return c;
  };
  ASSERT_TRUE(decoder.Decode(Bytes(good), crop, PixelLayout::kHWC, first.data()).ok());
  EXPECT_FALSE(decoder.Decode(Bytes(good.substr(0, 60)), crop,
                              PixelLayout::kHWC, again.data()).ok());
  ASSERT_TRUE(decoder.Decode(Bytes(good), crop, PixelLayout::kHWC, again.data()).ok());
  EXPECT_EQ(first, again);
}

TEST(ImageDecoderTest, RoutesByContent) {
  ImageDecoder decoder;
  std::vector<uint8_t> out(4 * 4 * 3);
  auto crop = [](int w, int h) {
    CropSpec c;
    c.width = w;
    c.height = h;
    c.out_width = 4;
    c.out_height = 4;
    return c;
  };
  const std::string png = EncodePngForTest(Spec(0, 8, 4, 4));
  EXPECT_TRUE(decoder.Decode(Bytes(png), crop, PixelLayout::kHWC, out.data()).ok());
  EXPECT_EQ(decoder.Decode(Bytes("GIF89a......"), crop, PixelLayout::kHWC,
                           out.data()).error,
            SampleError::kUnsupportedFormat);
  EXPECT_EQ(decoder.Decode(Bytes("plain text"), crop, PixelLayout::kHWC,
                           out.data()).error,
            SampleError::kNotJpeg);
}

}  // namespace
}  // namespace batchd::server
