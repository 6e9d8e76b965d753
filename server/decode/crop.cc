#include "server/decode/crop.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace batchd::server {
namespace {

DecodeResult CorruptCrop(std::string detail) {
  DecodeResult result;
  result.error = SampleError::kCorrupt;
  result.detail = std::move(detail);
  return result;
}

}  // namespace

DecodeResult ClampCrop(const CropSpec& crop, int width, int height,
                       CropSpec* clamped) {
  if (!std::isfinite(crop.x) || !std::isfinite(crop.y) ||
      !std::isfinite(crop.width) || !std::isfinite(crop.height)) {
    return CorruptCrop("invalid crop: not finite");
  }
  *clamped = crop;
  clamped->x = std::clamp(crop.x, 0.0, static_cast<double>(width));
  clamped->y = std::clamp(crop.y, 0.0, static_cast<double>(height));
  clamped->width = std::min(crop.width, width - clamped->x);
  clamped->height = std::min(crop.height, height - clamped->y);
  if (!(clamped->width > 0) || !(clamped->height > 0) || crop.out_width <= 0 ||
      crop.out_height <= 0) {
    return CorruptCrop(
        absl::StrCat("invalid crop: window ", crop.x, ",", crop.y, " ",
                     crop.width, "x", crop.height, " in a ", width, "x",
                     height, " image, output ", crop.out_width, "x",
                     crop.out_height));
  }
  return DecodeResult();
}

CropWindow WindowAt(const CropSpec& crop, int width, int height, int denom,
                    PixelLayout layout) {
  const int scaled_w = (width + denom - 1) / denom;
  const int scaled_h = (height + denom - 1) / denom;
  const double xs = crop.x / denom, ys = crop.y / denom;
  const double ws = crop.width / denom, hs = crop.height / denom;
  CropWindow window;
  window.x0 = std::min(static_cast<int>(std::floor(xs)), scaled_w - 1);
  window.y0 = std::min(static_cast<int>(std::floor(ys)), scaled_h - 1);
  window.x1 = std::clamp(static_cast<int>(std::ceil(xs + ws)), window.x0 + 1,
                         scaled_w);
  window.y1 = std::clamp(static_cast<int>(std::ceil(ys + hs)), window.y0 + 1,
                         scaled_h);
  window.resize.x = xs - window.x0;
  window.resize.y = ys - window.y0;
  window.resize.width = ws;
  window.resize.height = hs;
  window.resize.out_width = crop.out_width;
  window.resize.out_height = crop.out_height;
  window.resize.flip = crop.flip;
  window.resize.filter = crop.filter;
  window.resize.layout = layout;
  return window;
}

}  // namespace batchd::server
