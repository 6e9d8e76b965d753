#include "server/augment/op_space.h"

#include <cmath>

namespace batchd::server::augment {
namespace {

using P = PolicyOp;

constexpr double kPi = 3.14159265358979323846;

// torch.linspace(start, end, steps)[i], float32 (see the header).
float Linspace(double start, double end, int steps, int i) {
  const double s = static_cast<float>(start);
  const double e = static_cast<float>(end);
  return static_cast<float>(s + (e - s) * i / (steps - 1));
}

// `top - (torch.arange(num_bins) / ((num_bins - 1) / divisor)).round().int()`:
// the division in float32, round half to even.
int PosterizeBits(int top, double divisor, int num_bins, int bin) {
  const float step = static_cast<float>((num_bins - 1) / divisor);
  return top - static_cast<int>(std::nearbyint(static_cast<float>(bin) / step));
}

}  // namespace

const char* PolicyOpName(PolicyOp op) {
  static const char* const kNames[] = {
      "Identity",     "ShearX",    "ShearY",     "TranslateX",
      "TranslateY",   "Rotate",    "Brightness", "Color",
      "Contrast",     "Sharpness", "Posterize",  "Solarize",
      "AutoContrast", "Equalize",  "Invert",     "None"};
  return kNames[static_cast<int>(op)];
}

const std::vector<PolicyOp>& SpaceOps(OpSpace space, bool all_ops) {
  static const auto* const kRand = new std::vector<PolicyOp>{
      P::kIdentity,     P::kShearX,    P::kShearY,     P::kTranslateX,
      P::kTranslateY,   P::kRotate,    P::kBrightness, P::kColor,
      P::kContrast,     P::kSharpness, P::kPosterize,  P::kSolarize,
      P::kAutoContrast, P::kEqualize};
  static const auto* const kAuto = new std::vector<PolicyOp>{
      P::kShearX,    P::kShearY,     P::kTranslateX, P::kTranslateY,
      P::kRotate,    P::kBrightness, P::kColor,      P::kContrast,
      P::kSharpness, P::kPosterize,  P::kSolarize,   P::kAutoContrast,
      P::kEqualize,  P::kInvert};
  static const auto* const kAugMixAll = new std::vector<PolicyOp>{
      P::kShearX,   P::kShearY,     P::kTranslateX, P::kTranslateY,
      P::kRotate,   P::kPosterize,  P::kSolarize,   P::kAutoContrast,
      P::kEqualize, P::kBrightness, P::kColor,      P::kContrast,
      P::kSharpness};
  static const auto* const kAugMixSome =
      new std::vector<PolicyOp>(kAugMixAll->begin(), kAugMixAll->begin() + 9);
  switch (space) {
    case OpSpace::kTrivialAugmentWide:
    case OpSpace::kRandAugment:
      return *kRand;
    case OpSpace::kAutoAugment:
      return *kAuto;
    case OpSpace::kAugMix:
      return all_ops ? *kAugMixAll : *kAugMixSome;
  }
  return *kRand;
}

bool HasMagnitudes(PolicyOp op) {
  return op != P::kIdentity && op != P::kAutoContrast && op != P::kEqualize &&
         op != P::kInvert;
}

bool IsSigned(PolicyOp op) {
  switch (op) {
    case P::kShearX:
    case P::kShearY:
    case P::kTranslateX:
    case P::kTranslateY:
    case P::kRotate:
    case P::kBrightness:
    case P::kColor:
    case P::kContrast:
    case P::kSharpness:
      return true;
    default:
      return false;
  }
}

float Magnitude(OpSpace space, PolicyOp op, int num_bins, int bin, int width,
                int height) {
  const bool wide = space == OpSpace::kTrivialAugmentWide;
  const bool augmix = space == OpSpace::kAugMix;
  switch (op) {
    case P::kShearX:
    case P::kShearY:
      return Linspace(0.0, wide ? 0.99 : 0.3, num_bins, bin);
    case P::kTranslateX:
    case P::kTranslateY: {
      // image_size is (height, width): TranslateX scales with the width.
      const int side = op == P::kTranslateX ? width : height;
      const double end = wide     ? 32.0
                         : augmix ? side / 3.0
                                  : 150.0 / 331.0 * side;
      return Linspace(0.0, end, num_bins, bin);
    }
    case P::kRotate:
      return Linspace(0.0, wide ? 135.0 : 30.0, num_bins, bin);
    case P::kBrightness:
    case P::kColor:
    case P::kContrast:
    case P::kSharpness:
      return Linspace(0.0, wide ? 0.99 : 0.9, num_bins, bin);
    case P::kPosterize:
      return static_cast<float>(wide     ? PosterizeBits(8, 6, num_bins, bin)
                                : augmix ? PosterizeBits(4, 4, num_bins, bin)
                                         : PosterizeBits(8, 4, num_bins, bin));
    case P::kSolarize:
      return Linspace(255.0, 0.0, num_bins, bin);
    default:
      return 0.0f;
  }
}

double FractionalMagnitude(OpSpace space, PolicyOp op, int num_bins, double bin,
                           int width, int height) {
  const int low = static_cast<int>(std::floor(bin));
  const double t = bin - low;
  const double a = Magnitude(space, op, num_bins, low, width, height);
  if (t == 0 || low + 1 >= num_bins) return a;
  const double b = Magnitude(space, op, num_bins, low + 1, width, height);
  return a + t * (b - a);
}

const std::array<SubPolicy, kAutoAugmentSubPolicies>& SubPolicies(
    AutoAugmentPolicy policy) {
  // autoaugment.py's AutoAugment._get_policies, in its order.
  static constexpr std::array<SubPolicy, kAutoAugmentSubPolicies> kImageNet{{
      {{{P::kPosterize, 0.4f, 8}, {P::kRotate, 0.6f, 9}}},
      {{{P::kSolarize, 0.6f, 5}, {P::kAutoContrast, 0.6f, -1}}},
      {{{P::kEqualize, 0.8f, -1}, {P::kEqualize, 0.6f, -1}}},
      {{{P::kPosterize, 0.6f, 7}, {P::kPosterize, 0.6f, 6}}},
      {{{P::kEqualize, 0.4f, -1}, {P::kSolarize, 0.2f, 4}}},
      {{{P::kEqualize, 0.4f, -1}, {P::kRotate, 0.8f, 8}}},
      {{{P::kSolarize, 0.6f, 3}, {P::kEqualize, 0.6f, -1}}},
      {{{P::kPosterize, 0.8f, 5}, {P::kEqualize, 1.0f, -1}}},
      {{{P::kRotate, 0.2f, 3}, {P::kSolarize, 0.6f, 8}}},
      {{{P::kEqualize, 0.6f, -1}, {P::kPosterize, 0.4f, 6}}},
      {{{P::kRotate, 0.8f, 8}, {P::kColor, 0.4f, 0}}},
      {{{P::kRotate, 0.4f, 9}, {P::kEqualize, 0.6f, -1}}},
      {{{P::kEqualize, 0.0f, -1}, {P::kEqualize, 0.8f, -1}}},
      {{{P::kInvert, 0.6f, -1}, {P::kEqualize, 1.0f, -1}}},
      {{{P::kColor, 0.6f, 4}, {P::kContrast, 1.0f, 8}}},
      {{{P::kRotate, 0.8f, 8}, {P::kColor, 1.0f, 2}}},
      {{{P::kColor, 0.8f, 8}, {P::kSolarize, 0.8f, 7}}},
      {{{P::kSharpness, 0.4f, 7}, {P::kInvert, 0.6f, -1}}},
      {{{P::kShearX, 0.6f, 5}, {P::kEqualize, 1.0f, -1}}},
      {{{P::kColor, 0.4f, 0}, {P::kEqualize, 0.6f, -1}}},
      {{{P::kEqualize, 0.4f, -1}, {P::kSolarize, 0.2f, 4}}},
      {{{P::kSolarize, 0.6f, 5}, {P::kAutoContrast, 0.6f, -1}}},
      {{{P::kInvert, 0.6f, -1}, {P::kEqualize, 1.0f, -1}}},
      {{{P::kColor, 0.6f, 4}, {P::kContrast, 1.0f, 8}}},
      {{{P::kEqualize, 0.8f, -1}, {P::kEqualize, 0.6f, -1}}},
  }};
  static constexpr std::array<SubPolicy, kAutoAugmentSubPolicies> kCifar10{{
      {{{P::kInvert, 0.1f, -1}, {P::kContrast, 0.2f, 6}}},
      {{{P::kRotate, 0.7f, 2}, {P::kTranslateX, 0.3f, 9}}},
      {{{P::kSharpness, 0.8f, 1}, {P::kSharpness, 0.9f, 3}}},
      {{{P::kShearY, 0.5f, 8}, {P::kTranslateY, 0.7f, 9}}},
      {{{P::kAutoContrast, 0.5f, -1}, {P::kEqualize, 0.9f, -1}}},
      {{{P::kShearY, 0.2f, 7}, {P::kPosterize, 0.3f, 7}}},
      {{{P::kColor, 0.4f, 3}, {P::kBrightness, 0.6f, 7}}},
      {{{P::kSharpness, 0.3f, 9}, {P::kBrightness, 0.7f, 9}}},
      {{{P::kEqualize, 0.6f, -1}, {P::kEqualize, 0.5f, -1}}},
      {{{P::kContrast, 0.6f, 7}, {P::kSharpness, 0.6f, 5}}},
      {{{P::kColor, 0.7f, 7}, {P::kTranslateX, 0.5f, 8}}},
      {{{P::kEqualize, 0.3f, -1}, {P::kAutoContrast, 0.4f, -1}}},
      {{{P::kTranslateY, 0.4f, 3}, {P::kSharpness, 0.2f, 6}}},
      {{{P::kBrightness, 0.9f, 6}, {P::kColor, 0.2f, 8}}},
      {{{P::kSolarize, 0.5f, 2}, {P::kInvert, 0.0f, -1}}},
      {{{P::kEqualize, 0.2f, -1}, {P::kAutoContrast, 0.6f, -1}}},
      {{{P::kEqualize, 0.2f, -1}, {P::kEqualize, 0.6f, -1}}},
      {{{P::kColor, 0.9f, 9}, {P::kEqualize, 0.6f, -1}}},
      {{{P::kAutoContrast, 0.8f, -1}, {P::kSolarize, 0.2f, 8}}},
      {{{P::kBrightness, 0.1f, 3}, {P::kColor, 0.7f, 0}}},
      {{{P::kSolarize, 0.4f, 5}, {P::kAutoContrast, 0.9f, -1}}},
      {{{P::kTranslateY, 0.9f, 9}, {P::kTranslateY, 0.7f, 9}}},
      {{{P::kAutoContrast, 0.9f, -1}, {P::kSolarize, 0.8f, 3}}},
      {{{P::kEqualize, 0.8f, -1}, {P::kInvert, 0.1f, -1}}},
      {{{P::kTranslateY, 0.7f, 9}, {P::kAutoContrast, 0.9f, -1}}},
  }};
  static constexpr std::array<SubPolicy, kAutoAugmentSubPolicies> kSvhn{{
      {{{P::kShearX, 0.9f, 4}, {P::kInvert, 0.2f, -1}}},
      {{{P::kShearY, 0.9f, 8}, {P::kInvert, 0.7f, -1}}},
      {{{P::kEqualize, 0.6f, -1}, {P::kSolarize, 0.6f, 6}}},
      {{{P::kInvert, 0.9f, -1}, {P::kEqualize, 0.6f, -1}}},
      {{{P::kEqualize, 0.6f, -1}, {P::kRotate, 0.9f, 3}}},
      {{{P::kShearX, 0.9f, 4}, {P::kAutoContrast, 0.8f, -1}}},
      {{{P::kShearY, 0.9f, 8}, {P::kInvert, 0.4f, -1}}},
      {{{P::kShearY, 0.9f, 5}, {P::kSolarize, 0.2f, 6}}},
      {{{P::kInvert, 0.9f, -1}, {P::kAutoContrast, 0.8f, -1}}},
      {{{P::kEqualize, 0.6f, -1}, {P::kRotate, 0.9f, 3}}},
      {{{P::kShearX, 0.9f, 4}, {P::kSolarize, 0.3f, 3}}},
      {{{P::kShearY, 0.8f, 8}, {P::kInvert, 0.7f, -1}}},
      {{{P::kEqualize, 0.9f, -1}, {P::kTranslateY, 0.6f, 6}}},
      {{{P::kInvert, 0.9f, -1}, {P::kEqualize, 0.6f, -1}}},
      {{{P::kContrast, 0.3f, 3}, {P::kRotate, 0.8f, 4}}},
      {{{P::kInvert, 0.8f, -1}, {P::kTranslateY, 0.0f, 2}}},
      {{{P::kShearY, 0.7f, 6}, {P::kSolarize, 0.4f, 8}}},
      {{{P::kInvert, 0.6f, -1}, {P::kRotate, 0.8f, 4}}},
      {{{P::kShearY, 0.3f, 7}, {P::kTranslateX, 0.9f, 3}}},
      {{{P::kShearX, 0.1f, 6}, {P::kInvert, 0.6f, -1}}},
      {{{P::kSolarize, 0.7f, 2}, {P::kTranslateY, 0.6f, 7}}},
      {{{P::kShearY, 0.8f, 4}, {P::kInvert, 0.8f, -1}}},
      {{{P::kShearX, 0.7f, 9}, {P::kTranslateY, 0.8f, 3}}},
      {{{P::kShearY, 0.8f, 5}, {P::kAutoContrast, 0.7f, -1}}},
      {{{P::kShearX, 0.7f, 2}, {P::kInvert, 0.1f, -1}}},
  }};
  switch (policy) {
    case AutoAugmentPolicy::kImageNet:
      return kImageNet;
    case AutoAugmentPolicy::kCifar10:
      return kCifar10;
    case AutoAugmentPolicy::kSvhn:
      return kSvhn;
  }
  return kImageNet;
}

OpCall PolicyCall(PolicyOp op, double magnitude, Interpolation interpolation,
                  const std::array<uint8_t, 3>& fill, bool fill_none) {
  OpCall call;
  call.policy_op = op;
  call.magnitude = magnitude;
  call.affine.interpolation = interpolation;
  call.affine.fill = fill;
  call.fill_none = fill_none;
  switch (op) {
    case P::kIdentity:
      call.fn = OpFn::kIdentity;
      break;
    case P::kShearX:
    case P::kShearY: {
      // torchvision shears by atan(magnitude) in degrees, about the
      // top-left corner (center=[0, 0]).
      const double shear = std::atan(magnitude) * 180.0 / kPi;
      call.fn = OpFn::kAffine;
      (op == P::kShearX ? call.affine.shear_x : call.affine.shear_y) = shear;
      call.affine.center_set = true;
      break;
    }
    case P::kTranslateX:
    case P::kTranslateY:
      // int(magnitude): truncation toward zero.
      call.fn = OpFn::kAffine;
      (op == P::kTranslateX ? call.affine.translate_x
                            : call.affine.translate_y) =
          static_cast<float>(static_cast<int>(magnitude));
      break;
    case P::kRotate:
      call.fn = OpFn::kRotate;
      call.affine.angle = static_cast<float>(magnitude);
      break;
    case P::kBrightness:
      call.fn = OpFn::kAdjustBrightness;
      call.factor = 1.0 + magnitude;
      break;
    case P::kColor:
      call.fn = OpFn::kAdjustSaturation;
      call.factor = 1.0 + magnitude;
      break;
    case P::kContrast:
      call.fn = OpFn::kAdjustContrast;
      call.factor = 1.0 + magnitude;
      break;
    case P::kSharpness:
      call.fn = OpFn::kAdjustSharpness;
      call.factor = 1.0 + magnitude;
      break;
    case P::kPosterize:
      call.fn = OpFn::kPosterize;
      call.bits = static_cast<int>(magnitude);
      break;
    case P::kSolarize:
      call.fn = OpFn::kSolarize;
      call.threshold = magnitude;
      break;
    case P::kAutoContrast:
      call.fn = OpFn::kAutocontrast;
      break;
    case P::kEqualize:
      call.fn = OpFn::kEqualize;
      break;
    case P::kInvert:
      call.fn = OpFn::kInvert;
      break;
    case P::kNone:
      break;
  }
  return call;
}

}  // namespace batchd::server::augment
