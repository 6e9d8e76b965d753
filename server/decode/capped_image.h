// CappedImage: an image decoded whole at capped resolution, and the
// transform that crops it (Pipeline.decoded_max_side in
// proto/batchd/v1/data.proto, which defines both).
//
// DecodeCapped gives the capped image: an image whose longer side exceeds
// `max_side` is scaled to exactly `max_side` on that side (CappedSize),
// decoded at the coarsest DCT scale that is at least that size and resized
// (antialiased, resize.h) to it; a smaller image is decoded as it is. It is
// a pure function of the file and `max_side`, so it can be kept and shared
// by every plan with that cap (server/pipeline/decoded_cache.h). TransformCapped
// then takes the crop chosen for the original image's size (so the
// augmentation is the one the uncapped pipeline draws), maps its window
// onto the capped image, and resizes, flips and writes the output as the
// decoder does for a file, with the image already in memory.
//
//   ImageDecoder decoder;
//   CappedImage image;
//   if (DecodeCapped(decoder, bytes, /*max_side=*/448, &image).ok()) {
//     Resizer resizer;
//     TransformCapped(resizer, image, choose_crop, PixelLayout::kHWC, out);
//   }
//
// Pure functions over caller-owned decoders and resizers (thread-compatible:
// one each per thread); a CappedImage is immutable once decoded.
#ifndef BATCHD_SERVER_DECODE_CAPPED_IMAGE_H_
#define BATCHD_SERVER_DECODE_CAPPED_IMAGE_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/types/span.h"
#include "server/decode/crop_spec.h"
#include "server/decode/decode_result.h"
#include "server/decode/image_decoder.h"
#include "server/decode/resize.h"

namespace batchd::server {

struct CappedImage {
  int width = 0;   // capped size, pixels
  int height = 0;
  int source_width = 0;   // the file's size, pixels
  int source_height = 0;
  std::vector<uint8_t> rgb;  // height * width * 3, row-major RGB, no padding
  // The damage the decode went past (DecodeLimits.decode_damaged), kept so
  // that every use of the image reports it as a decode from the file would.
  SampleError damage = SampleError::kNone;
  std::string damage_detail;

  // Bytes held, for cache accounting.
  uint64_t bytes() const { return rgb.capacity() + damage_detail.capacity(); }
};

// The capped size of a `width` x `height` image: unchanged when its longer
// side is at most `max_side`, else the longer side becomes `max_side` and
// the shorter round(shorter * max_side / longer), at least 1.
// REQUIRES: width, height, max_side > 0.
std::pair<int, int> CappedSize(int width, int height, int max_side);

// Decodes `data` (JPEG or PNG) into `out` at capped resolution, into a
// buffer of exactly the capped image's size (the header is read first).
// Errors are the decoder's (the same SampleError a plain decode gives); on
// error `out` is unspecified. `timings->decode_seconds` gets the whole
// time.
DecodeResult DecodeCapped(ImageDecoder& decoder, absl::Span<const uint8_t> data,
                          int max_side, CappedImage* out,
                          DecodeTimings* timings = nullptr);

// Writes the crop `choose_crop(image.source_width, image.source_height)`
// of the original image, clamped to it as the decoder clamps, its window
// scaled by (width / source_width, height / source_height) onto `image`,
// resized to its output size, flipped as asked, in `layout`, to `out`
// (out_height * out_width * 3 bytes). kCorrupt for a crop that is not
// finite or empty (as the decoder). The returned result carries the
// image's damage.
DecodeResult TransformCapped(Resizer& resizer, const CappedImage& image,
                             absl::FunctionRef<CropSpec(int width, int height)>
                                 choose_crop,
                             PixelLayout layout, uint8_t* out);

}  // namespace batchd::server

#endif  // BATCHD_SERVER_DECODE_CAPPED_IMAGE_H_
