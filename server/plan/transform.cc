#include "server/plan/transform.h"

#include <algorithm>
#include <cmath>

namespace batchd::server {
namespace {

// Python 3's round(x) for a float: nearest integer, ties to even. This is
// std::nearbyint under the default rounding mode (FE_TONEAREST), which
// batchd never changes.
double PyRound(double x) { return std::nearbyint(x); }

}  // namespace

// A line-by-line port of torchvision.transforms.RandomResizedCrop.get_params
// (torchvision 0.15), plus the flip of RandomHorizontalFlip.
//
// Order of the draws from `rng` (part of the determinism contract: changing
// it changes every augmented batch):
//   for each of up to 10 attempts:
//     1. area fraction  = rng.Uniform(scale_min, scale_max)
//     2. log aspect     = rng.Uniform(log(ratio_min), log(ratio_max))
//     if the crop fits:
//     3. top            = rng.UniformInt(height - h + 1)
//     4. left           = rng.UniformInt(width - w + 1)
//     and stop;
//   then (after an accepted attempt or the fallback):
//     5. flip           = rng.Uniform() < flip_probability.
// Differences from torchvision: the arithmetic is double precision
// throughout (torch draws the uniforms in float32), and the fallback's crop
// side is clamped to at least 1 pixel (only reachable with a ratio range
// that excludes every 1-pixel-wide crop).
CropSpec RandomResizedCropSpec(int width, int height,
                               const TrainTransform& params,
                               common::SampleRandom& rng) {
  CropSpec spec;
  spec.out_width = params.size;
  spec.out_height = params.size;
  if (width <= 0 || height <= 0) return spec;  // the decoder rejects these

  const double area = static_cast<double>(width) * static_cast<double>(height);
  const double log_ratio_lo = std::log(params.ratio_min);
  const double log_ratio_hi = std::log(params.ratio_max);
  bool found = false;
  for (int attempt = 0; attempt < 10 && !found; ++attempt) {
    const double target_area =
        area * rng.Uniform(params.scale_min, params.scale_max);
    const double aspect_ratio =
        std::exp(rng.Uniform(log_ratio_lo, log_ratio_hi));
    // Kept as doubles until the range check, so NaN/inf from a nonsense
    // `params` are rejected instead of overflowing an int conversion.
    const double w = PyRound(std::sqrt(target_area * aspect_ratio));
    const double h = PyRound(std::sqrt(target_area / aspect_ratio));
    if (0 < w && w <= width && 0 < h && h <= height) {
      const int wi = static_cast<int>(w);
      const int hi = static_cast<int>(h);
      const uint64_t top = rng.UniformInt(static_cast<uint64_t>(height - hi) + 1);
      const uint64_t left = rng.UniformInt(static_cast<uint64_t>(width - wi) + 1);
      spec.x = static_cast<double>(left);
      spec.y = static_cast<double>(top);
      spec.width = wi;
      spec.height = hi;
      found = true;
    }
  }
  if (!found) {
    // Fallback to a central crop of the whole image, clamped to the ratio
    // range.
    const double ratio_lo = std::min(params.ratio_min, params.ratio_max);
    const double ratio_hi = std::max(params.ratio_min, params.ratio_max);
    const double in_ratio =
        static_cast<double>(width) / static_cast<double>(height);
    double w = width;
    double h = height;
    if (in_ratio < ratio_lo) {
      h = PyRound(w / ratio_lo);
    } else if (in_ratio > ratio_hi) {
      w = PyRound(h * ratio_hi);
    }
    if (!(w >= 1)) w = 1;  // also catches NaN
    if (!(h >= 1)) h = 1;
    const int wi = std::min(width, static_cast<int>(w));
    const int hi = std::min(height, static_cast<int>(h));
    spec.x = (width - wi) / 2;   // non-negative: floor division as Python's //
    spec.y = (height - hi) / 2;
    spec.width = wi;
    spec.height = hi;
  }
  spec.flip = rng.Uniform() < params.flip_probability;
  return spec;
}

// torchvision Resize(int) (transforms.functional._compute_resized_output_size)
// then CenterCrop (transforms.functional.center_crop):
//   short, long = min(w, h), max(w, h)
//   new_short = resize_shorter, new_long = int(resize_shorter * long / short)
//   crop_top  = int(round((new_h - size) / 2.0))
//   crop_left = int(round((new_w - size) / 2.0))
// The size x size window at (crop_left, crop_top) of the resized image is
// mapped back through the per-axis scale new_dim / source_dim.
// When size > resize_shorter torchvision zero-pads the crop; a CropSpec cannot
// express padding, so the window is clamped to the image instead (the output
// is then a stretched whole image, not a padded one). Configuration
// validation should reject such transforms.
CropSpec CenterCropSpec(int width, int height, const EvalTransform& params) {
  CropSpec spec;
  spec.out_width = params.size;
  spec.out_height = params.size;
  if (width <= 0 || height <= 0 || params.resize_shorter <= 0 ||
      params.size <= 0) {
    return spec;
  }
  const double w = width;
  const double h = height;
  const double shorter = std::min(w, h);
  const double longer = std::max(w, h);
  const double new_short = params.resize_shorter;
  const double new_long = std::floor(new_short * longer / shorter);
  const double new_w = width <= height ? new_short : new_long;
  const double new_h = width <= height ? new_long : new_short;

  const double crop = params.size;
  const double crop_top = PyRound((new_h - crop) / 2.0);
  const double crop_left = PyRound((new_w - crop) / 2.0);
  const double scale_x = new_w / w;
  const double scale_y = new_h / h;

  // Clamp to the resized image (only matters when crop > new side).
  const double top = std::max(0.0, crop_top);
  const double left = std::max(0.0, crop_left);
  const double bottom = std::min(new_h, crop_top + crop);
  const double right = std::min(new_w, crop_left + crop);
  spec.x = left / scale_x;
  spec.y = top / scale_y;
  spec.width = std::min(w - spec.x, (right - left) / scale_x);
  spec.height = std::min(h - spec.y, (bottom - top) / scale_y);
  return spec;
}

}  // namespace batchd::server
