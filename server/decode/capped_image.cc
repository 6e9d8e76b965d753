#include "server/decode/capped_image.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <tuple>

#include "server/decode/decode_internal.h"

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
  // The capped size is known only once the header is read, inside the
  // decode; both sides are at most max_side, so this buffer always holds it.
  thread_local std::vector<uint8_t> scratch;
  scratch.resize(static_cast<size_t>(max_side) * max_side * 3);
  int capped_w = 0, capped_h = 0, source_w = 0, source_h = 0;
  DecodeResult result = decoder.Decode(
      data,
      [&](int width, int height) {
        source_w = width;
        source_h = height;
        std::tie(capped_w, capped_h) = CappedSize(width, height, max_side);
        CropSpec whole;
        whole.width = width;
        whole.height = height;
        whole.out_width = capped_w;
        whole.out_height = capped_h;
        return whole;
      },
      PixelLayout::kHWC, scratch.data());
  if (result.ok()) {
    out->width = capped_w;
    out->height = capped_h;
    out->source_width = source_w;
    out->source_height = source_h;
    out->rgb.assign(scratch.begin(),
                    scratch.begin() + static_cast<size_t>(capped_w) *
                                          capped_h * 3);
    out->damage = result.damage;
    out->damage_detail = result.damage_detail;
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
