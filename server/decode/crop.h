// The crop geometry every decoder shares: a plan's CropSpec clamped into
// the image, and the whole-pixel window to decode for it at a DCT scale,
// with the resize that maps that window to the output. The JPEG, PNG and
// capped-image decoders all cut their crops through these two functions,
// so a crop means the same pixels whatever the format.
#ifndef BATCHD_SERVER_DECODE_CROP_H_
#define BATCHD_SERVER_DECODE_CROP_H_

#include "server/decode/crop_spec.h"
#include "server/decode/decode_result.h"
#include "server/decode/resize.h"

namespace batchd::server {

// `crop` clamped into a width x height image. kCorrupt for a window that
// is not finite or is empty after clamping, or an empty output.
DecodeResult ClampCrop(const CropSpec& crop, int width, int height,
                       CropSpec* clamped);

// What to decode for a clamped crop at 1 / `denom`: the window rounded out
// to whole pixels of the scaled image, half-open, and the resize of it.
struct CropWindow {
  int x0 = 0, y0 = 0, x1 = 0, y1 = 0;
  ResizeRequest resize;  // coordinates relative to (x0, y0)
};
CropWindow WindowAt(const CropSpec& crop, int width, int height, int denom,
                    PixelLayout layout);

}  // namespace batchd::server

#endif  // BATCHD_SERVER_DECODE_CROP_H_
