// The geometric ops of torchvision's augmentation policies, RandomRotation,
// RandomAffine and RandomVerticalFlip, on uint8 RGB images in place, each
// defined as torchvision 0.14's `torchvision.transforms.functional` defines
// it for a uint8 tensor: the inverse affine matrix of
// F._get_inverse_affine_matrix, the sampling grid of _gen_affine_grid
// (pixel centres, align_corners=False), grid_sample with nearest or
// bilinear interpolation and zero padding, the fill blended by the
// sampled mask as _apply_grid_transform does, then rounded to uint8.
//
// The output matches torchvision within the tolerance docs/augment.md
// states (nearest: the few pixels whose sampling point falls on a rounding
// boundary; bilinear: rounding).
//
// Thread-compatible: `scratch` is temporary memory; one per thread.
#ifndef BATCHD_SERVER_AUGMENT_GEOMETRY_OPS_H_
#define BATCHD_SERVER_AUGMENT_GEOMETRY_OPS_H_

#include <array>
#include <cstdint>
#include <vector>

#include "server/augment/image.h"

namespace batchd::server::augment {

// F.affine's parameters. Angles in degrees, clockwise as torchvision's;
// translation in pixels; shear in degrees along x and y.
struct AffineParams {
  float angle = 0;
  float translate_x = 0;
  float translate_y = 0;
  float scale = 1;
  // Double: the policies' ShearX/ShearY pass degrees(atan(magnitude)),
  // which torchvision keeps in double; as float the matrix would move
  // enough to change some bilinear roundings.
  double shear_x = 0;
  double shear_y = 0;
  // The centre of the transform in pixels from the top-left corner; unset
  // (center_set false) is the image centre, as torchvision's center=None.
  bool center_set = false;
  float center_x = 0;
  float center_y = 0;
  // kNearest or kBilinear (torchvision's tensor affine has no bicubic).
  Interpolation interpolation = Interpolation::kNearest;
  // Where the transform samples outside the image.
  std::array<uint8_t, 3> fill = {0, 0, 0};
  // torchvision's fill=None (the policies' default, an empty `fill` in
  // augment.proto): outside is black and `fill` is ignored. It differs from
  // fill {0, 0, 0} only with bilinear, on the border: a given fill is
  // blended by the sampled mask (img * mask + (1 - mask) * fill), which
  // darkens the partly outside pixels once more; None is not.
  bool fill_none = false;
};

// F.affine(img, angle, [translate_x, translate_y], scale, [shear_x,
// shear_y], interpolation, fill, center).
void Affine(Image image, const AffineParams& params,
            std::vector<uint8_t>* scratch);

// F.rotate(img, angle, interpolation, expand=False, center=None, fill):
// the affine rotation about the image centre, counter-clockwise. It is
// Affine with `angle` negated and the other parameters at their defaults
// (call that for fill=None).
void Rotate(Image image, float angle, Interpolation interpolation,
            std::array<uint8_t, 3> fill, std::vector<uint8_t>* scratch);

// F.vflip.
void VerticalFlip(Image image);

}  // namespace batchd::server::augment

#endif  // BATCHD_SERVER_AUGMENT_GEOMETRY_OPS_H_
