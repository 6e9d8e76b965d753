// CropSpec: what to cut out of a decoded image and how big to make it.
// Computed by the plan (server/plan/transform.h) from the image's size and the
// sample's random numbers; consumed by the decoder (jpeg_decoder.h), which
// decodes only the pixels the crop needs.
#ifndef BATCHD_SERVER_DECODE_CROP_SPEC_H_
#define BATCHD_SERVER_DECODE_CROP_SPEC_H_

namespace batchd::server {

// Pixel layouts the decoder can write.
enum class PixelLayout { kHWC, kCHW };

struct CropSpec {
  // The crop window in source-image pixel coordinates (full resolution,
  // before any DCT scaling). Fractional for the eval transform. The window
  // lies inside [0, width] x [0, height].
  double x = 0;
  double y = 0;
  double width = 0;
  double height = 0;
  // Output size in pixels; the window is resized (antialiased when
  // shrinking) to exactly this.
  int out_width = 0;
  int out_height = 0;
  // Mirror the output left-right.
  bool flip = false;
};

}  // namespace batchd::server

#endif  // BATCHD_SERVER_DECODE_CROP_SPEC_H_
