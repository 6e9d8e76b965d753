// Per-sample transform parameters: torchvision's RandomResizedCrop (+ flip)
// and Resize + CenterCrop, as CropSpecs for the decoder.
//
// Pure functions; thread-safe.
#ifndef BATCHD_SERVER_PLAN_TRANSFORM_H_
#define BATCHD_SERVER_PLAN_TRANSFORM_H_

#include "common/random.h"
#include "server/decode/crop_spec.h"

namespace batchd::server {

struct TrainTransform {
  int size = 224;               // output side, pixels
  double scale_min = 0.08;      // crop area / image area
  double scale_max = 1.0;
  double ratio_min = 3.0 / 4.0;  // crop width / height
  double ratio_max = 4.0 / 3.0;
  double flip_probability = 0.5;
};

struct EvalTransform {
  int resize_shorter = 256;  // shorter side after resize, pixels
  int size = 224;            // centre crop side, pixels
};

// torchvision.transforms.RandomResizedCrop.get_params for a `width` x
// `height` image, then a flip with probability flip_probability:
// up to 10 attempts of
//   area = width*height * U(scale_min, scale_max)
//   aspect = exp(U(log ratio_min, log ratio_max))
//   w = round(sqrt(area*aspect)), h = round(sqrt(area/aspect))
//   accepted if 0 < w <= width and 0 < h <= height; then
//   top = uniform integer in [0, height-h], left in [0, width-w];
// else the centre-crop fallback (the whole image clamped to the ratio range).
// The flip is drawn after the crop, from the same `rng`.
CropSpec RandomResizedCropSpec(int width, int height,
                               const TrainTransform& params,
                               common::SampleRandom& rng);

// torchvision Resize(resize_shorter) then CenterCrop(size), as a window in
// source coordinates: the image is scaled by s = resize_shorter / min(w, h)
// (the longer side to int(resize_shorter * long / short), as torchvision),
// and the size x size centre of the resized image maps back to the source.
CropSpec CenterCropSpec(int width, int height, const EvalTransform& params);

}  // namespace batchd::server

#endif  // BATCHD_SERVER_PLAN_TRANSFORM_H_
