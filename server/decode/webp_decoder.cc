#include "server/decode/webp_decoder.h"

#include <webp/decode.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/decode/crop.h"
#include "server/decode/decode_internal.h"
#include "server/decode/image_format.h"

namespace batchd::server {
namespace {

DecodeResult Error(SampleError error, std::string detail) {
  DecodeResult result;
  result.error = error;
  result.detail = std::move(detail);
  return result;
}

// The SampleError for a libwebp status, with what was being done.
DecodeResult StatusError(VP8StatusCode status, const char* stage) {
  switch (status) {
    case VP8_STATUS_NOT_ENOUGH_DATA:
      return Error(SampleError::kTruncated,
                   absl::StrCat("WebP ", stage, ": the data ends early"));
    case VP8_STATUS_UNSUPPORTED_FEATURE:
      return Error(SampleError::kUnsupportedFormat,
                   absl::StrCat("WebP ", stage, ": unsupported feature"));
    case VP8_STATUS_OUT_OF_MEMORY:
      return Error(SampleError::kTooManyPixels,
                   absl::StrCat("WebP ", stage, ": out of memory"));
    default:
      return Error(SampleError::kCorrupt,
                   absl::StrCat("WebP ", stage, ": bad bitstream (status ",
                                static_cast<int>(status), ")"));
  }
}

// Owns the decoder config's output buffer bookkeeping: WebPFreeDecBuffer
// releases anything libwebp allocated for it (nothing with external
// memory, but the call is cheap and keeps that true by construction).
struct ConfigGuard {
  WebPDecoderConfig config;
  ~ConfigGuard() { WebPFreeDecBuffer(&config.output); }
};

}  // namespace

DecodeResult WebpDecoder::Decode(
    absl::Span<const uint8_t> data,
    absl::FunctionRef<CropSpec(int width, int height)> choose_crop,
    PixelLayout layout, uint8_t* out, DecodeTimings* timings) {
  const auto start = std::chrono::steady_clock::now();
  if (data.empty()) return Error(SampleError::kEmptyFile, "empty file");
  if (SniffContent(data) != ContentKind::kWebp) {
    return Error(SampleError::kUnsupportedFormat, "not a WebP");
  }
  ConfigGuard guard;
  WebPDecoderConfig& config = guard.config;
  if (!WebPInitDecoderConfig(&config)) {
    return Error(SampleError::kCorrupt, "libwebp version mismatch");
  }
  const VP8StatusCode features =
      WebPGetFeatures(data.data(), data.size(), &config.input);
  if (features != VP8_STATUS_OK) return StatusError(features, "header");
  if (config.input.has_animation) {
    return Error(SampleError::kUnsupportedFormat,
                 "animated WebP (only still images are decoded)");
  }
  const int width = config.input.width;
  const int height = config.input.height;
  if (width <= 0 || height <= 0) {
    return Error(SampleError::kCorrupt,
                 absl::StrCat("WebP header: bad size ", width, "x", height));
  }
  if (static_cast<uint64_t>(width) * static_cast<uint64_t>(height) >
      limits_.max_pixels) {
    return Error(SampleError::kTooManyPixels,
                 absl::StrCat(width, "x", height, " pixels, more than ",
                              limits_.max_pixels));
  }
  CropSpec crop;
  DecodeResult clamped =
      ClampCrop(choose_crop(width, height), width, height, &crop);
  if (!clamped.ok()) return clamped;
  const CropWindow window =
      WindowAt(crop, width, height, /*denom=*/1, layout);

  // libwebp 1.2 rounds an odd crop origin down to even (its 4:2:0 chroma
  // is cropped in whole samples): ask for the even origin, so the pixel at
  // (x0, y0) is where this code expects it.
  const int crop_x = window.x0 & ~1;
  const int crop_y = window.y0 & ~1;
  const int crop_w = window.x1 - crop_x;
  const int crop_h = window.y1 - crop_y;
  config.options.use_cropping = 1;
  config.options.crop_left = crop_x;
  config.options.crop_top = crop_y;
  config.options.crop_width = crop_w;
  config.options.crop_height = crop_h;
  const int denom =
      use_scaling_ ? ChooseScaleDenom(crop.width, crop.height,
                                      crop.out_width, crop.out_height)
                   : 1;
  const int decoded_w = std::max(1, crop_w / denom);
  const int decoded_h = std::max(1, crop_h / denom);
  if (denom > 1) {
    config.options.use_scaling = 1;
    config.options.scaled_width = decoded_w;
    config.options.scaled_height = decoded_h;
  }
  const size_t stride = static_cast<size_t>(decoded_w) * 3;
  pixels_.resize(stride * static_cast<size_t>(decoded_h));
  config.output.colorspace = MODE_RGB;  // alpha dropped, not composited
  config.output.is_external_memory = 1;
  config.output.u.RGBA.rgba = pixels_.data();
  config.output.u.RGBA.stride = static_cast<int>(stride);
  config.output.u.RGBA.size = pixels_.size();
  const VP8StatusCode decoded_status =
      WebPDecode(data.data(), data.size(), &config);
  if (decoded_status != VP8_STATUS_OK) {
    return StatusError(decoded_status, "data");
  }

  RgbView view;
  ResizeRequest resize = window.resize;
  if (denom == 1) {
    // Without the rows and columns the even origin added.
    view.data = pixels_.data() + (window.y0 - crop_y) * stride +
                (window.x0 - crop_x) * 3;
    view.width = window.x1 - window.x0;
    view.height = window.y1 - window.y0;
  } else {
    // The scaled buffer covers [crop_x, crop_x + crop_w) horizontally at
    // decoded_w / crop_w pixels per source pixel (and so vertically).
    const double sx = static_cast<double>(decoded_w) / crop_w;
    const double sy = static_cast<double>(decoded_h) / crop_h;
    view.data = pixels_.data();
    view.width = decoded_w;
    view.height = decoded_h;
    resize.x = (crop.x - crop_x) * sx;
    resize.y = (crop.y - crop_y) * sy;
    resize.width = crop.width * sx;
    resize.height = crop.height * sy;
  }
  view.stride = static_cast<ptrdiff_t>(stride);
  const auto decoded = std::chrono::steady_clock::now();
  resizer_.Resize(view, resize, out);
  if (timings != nullptr) {
    timings->decode_seconds =
        std::chrono::duration<double>(decoded - start).count();
    timings->transform_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                      decoded)
            .count();
  }
  return DecodeResult();
}

}  // namespace batchd::server
