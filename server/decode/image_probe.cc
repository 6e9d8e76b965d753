#include "server/decode/image_probe.h"

#include <webp/decode.h>

#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "server/decode/image_format.h"
#include "server/decode/png_decoder.h"

namespace batchd::server {
namespace {

uint32_t Big16(const uint8_t* p) { return (uint32_t{p[0]} << 8) | p[1]; }
uint32_t Big32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) |
         (uint32_t{p[2]} << 8) | p[3];
}

bool IsStartOfFrame(uint8_t code) {
  return code >= 0xC0 && code <= 0xCF && code != 0xC4 && code != 0xC8 &&
         code != 0xCC;
}

absl::StatusOr<ImageInfo> ProbeJpeg(absl::Span<const uint8_t> data) {
  size_t pos = 2;  // after SOI
  while (pos + 4 <= data.size()) {
    if (data[pos] != 0xFF) {
      return absl::InvalidArgumentError(
          absl::StrCat("JPEG: no marker at offset ", pos));
    }
    const uint8_t code = data[pos + 1];
    if (code == 0xFF) {  // fill byte
      ++pos;
      continue;
    }
    if (code == 0xD8 || (code >= 0xD0 && code <= 0xD7) || code == 0x01) {
      pos += 2;  // markers without a length
      continue;
    }
    if (code == 0xD9 || code == 0xDA) break;  // EOI or SOS before any SOF
    const uint32_t length = Big16(&data[pos + 2]);
    if (length < 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("JPEG: bad segment length at offset ", pos));
    }
    if (IsStartOfFrame(code)) {
      if (pos + 9 > data.size()) break;
      ImageInfo info;
      info.format = ImageFormat::kJpeg;
      info.height = static_cast<int>(Big16(&data[pos + 5]));
      info.width = static_cast<int>(Big16(&data[pos + 7]));
      if (info.width == 0 || info.height == 0) {
        return absl::InvalidArgumentError("JPEG: zero width or height");
      }
      return info;
    }
    pos += 2 + length;
  }
  return absl::InvalidArgumentError("JPEG: no frame header (SOF marker)");
}

}  // namespace

absl::StatusOr<ImageInfo> ProbeImage(absl::Span<const uint8_t> data) {
  if (data.size() >= 2 && data[0] == 0xFF && data[1] == 0xD8) {
    return ProbeJpeg(data);
  }
  if (IsPng(data)) {
    // The IHDR chunk comes first: length 13, "IHDR", width, height.
    if (data.size() < 24 || memcmp(&data[12], "IHDR", 4) != 0) {
      return absl::InvalidArgumentError("PNG: no IHDR chunk");
    }
    ImageInfo info;
    info.format = ImageFormat::kPng;
    const uint32_t width = Big32(&data[16]);
    const uint32_t height = Big32(&data[20]);
    if (width == 0 || height == 0 || width > 0x7fffffff ||
        height > 0x7fffffff) {
      return absl::InvalidArgumentError(
          absl::StrCat("PNG: bad size ", width, "x", height));
    }
    info.width = static_cast<int>(width);
    info.height = static_cast<int>(height);
    return info;
  }
  if (SniffContent(data) == ContentKind::kWebp) {
    ImageInfo info;
    info.format = ImageFormat::kWebp;
    if (!WebPGetInfo(data.data(), data.size(), &info.width, &info.height) ||
        info.width <= 0 || info.height <= 0) {
      return absl::InvalidArgumentError("WebP: no valid header");
    }
    return info;
  }
  if (data.empty()) return absl::InvalidArgumentError("empty file");
  const ContentKind kind = SniffContent(data);
  if (kind == ContentKind::kHtml || kind == ContentKind::kUnknown) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a JPEG, PNG or WebP (", ContentKindName(kind), ")"));
  }
  return absl::InvalidArgumentError(
      absl::StrCat(absl::AsciiStrToUpper(ContentKindName(kind)),
                   " image, not JPEG, PNG or WebP"));
}

}  // namespace batchd::server
