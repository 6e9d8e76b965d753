// WebpDecoder: decodes the part of a WebP (lossy or lossless, still) that a
// CropSpec needs into the same output as JpegDecoder, with libwebp's
// advanced API (WebPDecoderConfig).
//
// - Cropping always: libwebp decodes only the crop's window (its top-left
//   corner rounded down to even coordinates, as libwebp's YUV 4:2:0 crop
//   requires; the extra row and column are not used).
// - No scaling by default. libwebp's rescaler (WebPDecoderOptions
//   use_scaling) is an area average, not the triangle or cubic filter the
//   plan asks for; lossy chroma is rescaled from half resolution, and with
//   alpha it rescales premultiplied colour, which changes the colour under
//   transparency. Measured on the python3-skimage photographs
//   (webp_decoder_test, libwebp 1.2.4): RandomResizedCrop-like crops shrunk
//   by whole factors 2..8 and finished by our resize differ from the same
//   crop resized from the full decode by 0.86-1.87 mean (max 26) on opaque
//   images and up to 223 on an image with alpha, against 0.01 mean without
//   libwebp's scaling; it saved 13 % of the time at a 4x shrink of a
//   1024x1024 image (the VP8 decode of the window dominates). So the
//   daemon decodes the window at full resolution, and `use_scaling` (the
//   JPEG path's choice of a whole factor, ChooseScaleDenom) stays for the
//   tests that measure it.
// - Alpha is dropped, not composited: the colour samples are kept as
//   stored, as PIL's convert("RGB") does.
// - The header's size is checked against DecodeLimits::max_pixels before
//   anything is allocated. Animated WebPs are kUnsupportedFormat.
//
// Thread-compatible: use one decoder per thread (it holds scratch buffers).
#ifndef BATCHD_SERVER_DECODE_WEBP_DECODER_H_
#define BATCHD_SERVER_DECODE_WEBP_DECODER_H_

#include <cstdint>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/types/span.h"
#include "server/decode/crop_spec.h"
#include "server/decode/decode_result.h"
#include "server/decode/resize.h"

namespace batchd::server {

class WebpDecoder {
 public:
  // `use_scaling`: shrink large windows by a whole factor with libwebp's
  // rescaler (see above; off in the daemon).
  explicit WebpDecoder(DecodeLimits limits = {}, bool use_scaling = false)
      : limits_(limits), use_scaling_(use_scaling) {}

  // As JpegDecoder::Decode. Errors: kTruncated (the data ends early),
  // kCorrupt (a bad bitstream or header), kTooManyPixels,
  // kUnsupportedFormat (not a WebP, or an animation).
  DecodeResult Decode(absl::Span<const uint8_t> data,
                      absl::FunctionRef<CropSpec(int width, int height)>
                          choose_crop,
                      PixelLayout layout, uint8_t* out,
                      DecodeTimings* timings = nullptr);

 private:
  const DecodeLimits limits_;
  const bool use_scaling_;
  std::vector<uint8_t> pixels_;  // the decoded window, RGB
  Resizer resizer_;
};

}  // namespace batchd::server

#endif  // BATCHD_SERVER_DECODE_WEBP_DECODER_H_
