#include "client/augment_options.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"

namespace batchd::client {
namespace {

constexpr uint32_t kReferenceMagnitudeBins = 31;  // RandAugment's default
constexpr uint32_t kMaxAugmixSeverity = 10;

// Keeps the text format parser's first error, with its position.
class FirstError : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    if (!message_.empty()) return;
    // The parser counts from 0.
    message_ = absl::StrFormat("line %d column %d: %s", line + 1, column + 1,
                               message);
  }
  const std::string& message() const { return message_; }

 private:
  std::string message_;
};

}  // namespace

absl::StatusOr<batchd::v1::Interpolation> ParseCropInterpolation(
    absl::string_view name) {
  if (name == "bilinear") return batchd::v1::INTERPOLATION_UNSPECIFIED;
  if (name == "bicubic") return batchd::v1::INTERPOLATION_BICUBIC;
  return absl::InvalidArgumentError(absl::StrCat(
      "interpolation must be bilinear or bicubic, not '", name, "'"));
}

absl::StatusOr<batchd::v1::Augment> ReferencePolicy(absl::string_view name,
                                                    uint32_t ra_magnitude,
                                                    uint32_t augmix_severity) {
  constexpr auto kBilinear = batchd::v1::INTERPOLATION_BILINEAR;
  batchd::v1::Augment augment;
  if (name == "ta_wide") {
    augment.mutable_trivial_augment_wide()->set_interpolation(kBilinear);
  } else if (name == "ra") {
    if (ra_magnitude >= kReferenceMagnitudeBins) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "ra_magnitude must be 0..%d (RandAugment's %d magnitude bins), "
          "not %d",
          kReferenceMagnitudeBins - 1, kReferenceMagnitudeBins, ra_magnitude));
    }
    batchd::v1::RandAugment* ra = augment.mutable_rand_augment();
    if (ra_magnitude != kDefaultRaMagnitude) ra->set_magnitude(ra_magnitude);
    ra->set_interpolation(kBilinear);
  } else if (name == "augmix") {
    if (augmix_severity < 1 || augmix_severity > kMaxAugmixSeverity) {
      return absl::InvalidArgumentError(
          absl::StrFormat("augmix_severity must be 1..%d, not %d",
                          kMaxAugmixSeverity, augmix_severity));
    }
    batchd::v1::AugMix* augmix = augment.mutable_aug_mix();
    if (augmix_severity != kDefaultAugmixSeverity) {
      augmix->set_severity(augmix_severity);
    }
    augmix->set_interpolation(kBilinear);
  } else if (name == "imagenet" || name == "cifar10" || name == "svhn") {
    batchd::v1::AutoAugment* auto_augment = augment.mutable_auto_augment();
    // Unset is ImageNet's.
    if (name == "cifar10") {
      auto_augment->set_policy(batchd::v1::AutoAugment::POLICY_CIFAR10);
    } else if (name == "svhn") {
      auto_augment->set_policy(batchd::v1::AutoAugment::POLICY_SVHN);
    }
    auto_augment->set_interpolation(kBilinear);
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "auto_augment must be ta_wide, ra, augmix, imagenet, cifar10 or "
        "svhn, not '", name, "'"));
  }
  return augment;
}

absl::Status ParseAugmentList(absl::string_view text,
                              batchd::v1::Pipeline* pipeline) {
  batchd::v1::Pipeline parsed;
  google::protobuf::TextFormat::Parser parser;
  FirstError error;
  parser.RecordErrorsTo(&error);
  if (!parser.ParseFromString(std::string(text), &parsed)) {
    return absl::InvalidArgumentError(
        absl::StrCat("augment: ", error.message().empty()
                                      ? std::string("not a text-format list")
                                      : error.message()));
  }
  batchd::v1::Pipeline rest = parsed;
  rest.clear_augment();
  rest.clear_erasing();
  rest.clear_mix();
  std::vector<const google::protobuf::FieldDescriptor*> others;
  rest.GetReflection()->ListFields(rest, &others);
  if (!others.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "augment: only `augment { ... }` entries (and `erasing { ... }`, "
        "`mix { ... }`) may be given here, not '",
        others.front()->name(), "'"));
  }
  for (int i = 0; i < parsed.augment_size(); ++i) {
    if (parsed.augment(i).op_case() == batchd::v1::Augment::OP_NOT_SET) {
      return absl::InvalidArgumentError(absl::StrCat(
          "augment: entry ", i + 1,
          " names no op (e.g. augment { trivial_augment_wide {} })"));
    }
  }
  for (batchd::v1::Augment& entry : *parsed.mutable_augment()) {
    *pipeline->add_augment() = std::move(entry);
  }
  if (parsed.has_erasing()) *pipeline->mutable_erasing() = parsed.erasing();
  if (parsed.has_mix()) *pipeline->mutable_mix() = parsed.mix();
  return absl::OkStatus();
}

