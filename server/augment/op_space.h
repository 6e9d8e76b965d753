// torchvision 0.14's augmentation spaces (torchvision/transforms/
// autoaugment.py): the named ops of TrivialAugmentWide, RandAugment,
// AutoAugment and AugMix, their magnitude tables (`_augmentation_space`),
// AutoAugment's three learned policies, and `_apply_op`, which turns a
// named op at a magnitude into its functional call.
//
// Magnitude tables are torch.linspace float32 tensors in torchvision; here
// each entry is the float32 nearest to start + (end - start) * i / (n - 1)
// (torch.linspace agrees to within one float32 ulp;
// docs/augment.md).
// Posterize's tables are computed as torchvision computes them (float32
// division, round half to even, int).
//
// Pure functions and constant tables; thread-safe.
#ifndef BATCHD_SERVER_AUGMENT_OP_SPACE_H_
#define BATCHD_SERVER_AUGMENT_OP_SPACE_H_

#include <array>
#include <cstdint>
#include <vector>

#include "server/augment/image.h"
#include "server/augment/op_call.h"

namespace batchd::server::augment {

// torchvision's name: "ShearX", "AutoContrast", ...
const char* PolicyOpName(PolicyOp op);

// Which policy's `_augmentation_space`.
enum class OpSpace : uint8_t {
  kTrivialAugmentWide,  // 14 ops, the wide magnitudes
  kRandAugment,         // 14 ops
  kAutoAugment,         // 14 ops: RandAugment's without Identity, + Invert
  kAugMix,              // 9 ops, + 4 colour ops with all_ops
};

// The ops of `space` in torchvision's dict order (the order its uniform
// op index counts in). `all_ops` matters for kAugMix only.
const std::vector<PolicyOp>& SpaceOps(OpSpace space, bool all_ops);

// Whether `op` has a magnitude table (the table's ndim > 0): false for
// Identity, AutoContrast, Equalize and Invert, whose magnitude is 0.
bool HasMagnitudes(PolicyOp op);
// Whether the magnitude is negated with probability 1/2 (the shears,
// translations, rotation and the four enhance ops).
bool IsSigned(PolicyOp op);

// magnitudes[bin] of `op` in `space`'s table of `num_bins` bins for a
// `width` x `height` image (the translations scale with it). 0 for ops
// without a table. REQUIRES: num_bins >= 2, 0 <= bin < num_bins.
float Magnitude(OpSpace space, PolicyOp op, int num_bins, int bin, int width,
                int height);

// The magnitude at a fractional bin (RandAugment with magnitude_std > 0,
// as timm draws it): linear between the two nearest bins' entries, so an
// integral `bin` gives Magnitude's entry exactly. REQUIRES: 0 <= bin <=
// num_bins - 1.
double FractionalMagnitude(OpSpace space, PolicyOp op, int num_bins, double bin,
                           int width, int height);

// One op of an AutoAugment sub-policy: applied with `probability`, at
// magnitude bin `bin` of the 10-bin table (-1: the op has none).
struct SubPolicyOp {
  PolicyOp op;
  float probability;
  int bin;
};
using SubPolicy = std::array<SubPolicyOp, 2>;
inline constexpr int kAutoAugmentSubPolicies = 25;
inline constexpr int kAutoAugmentBins = 10;

// AutoAugmentPolicy.IMAGENET, CIFAR10 and SVHN.
enum class AutoAugmentPolicy : uint8_t { kImageNet, kCifar10, kSvhn };
const std::array<SubPolicy, kAutoAugmentSubPolicies>& SubPolicies(
    AutoAugmentPolicy policy);

// AugMix's `_PARAMETER_MAX`: its tables have 10 bins, of which the first
// `severity` are drawn from.
inline constexpr int kAugMixBins = 10;

// `_apply_op(img, op, magnitude, interpolation, fill)`: the functional
// call. `fill_none`: torchvision's fill=None (then `fill` is unused).
OpCall PolicyCall(PolicyOp op, double magnitude, Interpolation interpolation,
                  const std::array<uint8_t, 3>& fill, bool fill_none);

}  // namespace batchd::server::augment

#endif  // BATCHD_SERVER_AUGMENT_OP_SPACE_H_
