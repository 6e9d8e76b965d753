// ProbeImage: an image file's format and size from its first bytes (JPEG
// SOF marker, PNG IHDR chunk, WebP's VP8/VP8L/VP8X header), without
// decoding it. For tools that decide
// per image what to do (batchd-prep's --max-side).
//
// Pure function; thread-safe.
#ifndef BATCHD_SERVER_DECODE_IMAGE_PROBE_H_
#define BATCHD_SERVER_DECODE_IMAGE_PROBE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace batchd::server {

enum class ImageFormat { kJpeg, kPng, kWebp };

struct ImageInfo {
  ImageFormat format = ImageFormat::kJpeg;
  int width = 0;
  int height = 0;
};

// INVALID_ARGUMENT naming the problem: not a JPEG, PNG or WebP (with the format
// recognised, e.g. "GIF"), no frame header, a zero size, data ending early.
absl::StatusOr<ImageInfo> ProbeImage(absl::Span<const uint8_t> data);

}  // namespace batchd::server

#endif  // BATCHD_SERVER_DECODE_IMAGE_PROBE_H_
