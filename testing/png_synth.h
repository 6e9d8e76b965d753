// EncodePngForTest: PNG files of any colour type and bit depth, written with
// libpng in memory, for decoder tests and benchmarks.
//
// Thread-safe.
#ifndef BATCHD_TESTING_PNG_SYNTH_H_
#define BATCHD_TESTING_PNG_SYNTH_H_

#include <cstdint>
#include <string>
#include <vector>

namespace batchd::server {

struct PngSpec {
  int width = 1;
  int height = 1;
  int color_type = 2;  // PNG_COLOR_TYPE_*: 0 gray, 2 RGB, 3 palette, 4 GA, 6 RGBA
  int bit_depth = 8;
  bool interlaced = false;
  // Samples, one value per channel per pixel, row-major (palette: indices),
  // each < 2^bit_depth.
  std::vector<uint16_t> samples;
  std::vector<uint8_t> palette_rgb;  // 3 bytes per entry
  std::vector<uint8_t> palette_alpha;  // tRNS for palette images
};

// The PNG file; empty if libpng fails (a bad spec).
std::string EncodePngForTest(const PngSpec& spec);

}  // namespace batchd::server

#endif  // BATCHD_TESTING_PNG_SYNTH_H_
