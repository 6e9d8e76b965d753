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

#include "absl/functional/function_ref.h"
#include "absl/types/span.h"
#include "server/decode/crop_spec.h"
#include "server/decode/decode_result.h"

namespace batchd::server {

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