namespace {

// torchvision's train.py flags as Pipeline.erasing and Pipeline.mix.
absl::Status ApplyReferenceFlags(const AugmentOptions& options,
                                 batchd::v1::Pipeline* pipeline) {
  if (options.random_erase != 0) {
    if (!(options.random_erase > 0 && options.random_erase <= 1)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "random_erase is ", options.random_erase,
          "; it is RandomErasing's probability: use 0 (off) to 1"));
    }
    pipeline->mutable_erasing()->set_p(
        static_cast<float>(options.random_erase));
  }
  const bool mix = options.mixup_alpha != 0 || options.cutmix_alpha != 0;
  if (!mix) {
    if (options.label_smoothing != 0) {
      return absl::InvalidArgumentError(
          "label_smoothing is applied to the soft labels of MixUp/CutMix; "
          "without mixup_alpha or cutmix_alpha, give it to the loss instead "
          "(torch.nn.CrossEntropyLoss(label_smoothing=...))");
    }
    return absl::OkStatus();
  }
  if (options.mixup_alpha < 0 || options.cutmix_alpha < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mixup_alpha and cutmix_alpha must be > 0 (or 0 for off), not ",
        options.mixup_alpha < 0 ? options.mixup_alpha : options.cutmix_alpha));
  }
  if (options.num_classes == 0) {
    return absl::InvalidArgumentError(
        "num_classes is needed with mixup_alpha or cutmix_alpha: the soft "
        "labels have one column per class (e.g. 1000 for ImageNet)");
  }
  batchd::v1::MixupCutmix* out = pipeline->mutable_mix();
  if (options.mixup_alpha > 0) {
    out->set_mixup_alpha(static_cast<float>(options.mixup_alpha));
  }
  if (options.cutmix_alpha > 0) {
    out->set_cutmix_alpha(static_cast<float>(options.cutmix_alpha));
  }
  out->set_label_smoothing(static_cast<float>(options.label_smoothing));
  out->set_num_classes(options.num_classes);
  return absl::OkStatus();
}

}  // namespace

absl::Status ApplyAugmentOptions(const AugmentOptions& options,
                                 batchd::v1::Pipeline* pipeline) {
  ASSIGN_OR_RETURN(const batchd::v1::Interpolation interpolation,
                   ParseCropInterpolation(options.interpolation));
  pipeline->set_interpolation(interpolation);
  if (options.ra_magnitude != kDefaultRaMagnitude &&
      options.auto_augment != "ra") {
    return absl::InvalidArgumentError(
        "ra_magnitude applies to auto_augment=ra only");
  }
  if (options.augmix_severity != kDefaultAugmixSeverity &&
      options.auto_augment != "augmix") {
    return absl::InvalidArgumentError(
        "augmix_severity applies to auto_augment=augmix only");
  }
  if (!options.auto_augment.empty()) {
    ASSIGN_OR_RETURN(batchd::v1::Augment policy,
                     ReferencePolicy(options.auto_augment,
                                     options.ra_magnitude,
                                     options.augmix_severity));
    *pipeline->add_augment() = std::move(policy);
  }
  RETURN_IF_ERROR(ApplyReferenceFlags(options, pipeline));
  return ParseAugmentList(options.augment, pipeline);
}

absl::Status ParseViewList(absl::string_view text, batchd::v1::Plan* plan) {
  if (text.empty()) return absl::OkStatus();
  batchd::v1::Plan parsed;
  google::protobuf::TextFormat::Parser parser;
  FirstError error;
  parser.RecordErrorsTo(&error);
  if (!parser.ParseFromString(std::string(text), &parsed)) {
    return absl::InvalidArgumentError(
        absl::StrCat("views: ", error.message().empty()
                                    ? std::string("not a text-format list")
                                    : error.message()));
  }
  batchd::v1::Plan rest = parsed;
  rest.clear_views();
  std::vector<const google::protobuf::FieldDescriptor*> others;
  rest.GetReflection()->ListFields(rest, &others);
  if (!others.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "views: only `views { ... }` entries may be given here, not '",
        others.front()->name(), "'"));
  }
  *plan->mutable_views() = parsed.views();
  plan->mutable_pipeline()->clear_transform();
  return absl::OkStatus();
}

}  // namespace batchd::client
