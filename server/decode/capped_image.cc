#include "server/decode/capped_image.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <tuple>

#include "server/decode/crop.h"
#include "server/decode/image_probe.h"

namespace batchd::server {

std::pair<int, int> CappedSize(int width, int height, int max_side) {
  const int longer = std::max(width, height);
  if (longer <= max_side) return {width, height};
  // Integer rounding of shorter * max_side / longer: exact, no doubles.
  auto scale = [&](int side) {
    const int64_t num = int64_t{side} * max_side;
    return std::max<int64_t>(1, (2 * num + longer) / (2 * int64_t{longer}));
  };
  if (width >= height) return {max_side, static_cast<int>(scale(height))};
  return {static_cast<int>(scale(width)), max_side};
}

DecodeResult DecodeCapped(ImageDecoder& decoder, absl::Span<const uint8_t> data,
                          int max_side, CappedImage* out,
                          DecodeTimings* timings) {
  const auto start = std::chrono::steady_clock::now();
  // The output buffer is sized before the decode, so the size comes from
  // the header first (no pixels decoded): the image is written straight
  // into its own exact buffer, never into one sized by the cap alone.
  int width = 0, height = 0;
  if (absl::StatusOr<ImageInfo> info = ProbeImage(data); info.ok()) {
    width = info->width;
    height = info->height;
  }
  DecodeResult result;
  bool done = false;
  // A second attempt only when the probe could not read the size (or read
  // another than the decoder): then the first decodes to 1x1 to learn it,
  // or to fail with the decoder's own error.
  for (int attempt = 0; attempt < 2 && !done; ++attempt) {
    int capped_w = 1, capped_h = 1;
    if (width > 0 && height > 0) {
      std::tie(capped_w, capped_h) = CappedSize(width, height, max_side);
    }
    out->rgb.assign(static_cast<size_t>(capped_w) * capped_h * 3, 0);
    int seen_w = 0, seen_h = 0;
    result = decoder.Decode(
        data,
        [&](int w, int h) {
          seen_w = w;
          seen_h = h;
          CropSpec whole;
          whole.width = w;
          whole.height = h;
          whole.out_width = capped_w;
          whole.out_height = capped_h;
          return whole;
        },
        PixelLayout::kHWC, out->rgb.data());
    if (!result.ok()) break;
    if (seen_w == width && seen_h == height) {
      out->width = capped_w;
      out->height = capped_h;
      out->source_width = width;
      out->source_height = height;
      out->damage = result.damage;
      out->damage_detail = result.damage_detail;
      done = true;
    }
    width = seen_w;
    height = seen_h;
  }
  if (result.ok() && !done) {
    result.error = SampleError::kCorrupt;
    result.detail = "the image's size changed between two reads of its header";
  }
  if (timings != nullptr) {
    timings->decode_seconds = std::chrono::duration<double>(
                                  std::chrono::steady_clock::now() - start)
                                  .count();
    timings->transform_seconds = 0;
  }
  return result;
}

DecodeResult TransformCapped(Resizer& resizer, const CappedImage& image,
                             absl::FunctionRef<CropSpec(int width, int height)>
                                 choose_crop,
                             PixelLayout layout, uint8_t* out) {
  CropSpec crop;
  DecodeResult result =
      ClampCrop(choose_crop(image.source_width, image.source_height),
                image.source_width, image.source_height, &crop);
  if (!result.ok()) return result;
  if (image.width != image.source_width ||
      image.height != image.source_height) {
    // The window in the capped image's continuous coordinates; within
    // [0, width] x [0, height] since the clamped one is within the source.
    const double sx = static_cast<double>(image.width) / image.source_width;
    const double sy = static_cast<double>(image.height) / image.source_height;
    crop.x *= sx;
    crop.width *= sx;
    crop.y *= sy;
    crop.height *= sy;
  }
  // Scale 1: the window rounded out to whole pixels of the capped image.
  const CropWindow window =
      WindowAt(crop, image.width, image.height, /*denom=*/1, layout);
  const ptrdiff_t stride = ptrdiff_t{image.width} * 3;
  RgbView view;
  view.data = image.rgb.data() + window.y0 * stride + window.x0 * 3;
  view.width = window.x1 - window.x0;
  view.height = window.y1 - window.y0;
  view.stride = stride;
  resizer.Resize(view, window.resize, out);
  result.damage = image.damage;
  result.damage_detail = image.damage_detail;
  return result;
}

}  // namespace batchd::server
