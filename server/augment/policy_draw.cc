// AugmentPlan::Draw: each op's parameters from the sample's generator, with
// torchvision's distributions (policy.h lists them).
#include <algorithm>
#include <cmath>

#include "server/augment/distributions.h"
#include "server/augment/policy.h"

namespace batchd::server::augment {
namespace {

namespace v1 = batchd::v1;
using common::SampleRandom;

// torch.randint(2, (1,)): true negates a signed op's magnitude.
bool Negate(SampleRandom& rng) { return rng.UniformInt(2) == 1; }

OpCall Call(const AugmentOp& op, PolicyOp which, double bin, double magnitude) {
  OpCall call =
      PolicyCall(which, magnitude, op.interpolation, op.fill, op.fill_none);
  call.bin = bin;
  return call;
}

void DrawTrivialAugmentWide(const AugmentOp& op, SampleRandom& rng, int width,
                            int height, std::vector<OpCall>* out) {
  const std::vector<PolicyOp>& ops =
      SpaceOps(OpSpace::kTrivialAugmentWide, true);
  const PolicyOp which = ops[rng.UniformInt(ops.size())];
  double magnitude = 0;
  int bin = -1;
  if (HasMagnitudes(which)) {
    bin = static_cast<int>(
        rng.UniformInt(static_cast<uint64_t>(op.num_magnitude_bins)));
    magnitude = Magnitude(OpSpace::kTrivialAugmentWide, which,
                          op.num_magnitude_bins, bin, width, height);
  }
  if (IsSigned(which) && Negate(rng)) magnitude = -magnitude;
  out->push_back(Call(op, which, bin, magnitude));
}

void DrawRandAugment(const AugmentOp& op, SampleRandom& rng, int width,
                     int height, std::vector<OpCall>* out) {
  const std::vector<PolicyOp>& ops = SpaceOps(OpSpace::kRandAugment, true);
  const double top = op.num_magnitude_bins - 1;
  for (int i = 0; i < op.num_ops; ++i) {
    const PolicyOp which = ops[rng.UniformInt(ops.size())];
    double magnitude = 0;
    double bin = -1;
    if (HasMagnitudes(which)) {
      bin = op.magnitude;
      if (op.magnitude_std > 0) {
        // timm's mstd: a fresh bin per op, clipped to the table.
        bin = std::clamp(op.magnitude + op.magnitude_std * StandardNormal(rng),
                         0.0, top);
        magnitude =
            FractionalMagnitude(OpSpace::kRandAugment, which,
                                op.num_magnitude_bins, bin, width, height);
      } else {
        magnitude =
            Magnitude(OpSpace::kRandAugment, which, op.num_magnitude_bins,
                      op.magnitude, width, height);
      }
    }
    if (IsSigned(which) && Negate(rng)) magnitude = -magnitude;
    out->push_back(Call(op, which, bin, magnitude));
  }
}

void DrawAutoAugment(const AugmentOp& op, SampleRandom& rng, int width,
                     int height, std::vector<OpCall>* out) {
  // get_params: the sub-policy, two probabilities, two signs.
  const uint64_t index = rng.UniformInt(kAutoAugmentSubPolicies);
  const SubPolicy& sub = SubPolicies(op.policy)[index];
  const double u[2] = {rng.Uniform(), rng.Uniform()};
  const bool negate[2] = {Negate(rng), Negate(rng)};
  for (int i = 0; i < 2; ++i) {
    const SubPolicyOp& step = sub[static_cast<size_t>(i)];
    if (!(u[i] < step.probability)) continue;
    double magnitude =
        step.bin >= 0 ? Magnitude(OpSpace::kAutoAugment, step.op,
                                  kAutoAugmentBins, step.bin, width, height)
                      : 0.0;
    if (IsSigned(step.op) && negate[i]) magnitude = -magnitude;
    OpCall call = Call(op, step.op, step.bin, magnitude);
    call.sub_policy = static_cast<int>(index);
    call.position = i;
    out->push_back(call);
  }
}

void DrawAugMix(const AugmentOp& op, SampleRandom& rng, int width, int height,
                std::vector<OpCall>* out) {
  OpCall mix;
  mix.fn = OpFn::kAugMix;
  // m ~ Dirichlet(alpha, alpha), i.e. Beta(alpha, alpha); the chains'
  // weights are Dirichlet(alpha, ...) times m[1], in float32.
  const std::vector<double> m = SymmetricDirichlet(rng, op.alpha, 2);
  const std::vector<double> w =
      SymmetricDirichlet(rng, op.alpha, op.mixture_width);
  const float augmented = static_cast<float>(m[1]);
  mix.mix_weights.push_back(static_cast<float>(m[0]));
  for (double weight : w) {
    mix.mix_weights.push_back(static_cast<float>(weight) * augmented);
  }
  const std::vector<PolicyOp>& ops = SpaceOps(OpSpace::kAugMix, op.all_ops);
  for (int c = 0; c < op.mixture_width; ++c) {
    const int depth = op.chain_depth > 0
                          ? op.chain_depth
                          : 1 + static_cast<int>(rng.UniformInt(3));
    std::vector<OpCall>& chain = mix.chains.emplace_back();
    for (int d = 0; d < depth; ++d) {
      const PolicyOp which = ops[rng.UniformInt(ops.size())];
      double magnitude = 0;
      int bin = -1;
      if (HasMagnitudes(which)) {
        bin = static_cast<int>(
            rng.UniformInt(static_cast<uint64_t>(op.severity)));
        magnitude =
            Magnitude(OpSpace::kAugMix, which, kAugMixBins, bin, width, height);
      }
      if (IsSigned(which) && Negate(rng)) magnitude = -magnitude;
      chain.push_back(Call(op, which, bin, magnitude));
    }
  }
  out->push_back(std::move(mix));
}

void DrawColorJitter(const AugmentOp& op, SampleRandom& rng,
                     std::vector<OpCall>* out) {
  if (!Bernoulli(rng, op.p)) return;
  // get_params: the order first, then each enabled factor.
  const std::vector<int> order = Permutation(rng, 4);
  double factor[4] = {0, 0, 0, 0};
  for (size_t i = 0; i < 4; ++i) {
    if (op.jitter_enabled[i]) {
      factor[i] = UniformFloat(rng, op.jitter_min[i], op.jitter_max[i]);
    }
  }
  static constexpr OpFn kFns[4] = {OpFn::kAdjustBrightness,
                                   OpFn::kAdjustContrast,
                                   OpFn::kAdjustSaturation, OpFn::kAdjustHue};
  for (int index : order) {
    if (!op.jitter_enabled[static_cast<size_t>(index)]) continue;
    OpCall call;
    call.fn = kFns[index];
    call.factor = factor[index];
    out->push_back(call);
  }
}

void DrawRandomAffine(const AugmentOp& op, SampleRandom& rng, int width,
                      int height, std::vector<OpCall>* out) {
  OpCall call;
  call.fn = OpFn::kAffine;
  call.affine.interpolation = op.interpolation;
  call.affine.fill = op.fill;
  call.fill_none = op.fill_none;
  AffineParams& a = call.affine;
  a.angle = UniformFloat(rng, op.degrees_min, op.degrees_max);
  if (op.translate_x > 0 || op.translate_y > 0) {
    // int(round(uniform_(-max_d, max_d))): Python's round, half to even.
    const double max_dx = op.translate_x * width;
    const double max_dy = op.translate_y * height;
    a.translate_x =
        static_cast<float>(std::nearbyint(UniformFloat(rng, -max_dx, max_dx)));
    a.translate_y =
        static_cast<float>(std::nearbyint(UniformFloat(rng, -max_dy, max_dy)));
  }
  if (op.scale_set) a.scale = UniformFloat(rng, op.scale_min, op.scale_max);
  const bool shear_y = op.shear_y_min != 0 || op.shear_y_max != 0;
  if (shear_y || op.shear_x_min != 0 || op.shear_x_max != 0) {
    a.shear_x = UniformFloat(rng, op.shear_x_min, op.shear_x_max);
    if (shear_y) a.shear_y = UniformFloat(rng, op.shear_y_min, op.shear_y_max);
  }
  out->push_back(call);
}

// The stand-alone ops that run with probability p and draw nothing else.
void DrawWithProbability(const AugmentOp& op, OpFn fn, SampleRandom& rng,
                         std::vector<OpCall>* out) {
  if (!Bernoulli(rng, op.p)) return;
  OpCall call;
  call.fn = fn;
  call.threshold = op.threshold;
  call.bits = op.bits;
  out->push_back(call);
}

}  // namespace

std::vector<OpCall> AugmentPlan::Draw(SampleRandom& rng, int width,
                                      int height) const {
  std::vector<OpCall> out;
  for (const AugmentOp& op : ops_) {
    switch (op.kind) {
      case v1::Augment::kTrivialAugmentWide:
        DrawTrivialAugmentWide(op, rng, width, height, &out);
        break;
      case v1::Augment::kRandAugment:
        DrawRandAugment(op, rng, width, height, &out);
        break;
      case v1::Augment::kAutoAugment:
        DrawAutoAugment(op, rng, width, height, &out);
        break;
      case v1::Augment::kAugMix:
        DrawAugMix(op, rng, width, height, &out);
        break;
      case v1::Augment::kColorJitter:
        DrawColorJitter(op, rng, &out);
        break;
      case v1::Augment::kRandomGrayscale:
        DrawWithProbability(op, OpFn::kGrayscale, rng, &out);
        break;
      case v1::Augment::kGaussianBlur:
        if (Bernoulli(rng, op.p)) {
          OpCall call;
          call.fn = OpFn::kGaussianBlur;
          call.kernel_x = op.kernel_x;
          call.kernel_y = op.kernel_y;
          call.sigma = UniformFloat(rng, op.sigma_min, op.sigma_max);
          out.push_back(call);
        }
        break;
      case v1::Augment::kRandomSolarize:
        DrawWithProbability(op, OpFn::kSolarize, rng, &out);
        break;
      case v1::Augment::kRandomPosterize:
        DrawWithProbability(op, OpFn::kPosterize, rng, &out);
        break;
      case v1::Augment::kRandomAutocontrast:
        DrawWithProbability(op, OpFn::kAutocontrast, rng, &out);
        break;
      case v1::Augment::kRandomEqualize:
        DrawWithProbability(op, OpFn::kEqualize, rng, &out);
        break;
      case v1::Augment::kRandomInvert:
        DrawWithProbability(op, OpFn::kInvert, rng, &out);
        break;
      case v1::Augment::kRandomVerticalFlip:
        DrawWithProbability(op, OpFn::kVerticalFlip, rng, &out);
        break;
      case v1::Augment::kRandomRotation: {
        OpCall call;
        call.fn = OpFn::kRotate;
        call.affine.angle = UniformFloat(rng, op.degrees_min, op.degrees_max);
        call.affine.interpolation = op.interpolation;
        call.affine.fill = op.fill;
        call.fill_none = op.fill_none;
        out.push_back(call);
        break;
      }
      case v1::Augment::kRandomAffine:
        DrawRandomAffine(op, rng, width, height, &out);
        break;
      case v1::Augment::OP_NOT_SET:
        break;
    }
  }
  return out;
}

}  // namespace batchd::server::augment
