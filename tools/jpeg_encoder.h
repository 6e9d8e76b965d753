// EncodeJpeg: RGB pixels to a baseline JPEG file with libjpeg-turbo, for
// batchd-prep's re-encoding of resized images. Deterministic: the same
// pixels and options give the same bytes.
//
// Pure function; thread-safe.
#ifndef BATCHD_TOOLS_JPEG_ENCODER_H_
#define BATCHD_TOOLS_JPEG_ENCODER_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace batchd::tools {

struct JpegEncodeOptions {
  int quality = 90;       // libjpeg quality, 1..100
  bool subsample = true;  // 4:2:0 chroma; else 4:4:4
};

// `rgb`: height rows of width * 3 bytes. INVALID_ARGUMENT for a bad size or
// quality; INTERNAL if libjpeg fails.
absl::StatusOr<std::string> EncodeJpeg(const uint8_t* rgb, int width,
                                       int height,
                                       const JpegEncodeOptions& options);

}  // namespace batchd::tools

#endif  // BATCHD_TOOLS_JPEG_ENCODER_H_
