// Synthetic, photo-like JPEGs made in memory with libjpeg's compressor, for
// tests, benchmarks and the make_dataset tool.
//
// The content is meant to cost what a photograph costs to decode: smooth
// gradients, random shapes with hard edges, textured regions and sensor-like
// noise, so that a 500x375 image at quality 85 (4:2:0) is about 100 KB, as
// ImageNet's JPEGs are. (Flat images decode several times faster and would
// flatter any benchmark.)
//
//   SynthOptions options;
//   options.width = 500;
//   options.height = 375;
//   options.seed = 7;
//   absl::StatusOr<std::vector<uint8_t>> jpeg = SynthesizeJpeg(options);
//
// Pure functions of their options; thread-safe.
#ifndef BATCHD_TESTING_JPEG_SYNTH_H_
#define BATCHD_TESTING_JPEG_SYNTH_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace batchd::tools {

enum class ChromaSubsampling { k420, k422, k444 };

struct SynthOptions {
  int width = 500;   // pixels, 1..65500
  int height = 375;  // pixels, 1..65500
  int quality = 85;  // libjpeg quality, 1..100
  ChromaSubsampling subsampling = ChromaSubsampling::k420;  // colour only
  bool grayscale = false;     // one component
  bool cmyk = false;          // four components, Adobe (inverted) CMYK
  bool progressive = false;   // jpeg_simple_progression
  int restart_interval = 0;   // MCUs between restart markers; 0 = none
  uint64_t seed = 0;          // content
  // Scales the fine texture and noise; 1 gives photo-like file sizes.
  double detail = 1.0;
};

// The RGB pixels SynthesizeJpeg compresses: height * width * 3 bytes.
std::vector<uint8_t> SynthesizeRgb(int width, int height, uint64_t seed,
                                   double detail = 1.0);

// A JPEG file with the given options. INVALID_ARGUMENT for out-of-range
// options; INTERNAL if libjpeg fails.
absl::StatusOr<std::vector<uint8_t>> SynthesizeJpeg(const SynthOptions& options);

}  // namespace batchd::tools

#endif  // BATCHD_TESTING_JPEG_SYNTH_H_
