// AugmentOptions: a plan's augmentation as its users write it (the crop's
// interpolation by name, a text-format list of ops, one of torchvision's
// classification-reference policies by name), and the batchd.v1.Pipeline
// fields it sets. batchd-client's flags and the Python module's
// LoaderArgs both go through ApplyAugmentOptions, so one spelling makes
// one plan.
//
//   AugmentOptions options;
//   options.interpolation = "bicubic";
//   options.auto_augment = "ra";
//   options.augment = "augment { random_grayscale { p: 0.2 } }";
//   absl::Status s = ApplyAugmentOptions(options, plan.mutable_pipeline());
//
// Plans are written in one canonical form: a field that equals its default
// (torchvision's, as augment.proto documents it) is left unset, so equal
// augmentations make byte-equal plans, and a plan without augmentation is
// the plan an older client sends.
//
// Pure functions; thread-safe. The daemon checks the ops' ranges.
#ifndef BATCHD_CLIENT_AUGMENT_OPTIONS_H_
#define BATCHD_CLIENT_AUGMENT_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "batchd/v1/augment.pb.h"
#include "batchd/v1/data.pb.h"

namespace batchd::client {

// torchvision's classification reference defaults (references/
// classification/train.py): --ra-magnitude, --augmix-severity.
inline constexpr uint32_t kDefaultRaMagnitude = 9;
inline constexpr uint32_t kDefaultAugmixSeverity = 3;

struct AugmentOptions {
  // How the crop's window is resized: "bilinear" (default) or "bicubic".
  std::string interpolation = "bilinear";
  // One of torchvision's reference policies, first in Pipeline.augment:
  // "" (none), "ta_wide", "ra", "augmix", "imagenet", "cifar10", "svhn".
  std::string auto_augment;
  // RandAugment's magnitude with auto_augment "ra", 0..30.
  uint32_t ra_magnitude = kDefaultRaMagnitude;
  // AugMix's severity with auto_augment "augmix", 1..10.
  uint32_t augmix_severity = kDefaultAugmixSeverity;
  // Pipeline.augment entries in protobuf text format, appended after the
  // policy, e.g. "augment { random_grayscale { p: 0.2 } }"; it may also
  // hold one `erasing { ... }` and one `mix { ... }` (Pipeline.erasing,
  // Pipeline.mix), which take precedence over the flags below.
  std::string augment;
  // torchvision's train.py flags for the trainer-side recipe:
  // --random-erase P (RandomErasing(p=P) after Normalize; 0: off),
  // --mixup-alpha and --cutmix-alpha (0: off; either on needs num_classes),
  // --label-smoothing (applied to the mix's soft labels; needs a mix).
  double random_erase = 0;
  double mixup_alpha = 0;
  double cutmix_alpha = 0;
  double label_smoothing = 0;
  uint32_t num_classes = 0;
};

// Sets `pipeline`'s interpolation, appends its augment entries and sets
// its erasing and mix. INVALID_ARGUMENT naming the option (interpolation,
// auto_augment, ra_magnitude, augmix_severity, augment, random_erase,
// mixup_alpha, cutmix_alpha, label_smoothing, num_classes) and what is
// wrong with it; the daemon checks the ranges of erasing and mix.
absl::Status ApplyAugmentOptions(const AugmentOptions& options,
                                 batchd::v1::Pipeline* pipeline);

// "bilinear" -> INTERPOLATION_UNSPECIFIED (the crop's default),
// "bicubic" -> INTERPOLATION_BICUBIC; anything else is INVALID_ARGUMENT.
absl::StatusOr<batchd::v1::Interpolation> ParseCropInterpolation(
    absl::string_view name);

// The policy torchvision's ClassificationPresetTrain adds for
// --auto-augment `name`. The reference passes the crop's interpolation to
// the policy; the ops take nearest or bilinear only, so the policy is
// bilinear for a bilinear or a bicubic crop (docs/augment.md says what
// that changes).
absl::StatusOr<batchd::v1::Augment> ReferencePolicy(absl::string_view name,
                                                    uint32_t ra_magnitude,
                                                    uint32_t augmix_severity);

// Appends the entries of `text` (Pipeline text format holding only
// `augment { ... }` entries, and at most one `erasing` and one `mix`; ""
// holds none) to `pipeline`'s augment, and sets its erasing and mix when
// the text has them. INVALID_ARGUMENT with the parser's line, column and
// message, or naming the other field the text sets.
absl::Status ParseAugmentList(absl::string_view text,
                              batchd::v1::Pipeline* pipeline);

// Sets `plan`'s views (Plan.views) from `text`: text-format `views { ...
// }` entries only ("" leaves the plan alone). With views the pipeline's
// transform is cleared: each group has its own crop. INVALID_ARGUMENT
// with the parser's line, column and message, or naming the other field
// the text sets; the daemon checks the groups' ranges.
absl::Status ParseViewList(absl::string_view text, batchd::v1::Plan* plan);

}  // namespace batchd::client

#endif  // BATCHD_CLIENT_AUGMENT_OPTIONS_H_
