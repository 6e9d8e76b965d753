// PngDecoder: decodes a PNG into the same output as JpegDecoder: the crop
// window of the image, resized (antialiased, resize.h) to the output size,
// flipped and written in the requested layout.
//
// - Palette, grayscale (any bit depth) and 16-bit images become 8-bit RGB;
//   16-bit samples are scaled (round(v * 255 / 65535)), not truncated.
// - Alpha (an alpha channel or a tRNS chunk) is dropped, not composited:
//   the colour samples are kept as stored, as PIL's convert("RGB") does.
// - The crop first: rows below the window are never decompressed, rows
//   above it are decompressed into one scratch row (PNG rows cannot be
//   skipped); only the window's rows are kept. Interlaced (Adam7) images are
//   decoded whole. Damage below the crop goes unnoticed, as for JPEG.
// - The header is checked against DecodeLimits::max_pixels before anything
//   is allocated, so a tiny file claiming a huge image (a decompression
//   bomb) costs nothing. Ancillary chunks are limited to 8 MiB each.
//
// Errors never crash: libpng's longjmp is confined to one C-style function;
// a fresh libpng reader is made per image.
//
// Thread-compatible: use one decoder per thread.
#ifndef BATCHD_SERVER_DECODE_PNG_DECODER_H_
#define BATCHD_SERVER_DECODE_PNG_DECODER_H_

#include <cstdint>
#include <memory>

#include "absl/functional/function_ref.h"
#include "absl/types/span.h"
#include "server/decode/crop_spec.h"
#include "server/decode/decode_result.h"

namespace batchd::server {

// Whether `data` starts with the PNG signature.
bool IsPng(absl::Span<const uint8_t> data);

class PngDecoder {
 public:
  explicit PngDecoder(DecodeLimits limits = {});
  ~PngDecoder();

  // As JpegDecoder::Decode. Errors: kCorrupt (bad chunk,
  // CRC, header, zlib data), kTruncated (the data ends early),
  // kTooManyPixels, kUnsupportedFormat for data without the PNG signature.
  DecodeResult Decode(absl::Span<const uint8_t> data,
                      absl::FunctionRef<CropSpec(int width, int height)>
                          choose_crop,
                      PixelLayout layout, uint8_t* out,
                      DecodeTimings* timings = nullptr);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace batchd::server

#endif  // BATCHD_SERVER_DECODE_PNG_DECODER_H_
