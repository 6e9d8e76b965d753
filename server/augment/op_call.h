// OpCall: one concrete augmentation call of a sample, with every parameter
// drawn: the torchvision.transforms.functional call that torchvision would
// make for it (adjust_brightness(img, 1.27), affine(img, ...), ...), or an
// AugMix of chains of such calls. AugmentPlan::Draw (policy.h) makes them
// from a sample's generator; Apply runs them on the sample's image through
// the kernels of color_ops.h and geometry_ops.h; Describe writes them as
// one line, for logs (--log-augment-sample), tests and the torchvision
// replay (tests/augment/test_policy_replay.py).
//
//   std::vector<OpCall> calls = plan.Draw(rng, image.width, image.height);
//   Scratch scratch;  // one per thread, reused
//   Apply(calls, image, &scratch);
//
// Plain values; Apply and Describe are pure functions (Apply writes only
// `image` and `scratch`).
#ifndef BATCHD_SERVER_AUGMENT_OP_CALL_H_
#define BATCHD_SERVER_AUGMENT_OP_CALL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "server/augment/geometry_ops.h"
#include "server/augment/image.h"

namespace batchd::server::augment {

// The torchvision.transforms.functional function an OpCall stands for
// (F.<name>), or AugMix's mixing.
enum class OpFn : uint8_t {
  kIdentity,          // nothing (the policies' "Identity")
  kAffine,            // F.affine: `affine`
  kRotate,            // F.rotate: affine.angle, .interpolation, .fill
  kAdjustBrightness,  // F.adjust_brightness: `factor`
  kAdjustSaturation,  // F.adjust_saturation ("Color"): `factor`
  kAdjustContrast,    // F.adjust_contrast: `factor`
  kAdjustSharpness,   // F.adjust_sharpness: `factor`
  kAdjustHue,         // F.adjust_hue: `factor` in [-0.5, 0.5]
  kPosterize,         // F.posterize: `bits`
  kSolarize,          // F.solarize: `threshold`
  kAutocontrast,      // F.autocontrast
  kEqualize,          // F.equalize
  kInvert,            // F.invert
  kGrayscale,         // F.rgb_to_grayscale(num_output_channels=3)
  kGaussianBlur,      // F.gaussian_blur: kernel_x, kernel_y, sigma
  kVerticalFlip,      // F.vflip
  kAugMix,            // AugMix: `mix_weights`, `chains`
};

// The op names of `_apply_op`.
enum class PolicyOp : uint8_t {
  kIdentity,
  kShearX,
  kShearY,
  kTranslateX,
  kTranslateY,
  kRotate,
  kBrightness,
  kColor,
  kContrast,
  kSharpness,
  kPosterize,
  kSolarize,
  kAutoContrast,
  kEqualize,
  kInvert,
  kNone,  // a stand-alone op, not one of a policy's
};

struct OpCall {
  OpFn fn = OpFn::kIdentity;
  // kAdjust*: the factor as torchvision passes it (1.0 + magnitude for the
  // policies' ops).
  double factor = 0;
  // kPosterize: bits kept, 0..8.
  int bits = 8;
  // kSolarize: torchvision's threshold (a float); values >= it are
  // inverted.
  double threshold = 256;
  // kAffine: every field; kRotate: angle, interpolation and fill.
  AffineParams affine;
  // The geometric ops' fill is torchvision's fill=None (the policies'
  // default), not the explicit `affine.fill`: the same pixels with nearest
  // interpolation; with bilinear, torchvision blends the border with the
  // fill only when one is given.
  bool fill_none = false;
  // kGaussianBlur: kernel width and height (odd) and sigma (both axes).
  int kernel_x = 0;
  int kernel_y = 0;
  double sigma = 0;
  // kAugMix: mix_weights[0] weights the original image, mix_weights[1 + i]
  // chain i (float32, as torchvision's: the Beta weight of the augmented
  // side times the chain's Dirichlet weight). Each chain's calls start
  // from the original image.
  std::vector<float> mix_weights;
  std::vector<std::vector<OpCall>> chains;

  // Where the call came from, for tests and logs (Describe leaves it out):
  // the policy's named op, its magnitude bin (fractional under
  // RandAugment's magnitude_std; -1 without a table) and signed magnitude
  // (-0.0 for a negated 0); for AutoAugment the sub-policy and the op's
  // position (0, 1) in it.
  PolicyOp policy_op = PolicyOp::kNone;
  double bin = -1;
  double magnitude = 0;
  int sub_policy = -1;
  int position = -1;
};

// Temporary memory of Apply, reused across calls. One per thread.
struct Scratch {
  std::vector<uint8_t> bytes;     // the geometric and sharpness kernels'
  std::vector<float> floats;      // GaussianBlur's
  std::vector<uint8_t> original;  // AugMix: the image before its chains
  std::vector<uint8_t> chain;     // AugMix: the chain being applied
  std::vector<float> mix;         // AugMix: the float32 mixture
};

// Runs `calls` on `image` in order, in place. AugMix mixes in float32 as
// torchvision does (the original times mix_weights[0], plus each chain's
// output times its weight, added in chain order) and converts to uint8
// by truncation, as `.to(torch.uint8)`.
void Apply(const std::vector<OpCall>& calls, Image image, Scratch* scratch);

// One line naming each call and its parameters in torchvision's terms,
// e.g. "adjust_contrast(contrast_factor=1.3), affine(angle=0,
// translate=[-5, 0], scale=1, shear=[0, 0], center=None,
// interpolation=nearest, fill=None)"; an AugMix is "augmix(weights=[...],
// chains=[[...], ...])". The text is a list of Python call expressions
// (tests/augment/replay.py parses it); float32 parameters are written with 9
// significant digits and doubles with 17, so they read back exactly. No calls:
// the empty string.
std::string Describe(const std::vector<OpCall>& calls);

}  // namespace batchd::server::augment

#endif  // BATCHD_SERVER_AUGMENT_OP_CALL_H_
