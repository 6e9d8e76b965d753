#include "server/plan/erase_mix.h"

#include <algorithm>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/augment/distributions.h"

namespace batchd::server {
namespace {

absl::Status Invalid(const std::string& message) {
  return absl::InvalidArgumentError(message);
}

absl::Status CheckProbability(const char* field, double value) {
  if (!(value >= 0 && value <= 1)) {
    return Invalid(absl::StrCat(field, " is ", value,
                                "; it is a probability: use 0..1"));
  }
  return absl::OkStatus();
}

absl::Status CheckAlpha(const char* field, double value) {
  if (!(value > 0 && value <= kMaxMixAlpha)) {
    return Invalid(absl::StrCat(
        field, " is ", value, "; Beta(alpha, alpha) needs 0 < alpha <= ",
        kMaxMixAlpha, " (torchvision's recipe: 0.2 for MixUp, 1.0 for "
        "CutMix); leave it unset to turn that mix off"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::optional<ErasingSpec>> ResolveErasing(
    const batchd::v1::Pipeline& pipeline) {
  if (!pipeline.has_erasing()) return std::optional<ErasingSpec>();
  const batchd::v1::RandomErasing& in = pipeline.erasing();
  ErasingSpec spec;
  if (in.has_p()) spec.p = in.p();
  if (in.has_scale_min()) spec.scale_min = in.scale_min();
  if (in.has_scale_max()) spec.scale_max = in.scale_max();
  if (in.has_ratio_min()) spec.ratio_min = in.ratio_min();
  if (in.has_ratio_max()) spec.ratio_max = in.ratio_max();
  spec.random_value = in.random_value();
  if (absl::Status s = CheckProbability("pipeline.erasing.p", spec.p);
      !s.ok()) {
    return s;
  }
  if (!(spec.scale_min > 0 && spec.scale_min <= spec.scale_max &&
        spec.scale_max <= 1)) {
    return Invalid(absl::StrCat(
        "pipeline.erasing.scale_min/scale_max is [", spec.scale_min, ", ",
        spec.scale_max, "]; it needs 0 < scale_min <= scale_max <= 1 (a "
        "fraction of the image's area; default [0.02, 0.33])"));
  }
  if (!(spec.ratio_min > 0 && spec.ratio_min <= spec.ratio_max &&
        std::isfinite(spec.ratio_max))) {
    return Invalid(absl::StrCat(
        "pipeline.erasing.ratio_min/ratio_max is [", spec.ratio_min, ", ",
        spec.ratio_max, "]; it needs 0 < ratio_min <= ratio_max, finite "
        "(height / width; default [0.3, 3.3])"));
  }
  return std::optional<ErasingSpec>(spec);
}

absl::StatusOr<std::optional<MixSpec>> ResolveMix(
    const batchd::v1::Pipeline& pipeline, uint64_t dataset_classes,
    uint32_t batch_size) {
  if (!pipeline.has_mix()) return std::optional<MixSpec>();
  const batchd::v1::MixupCutmix& in = pipeline.mix();
  MixSpec spec;
  if (!in.has_mixup_alpha() && !in.has_cutmix_alpha()) {
    return Invalid(
        "pipeline.mix has neither mixup_alpha nor cutmix_alpha; set one or "
        "both (> 0), or leave pipeline.mix unset");
  }
  if (in.has_mixup_alpha()) {
    if (absl::Status s = CheckAlpha("pipeline.mix.mixup_alpha",
                                    in.mixup_alpha());
        !s.ok()) {
      return s;
    }
    spec.mixup_alpha = in.mixup_alpha();
  }
  if (in.has_cutmix_alpha()) {
    if (absl::Status s = CheckAlpha("pipeline.mix.cutmix_alpha",
                                    in.cutmix_alpha());
        !s.ok()) {
      return s;
    }
    spec.cutmix_alpha = in.cutmix_alpha();
  }
  if (in.has_switch_prob()) spec.switch_prob = in.switch_prob();
  if (in.has_prob()) spec.prob = in.prob();
  if (absl::Status s =
          CheckProbability("pipeline.mix.switch_prob", spec.switch_prob);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckProbability("pipeline.mix.prob", spec.prob);
      !s.ok()) {
    return s;
  }
  spec.label_smoothing = in.label_smoothing();
  if (!(spec.label_smoothing >= 0 && spec.label_smoothing < 1)) {
    return Invalid(absl::StrCat("pipeline.mix.label_smoothing is ",
                                spec.label_smoothing,
                                "; it must be 0 <= e < 1 (e.g. 0.1)"));
  }
  if (in.num_classes() == 0 || in.num_classes() > dataset_classes) {
    return Invalid(absl::StrCat(
        "pipeline.mix.num_classes is ", in.num_classes(),
        "; it must be 1..", dataset_classes,
        " (the dataset's classes: the width of the soft labels)"));
  }
  spec.num_classes = in.num_classes();
  if (uint64_t{batch_size} * spec.num_classes > kMaxSoftLabelValues) {
    return Invalid(absl::StrCat(
        "pipeline.mix.num_classes ", spec.num_classes, " with batch_size ",
        batch_size, " makes ", uint64_t{batch_size} * spec.num_classes,
        " soft-label values a batch; at most ", kMaxSoftLabelValues,
        " (256 MiB of float32): lower batch_size"));
  }
  return std::optional<MixSpec>(spec);
}

std::string ErasingFingerprint(const ErasingSpec& spec) {
  return absl::StrFormat("p=%a scale=%a..%a ratio=%a..%a random=%d", spec.p,
                         spec.scale_min, spec.scale_max, spec.ratio_min,
                         spec.ratio_max, spec.random_value ? 1 : 0);
}

std::string MixFingerprint(const MixSpec& spec) {
  return absl::StrFormat(
      "mixup=%a cutmix=%a switch=%a smoothing=%a classes=%u prob=%a",
      spec.mixup_alpha, spec.cutmix_alpha, spec.switch_prob,
      spec.label_smoothing, spec.num_classes, spec.prob);
}

std::optional<batchd::v1::ErasedRegion> DrawErasing(
    const ErasingSpec& spec, int height, int width, uint32_t position,
    common::SampleRandom& rng, common::SampleRandom& noise_rng) {
  if (!augment::Bernoulli(rng, spec.p)) return std::nullopt;
  const double area = static_cast<double>(height) * width;
  // torch.log(torch.tensor(ratio)): float32.
  const float log_ratio_min = std::log(static_cast<float>(spec.ratio_min));
  const float log_ratio_max = std::log(static_cast<float>(spec.ratio_max));
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double erase_area =
        area * augment::UniformFloat(rng, spec.scale_min, spec.scale_max);
    const double aspect = std::exp(
        augment::UniformFloat(rng, log_ratio_min, log_ratio_max));
    // Python's round(): half to even, as nearbyint in the default mode.
    const double h = std::nearbyint(std::sqrt(erase_area * aspect));
    const double w = std::nearbyint(std::sqrt(erase_area / aspect));
    if (!(h < height && w < width)) continue;
    const uint32_t top = static_cast<uint32_t>(
        rng.UniformInt(static_cast<uint64_t>(height - h + 1)));
    const uint32_t left = static_cast<uint32_t>(
        rng.UniformInt(static_cast<uint64_t>(width - w + 1)));
    if (h < 1 || w < 1) return std::nullopt;  // erases nothing
    batchd::v1::ErasedRegion region;
    region.set_position(position);
    region.set_top(top);
    region.set_left(left);
    region.set_height(static_cast<uint32_t>(h));
    region.set_width(static_cast<uint32_t>(w));
    if (spec.random_value) {
      region.set_noise(true);
      const uint64_t low = noise_rng.NextU32();
      region.set_noise_key(low | (uint64_t{noise_rng.NextU32()} << 32));
    }
    return region;
  }
  return std::nullopt;
}

batchd::v1::BatchMix DrawMix(const MixSpec& spec, int height, int width,
                             common::SampleRandom& rng) {
  batchd::v1::BatchMix mix;
  mix.set_label_smoothing(static_cast<float>(spec.label_smoothing));
  mix.set_num_classes(spec.num_classes);
  mix.set_lambda(1.0);
  if (!augment::Bernoulli(rng, spec.prob)) return mix;
  const bool cutmix = spec.mixup_alpha > 0 && spec.cutmix_alpha > 0
                          ? augment::Bernoulli(rng, spec.switch_prob)
                          : spec.cutmix_alpha > 0;
  // torch._sample_dirichlet([alpha, alpha])[0], as the references draw it.
  const double lambda = augment::SymmetricDirichlet(
      rng, cutmix ? spec.cutmix_alpha : spec.mixup_alpha, 2)[0];
  if (!cutmix) {
    mix.set_kind(batchd::v1::BatchMix::KIND_MIXUP);
    mix.set_lambda(lambda);
    return mix;
  }
  // RandomCutmix: a box of half-sides int(r * W), int(r * H) with
  // r = sqrt(1 - lambda) / 2 around a uniform centre, clipped.
  const int64_t center_x = static_cast<int64_t>(rng.UniformInt(width));
  const int64_t center_y = static_cast<int64_t>(rng.UniformInt(height));
  const double r = 0.5 * std::sqrt(1.0 - lambda);
  const int64_t half_w = static_cast<int64_t>(r * width);
  const int64_t half_h = static_cast<int64_t>(r * height);
  const int64_t x1 = std::max<int64_t>(center_x - half_w, 0);
  const int64_t y1 = std::max<int64_t>(center_y - half_h, 0);
  const int64_t x2 = std::min<int64_t>(center_x + half_w, width);
  const int64_t y2 = std::min<int64_t>(center_y + half_h, height);
  mix.set_kind(batchd::v1::BatchMix::KIND_CUTMIX);
  mix.set_box_top(static_cast<uint32_t>(y1));
  mix.set_box_left(static_cast<uint32_t>(x1));
  mix.set_box_height(static_cast<uint32_t>(y2 - y1));
  mix.set_box_width(static_cast<uint32_t>(x2 - x1));
  mix.set_lambda(1.0 - static_cast<double>((x2 - x1) * (y2 - y1)) /
                           (static_cast<double>(width) * height));
  return mix;
}

}  // namespace batchd::server
