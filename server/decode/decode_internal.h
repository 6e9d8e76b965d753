// Pieces of the JPEG decoder exposed for tests and benchmarks: the DCT scale
// choice and a region decode that returns the decoded pixels before resize.
// Not part of the daemon's API.
#ifndef BATCHD_SERVER_DECODE_DECODE_INTERNAL_H_
#define BATCHD_SERVER_DECODE_DECODE_INTERNAL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/types/span.h"
#include "server/decode/crop.h"
#include "server/decode/jpeg_decoder.h"
#include "server/decode/resize.h"

namespace batchd::server {

// The DCT scale the decoder uses: the largest denominator d in {8, 4, 2, 1}
// (decode at 1/d) with crop_w / d >= out_w and crop_h / d >= out_h, so the
// scaled crop is never smaller than the output. The 3/8..7/8 scales are not
// used: on the target machines they decode slower than no scaling at all.
int ChooseScaleDenom(double crop_w, double crop_h, int out_w, int out_h);

// Decoded RGB pixels of a rectangle of the image scaled by 1 / scale_denom.
struct RegionPixels {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> rgb;  // height * width * 3, no padding
};

// Decodes columns [x0, x1) and rows [y0, y1) (scaled-image coordinates; the
// rectangle must lie in the scaled image) of `data` at 1 / `scale_denom`,
// with region decode (jpeg_crop_scanline + jpeg_skip_scanlines + early stop)
// when `use_region`, else by decoding the whole scaled image and copying the
// rectangle out. The two must agree exactly; tests check that they do.
DecodeResult DecodeScaledRegionForTest(absl::Span<const uint8_t> data,
                                       int scale_denom, int x0, int y0,
                                       int x1, int y1, bool use_region,
                                       RegionPixels* out);

// Decodes exactly what JpegDecoder::Decode decodes for the same crop (same
// DCT scale, same region) and stops before the resize, flip and layout
// write: the decode-only limit that the benchmarks compare the daemon with.
//
// Thread-compatible: use one per thread.
class RegionDecoder {
 public:
  explicit RegionDecoder(DecodeLimits limits = {});
  ~RegionDecoder();

  // On success `*view` shows the crop's window (rounded out to whole pixels)
  // at the chosen scale; it stays valid until the next call.
  DecodeResult Decode(absl::Span<const uint8_t> data,
                      absl::FunctionRef<CropSpec(int width, int height)>
                          choose_crop,
                      RgbView* view);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace batchd::server

#endif  // BATCHD_SERVER_DECODE_DECODE_INTERNAL_H_
