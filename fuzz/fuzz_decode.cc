// Fuzz target: the daemon's image decode path (JPEG, PNG and WebP, routed
// by content) with the crop window, output size, flip and layout fuzzed too.
// Input: 8 bytes of crop parameters, then the file's bytes.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "server/decode/image_decoder.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using batchd::server::CropSpec;
  if (size < 8) return 0;
  const uint8_t* p = data;
  // Limits well below the daemon's defaults keep each input fast; the code
  // paths are the same.
  batchd::server::DecodeLimits limits;
  limits.max_pixels = 4u << 20;
  limits.max_scans = 100;
  limits.max_memory_bytes = 64u << 20;
  static batchd::server::ImageDecoder* decoder =
      new batchd::server::ImageDecoder(limits);
  const int out_width = 1 + p[4] % 96;
  const int out_height = 1 + p[5] % 96;
  std::vector<uint8_t> out(static_cast<size_t>(out_width) * out_height * 3);
  auto choose = [&](int width, int height) {
    // A window inside [0, width] x [0, height], as the transforms give.
    CropSpec crop;
    crop.width = width * ((p[2] + 1) / 256.0);
    crop.height = height * ((p[3] + 1) / 256.0);
    crop.x = (width - crop.width) * (p[0] / 255.0);
    crop.y = (height - crop.height) * (p[1] / 255.0);
    crop.out_width = out_width;
    crop.out_height = out_height;
    crop.flip = p[6] & 1;
    return crop;
  };
  const auto layout = (p[7] & 1) ? batchd::server::PixelLayout::kCHW
                                 : batchd::server::PixelLayout::kHWC;
  decoder->Decode(absl::MakeConstSpan(data + 8, size - 8), choose, layout,
                  out.data());
  return 0;
}
