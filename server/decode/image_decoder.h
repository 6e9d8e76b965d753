// ImageDecoder: the daemon's decoder for any sample. Routes by content (the
// file's magic bytes, never its name; image_format.h): PNG to PngDecoder,
// WebP to WebpDecoder, markup (an HTML page) to kHtmlPage, everything else
// to JpegDecoder, which decodes JPEGs and reports other formats (GIF, BMP,
// TIFF) as kUnsupportedFormat and anything else as kNotJpeg.
//
// Thread-compatible: use one decoder per thread (each holds scratch buffers
// and libjpeg state).
#ifndef BATCHD_SERVER_DECODE_IMAGE_DECODER_H_
#define BATCHD_SERVER_DECODE_IMAGE_DECODER_H_

#include <cstdint>

#include "absl/functional/function_ref.h"
#include "absl/types/span.h"
#include "server/decode/crop_spec.h"
#include "server/decode/image_format.h"
#include "server/decode/jpeg_decoder.h"
#include "server/decode/png_decoder.h"
#include "server/decode/webp_decoder.h"

namespace batchd::server {

class ImageDecoder {
 public:
  explicit ImageDecoder(DecodeLimits limits = {})
      : jpeg_(limits), png_(limits), webp_(limits) {}

  // As JpegDecoder::Decode, for JPEG, PNG and WebP data.
  DecodeResult Decode(absl::Span<const uint8_t> data,
                      absl::FunctionRef<CropSpec(int width, int height)>
                          choose_crop,
                      PixelLayout layout, uint8_t* out,
                      DecodeTimings* timings = nullptr) {
    switch (SniffContent(data)) {
      case ContentKind::kPng:
        return png_.Decode(data, choose_crop, layout, out, timings);
      case ContentKind::kWebp:
        return webp_.Decode(data, choose_crop, layout, out, timings);
      case ContentKind::kHtml: {
        DecodeResult html;
        html.error = SampleError::kHtmlPage;
        html.detail = "an HTML or XML page, not an image";
        return html;
      }
      default:
        return jpeg_.Decode(data, choose_crop, layout, out, timings);
    }
  }

 private:
  JpegDecoder jpeg_;
  PngDecoder png_;
  WebpDecoder webp_;
};

}  // namespace batchd::server

#endif  // BATCHD_SERVER_DECODE_IMAGE_DECODER_H_
