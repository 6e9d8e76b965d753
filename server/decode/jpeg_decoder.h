// JpegDecoder: decodes the part of a JPEG that a CropSpec needs, straight to
// the output size, with libjpeg-turbo's libjpeg API.
//
// - Header first; the caller's `choose_crop` sees the image size and returns
//   the crop (so random crop parameters need no second header parse).
// - Region decode: jpeg_crop_scanline for columns, jpeg_skip_scanlines for
//   rows above, stop after the last needed row.
// - DCT-domain scaling (scale_num/scale_denom, 1/8..1) at the coarsest scale
//   that keeps the scaled crop at least as large as the output, so output
//   quality is kept.
// - An antialiased separable resize (resize.h) to out_width x out_height,
//   the flip, and the write into `out` in the requested layout.
// - Grayscale and CMYK/YCCK become RGB.
//
// Errors never crash: libjpeg's longjmp is confined to one C-style function;
// the decoder object is reset after every error; memory, pixels and scans
// are limited per image.
//
// Thread-compatible: use one decoder per thread.
#ifndef BATCHD_SERVER_DECODE_JPEG_DECODER_H_
#define BATCHD_SERVER_DECODE_JPEG_DECODER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/types/span.h"
#include "server/decode/crop_spec.h"

namespace batchd::server {

// Why a sample could not be decoded. Mirrors batchd.v1.SubstitutionReason.
enum class SampleError {
  kNone = 0,
  kReadError,
  kEmptyFile,
  kNotJpeg,
  kUnsupportedFormat,  // PNG, GIF, BMP, WebP, TIFF... recognised by magic
  kTruncated,
  kCorrupt,
  kTooManyPixels,
  kTooManyScans,
};

struct DecodeResult {
  SampleError error = SampleError::kNone;
  std::string detail;  // the decoder's message when error != kNone
  // With DecodeLimits.decode_damaged: the damage (kTruncated or kCorrupt)
  // libjpeg decoded past, grey where data was missing, and its message;
  // kNone for an intact file. The result is ok() either way.
  SampleError damage = SampleError::kNone;
  std::string damage_detail;
  bool ok() const { return error == SampleError::kNone; }
};

struct DecodeLimits {
  uint64_t max_pixels = 64ull << 20;            // width * height
  int max_scans = 500;                           // progressive scans
  uint64_t max_memory_bytes = 512ull << 20;      // libjpeg max_memory_to_use
  // --corrupt-policy: false (substitute) stops at the first sign of damaged
  // entropy-coded data (a premature end of file, a bad Huffman code, a
  // marker inside the scan) and reports kTruncated or kCorrupt; true
  // (decode) lets libjpeg go on as PIL does, filling what it cannot decode
  // with grey, and reports the damage in DecodeResult.damage.
  bool decode_damaged = false;
};

// Time spent per stage by the last Decode call, for the daemon's stage
// breakdown.
struct DecodeTimings {
  double decode_seconds = 0;     // header + entropy decode + IDCT + colour
  double transform_seconds = 0;  // resize + flip + layout write
};

class JpegDecoder {
 public:
  explicit JpegDecoder(DecodeLimits limits = {});
  ~JpegDecoder();

  // Decodes `data` into `out`, which holds out_height * out_width * 3 bytes,
  // RGB, in `layout` (kHWC: row-major pixels, kCHW: three planes).
  // `choose_crop(width, height)` is called once with the image's full size
  // after the header is read. On error `out` is left in an unspecified state.
  DecodeResult Decode(absl::Span<const uint8_t> data,
                      absl::FunctionRef<CropSpec(int width, int height)>
                          choose_crop,
                      PixelLayout layout, uint8_t* out,
                      DecodeTimings* timings = nullptr);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The reference path for tests and benchmarks: full decode at scale 1, then
// the same crop + resize + flip + layout write. Same output format.
DecodeResult DecodeReference(absl::Span<const uint8_t> data,
                             absl::FunctionRef<CropSpec(int width, int height)>
                                 choose_crop,
                             PixelLayout layout, uint8_t* out);

}  // namespace batchd::server

#endif  // BATCHD_SERVER_DECODE_JPEG_DECODER_H_
