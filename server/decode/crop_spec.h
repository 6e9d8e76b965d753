// CropSpec: what to cut out of a decoded image and how big to make it.
// Computed by the plan (server/plan/transform.h) from the image's size and the
// sample's random numbers; consumed by the decoder (jpeg_decoder.h), which
// decodes only the pixels the crop needs.
#ifndef BATCHD_SERVER_DECODE_CROP_SPEC_H_
#define BATCHD_SERVER_DECODE_CROP_SPEC_H_

namespace batchd::server {

// Pixel layouts the decoder can write.
enum class PixelLayout { kHWC, kCHW };

// The resize's interpolation kernel, as torchvision's
// F.resize(..., antialias=True) on a tensor (torch.nn.functional.interpolate
// with align_corners=False, antialias=True) defines it.
enum class ResizeFilter {
  // The triangle, radius 1: InterpolationMode.BILINEAR.
  kBilinear,
  // Keys' cubic convolution with a = -0.5, radius 2: InterpolationMode.
  // BICUBIC. Overshoots at edges are clamped to 0..255.
  kBicubic,
};

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
  // How the window is resized (Pipeline.interpolation).
  ResizeFilter filter = ResizeFilter::kBilinear;
};

}  // namespace batchd::server

#endif  // BATCHD_SERVER_DECODE_CROP_SPEC_H_
