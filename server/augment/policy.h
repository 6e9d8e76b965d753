// AugmentPlan: a plan's Pipeline.augment (batchd.v1.Augment, augment.proto)
// checked and resolved, torchvision's defaults filled in; it draws each
// sample's concrete op calls (OpCall, op_call.h) from the sample's
// counter-based generator, with torchvision 0.14's distributions:
//
//   TrivialAugmentWide  op uniform over its 14 ops, bin uniform, sign 1/2
//   RandAugment         num_ops ops uniform with replacement at the fixed
//                       bin; magnitude_std > 0: bin ~ Normal(magnitude,
//                       std) clipped to [0, bins - 1] (timm), fractional
//                       bins interpolated (op_space.h)
//   AutoAugment         sub-policy uniform over 25, each op with its
//                       probability, sign 1/2
//   AugMix              Beta(alpha, alpha) and Dirichlet(alpha) weights
//                       (Gamma draws), depth 1..3 or fixed, ops uniform,
//                       bin uniform below severity, sign 1/2
//   ColorJitter         with p: a uniform order of the four (randperm),
//                       each enabled factor uniform in its range
//   the Random* ops     with p; RandomRotation's angle and RandomAffine's
//                       angle, translation (rounded half to even), scale
//                       and shears uniform, as their get_params
//
// An op that runs with probability p runs when a uniform draw in [0, 1)
// is below p. The draws differ from torch's generator, so batchd and
// torchvision agree in distribution (tested: policy_sampling_test.cc), and
// exactly on a sample once its calls are known (Describe,
// tests/augment/test_policy_replay.py).
//
//   absl::StatusOr<AugmentPlan> plan = AugmentPlan::Create(pipeline.augment());
//   common::SampleRandom rng(seed, epoch, sample,
//                            common::RandomPurpose::kAugmentOps);
//   std::vector<OpCall> calls = plan->Draw(rng, /*width=*/224,
//                                          /*height=*/224);
//   Apply(calls, image, &scratch);
//
// Immutable after Create; thread-safe.
#ifndef BATCHD_SERVER_AUGMENT_POLICY_H_
#define BATCHD_SERVER_AUGMENT_POLICY_H_

#include <array>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "batchd/v1/augment.pb.h"
#include "common/random.h"
#include "google/protobuf/repeated_ptr_field.h"
#include "server/augment/op_call.h"
#include "server/augment/op_space.h"

namespace batchd::server::augment {

// Most entries of Pipeline.augment.
inline constexpr int kMaxAugmentOps = 16;

// One resolved entry of Pipeline.augment: the proto's fields with the
// defaults filled in. Which fields matter depends on `kind`.
struct AugmentOp {
  batchd::v1::Augment::OpCase kind = batchd::v1::Augment::OP_NOT_SET;
  // The geometric ops' sampling and fill; fill_none: no fill given
  // (torchvision's fill=None, the policies' default).
  Interpolation interpolation = Interpolation::kNearest;
  std::array<uint8_t, 3> fill = {0, 0, 0};
  bool fill_none = true;
  // TrivialAugmentWide, RandAugment.
  int num_magnitude_bins = 31;
  int num_ops = 2;
  int magnitude = 9;
  double magnitude_std = 0;
  // AutoAugment.
  AutoAugmentPolicy policy = AutoAugmentPolicy::kImageNet;
  // AugMix; chain_depth 0 draws 1..3 per chain.
  int severity = 3;
  int mixture_width = 3;
  int chain_depth = 0;
  double alpha = 1;
  bool all_ops = true;
  // ColorJitter: brightness, contrast, saturation, hue; a disabled one
  // (0) is neither drawn nor applied.
  std::array<bool, 4> jitter_enabled = {false, false, false, false};
  std::array<double, 4> jitter_min = {0, 0, 0, 0};
  std::array<double, 4> jitter_max = {0, 0, 0, 0};
  // Probability the op runs (every op but the policies and the two
  // geometric ones).
  double p = 1;
  // GaussianBlur.
  int kernel_x = 0;
  int kernel_y = 0;
  double sigma_min = 0.1;
  double sigma_max = 2.0;
  // RandomSolarize, RandomPosterize.
  double threshold = 128;
  int bits = 4;
  // RandomRotation, RandomAffine (degrees); RandomAffine's translation
  // fractions, scale range (scale_set false: 1, nothing drawn) and shears.
  double degrees_min = 0;
  double degrees_max = 0;
  double translate_x = 0;
  double translate_y = 0;
  bool scale_set = false;
  double scale_min = 1;
  double scale_max = 1;
  double shear_x_min = 0;
  double shear_x_max = 0;
  double shear_y_min = 0;
  double shear_y_max = 0;
};

class AugmentPlan {
 public:
  // No ops: Draw returns nothing.
  AugmentPlan() = default;

  // Checks and resolves `ops`. INVALID_ARGUMENT naming the entry by its
  // position and op and the field, under `field` (the path of the repeated
  // field), e.g. "pipeline.augment[1].rand_augment.magnitude: 40 is out of
  // range 0..30 (num_magnitude_bins - 1)". With `image_side` > 0 (the
  // square output's side, pixels), a GaussianBlur kernel must fit it as
  // torchvision's reflect padding needs: (size - 1) / 2 < side.
  static absl::StatusOr<AugmentPlan> Create(
      const google::protobuf::RepeatedPtrField<batchd::v1::Augment>& ops,
      const std::string& field = "pipeline.augment", int image_side = 0);

  bool empty() const { return ops_.empty(); }
  const std::vector<AugmentOp>& ops() const { return ops_; }

  // The calls of one sample whose image (after the crop) is `width` x
  // `height`, in the plan's order. A pure function of `rng`'s state and
  // the image size; advances `rng`.
  std::vector<OpCall> Draw(common::SampleRandom& rng, int width,
                           int height) const;

  // Every resolved parameter in a canonical text (floating-point values
  // exact, in hex), "" for no ops: two plans with the same fingerprint
  // draw the same calls. Part of the plan's fingerprint.
  const std::string& fingerprint() const { return fingerprint_; }

 private:
  std::vector<AugmentOp> ops_;
  std::string fingerprint_;
};

}  // namespace batchd::server::augment

#endif  // BATCHD_SERVER_AUGMENT_POLICY_H_
