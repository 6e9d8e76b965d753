#include "server/plan/views.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/sampler.h"

namespace batchd::server {
namespace {

absl::Status Invalid(const std::string& message) {
  return absl::InvalidArgumentError(message);
}

double OrDefault(bool has, float value, double fallback) {
  return has ? static_cast<double>(value) : fallback;
}

}  // namespace

absl::Status ResolveTrain(const batchd::v1::RandomResizedCrop& in,
                          const std::string& field, int max_output_size,
                          TrainTransform* out) {
  if (in.size() == 0 || in.size() > static_cast<uint32_t>(max_output_size)) {
    return Invalid(absl::StrCat(field, ".size is ", in.size(),
                                "; it must be 1..", max_output_size,
                                " (output side in pixels, e.g. 224)"));
  }
  out->size = static_cast<int>(in.size());
  out->scale_min = OrDefault(in.has_scale_min(), in.scale_min(), 0.08);
  out->scale_max = OrDefault(in.has_scale_max(), in.scale_max(), 1.0);
  out->ratio_min = OrDefault(in.has_ratio_min(), in.ratio_min(), 3.0 / 4.0);
  out->ratio_max = OrDefault(in.has_ratio_max(), in.ratio_max(), 4.0 / 3.0);
  out->flip_probability =
      OrDefault(in.has_flip_probability(), in.flip_probability(), 0.5);
  if (!(out->scale_min > 0 && out->scale_min <= out->scale_max &&
        out->scale_max <= 1)) {
    return Invalid(absl::StrCat(
        field, " scale range [", out->scale_min, ", ", out->scale_max,
        "] is invalid; it needs 0 < scale_min <= scale_max <= 1"));
  }
  if (!(out->ratio_min > 0 && out->ratio_min <= out->ratio_max &&
        std::isfinite(out->ratio_max))) {
    return Invalid(absl::StrCat(
        field, " ratio range [", out->ratio_min, ", ", out->ratio_max,
        "] is invalid; it needs 0 < ratio_min <= ratio_max"));
  }
  if (!(out->flip_probability >= 0 && out->flip_probability <= 1)) {
    return Invalid(absl::StrCat(field, ".flip_probability is ",
                                out->flip_probability, "; it must be 0..1"));
  }
  return absl::OkStatus();
}

absl::StatusOr<augment::Interpolation> ResolveCropInterpolation(
    batchd::v1::Interpolation value, const std::string& field) {
  switch (value) {
    case batchd::v1::INTERPOLATION_UNSPECIFIED:
    case batchd::v1::INTERPOLATION_BILINEAR:
      return augment::Interpolation::kBilinear;
    case batchd::v1::INTERPOLATION_BICUBIC:
      return augment::Interpolation::kBicubic;
    case batchd::v1::INTERPOLATION_NEAREST:
      return Invalid(absl::StrCat(
          field, ": INTERPOLATION_NEAREST is not offered for the crop's "
          "resize (it aliases badly when shrinking); use "
          "INTERPOLATION_BILINEAR (the default) or INTERPOLATION_BICUBIC"));
    default:
      return Invalid(absl::StrCat(
          field, ": ", static_cast<int>(value),
          " is unknown; use INTERPOLATION_BILINEAR or INTERPOLATION_BICUBIC"));
  }
}

std::string PlanViews::Fingerprint() const {
  if (empty()) return "";
  std::string text = " views=[";
  for (const ViewGroupSpec& g : groups) {
    const TrainTransform& t = g.transform;
    absl::StrAppend(
        &text,
        absl::StrFormat("{count=%d size=%d scale=%a..%a ratio=%a..%a flip=%a "
                        "interpolation=%d augment=[%s]}",
                        g.count, t.size, t.scale_min, t.scale_max,
                        t.ratio_min, t.ratio_max, t.flip_probability,
                        static_cast<int>(g.interpolation),
                        g.augment.fingerprint()));
  }
  return text + "]";
}

absl::StatusOr<PlanViews> ResolveViews(const batchd::v1::Plan& plan,
                                       int max_output_size) {
  const batchd::v1::Pipeline& pipeline = plan.pipeline();
  // Each view has its own crop and ops: the pipeline's would be ambiguous.
  // Erasing and mix draw per sample and per batch of one image tensor.
  const char* replaced =
      pipeline.transform_case() != batchd::v1::Pipeline::TRANSFORM_NOT_SET
          ? "pipeline.train/pipeline.eval"
      : pipeline.augment_size() > 0 ? "pipeline.augment"
      : pipeline.interpolation() != batchd::v1::INTERPOLATION_UNSPECIFIED
          ? "pipeline.interpolation"
      : pipeline.has_erasing() ? "pipeline.erasing"
      : pipeline.has_mix()     ? "pipeline.mix"
                               : nullptr;
  if (replaced != nullptr) {
    return Invalid(absl::StrCat(
        replaced, " is set in a plan with views; each view group has its own "
        "crop, interpolation and augment, and erasing and mix do not work "
        "with views: unset ", replaced, " (the pipeline keeps only layout and "
        "decoded_max_side)"));
  }
  if (static_cast<uint32_t>(plan.views_size()) > kMaxViewGroups) {
    return Invalid(absl::StrCat("views has ", plan.views_size(),
                                " groups; a plan may have 1..",
                                kMaxViewGroups));
  }
  PlanViews out;
  uint64_t total = 0;
  for (int i = 0; i < plan.views_size(); ++i) {
    const batchd::v1::ViewGroup& in = plan.views(i);
    const std::string field = absl::StrCat("views[", i, "]");
    if (in.count() == 0 || in.count() > common::kMaxViews) {
      return Invalid(absl::StrCat(field, ".count is ", in.count(),
                                  "; it must be 1..", common::kMaxViews));
    }
    total += in.count();
    if (total > common::kMaxViews) {
      return Invalid(absl::StrCat(
          "views: ", total, " views over groups 0..", i,
          "; a plan may have at most ", common::kMaxViews, " views in all"));
    }
    ViewGroupSpec group;
    group.count = in.count();
    if (!in.has_crop()) {
      return Invalid(absl::StrCat(field, ".crop is unset; give each view "
                                  "group a RandomResizedCrop (its size)"));
    }
    if (absl::Status s = ResolveTrain(in.crop(), field + ".crop",
                                      max_output_size, &group.transform);
        !s.ok()) {
      return s;
    }
    absl::StatusOr<augment::Interpolation> interpolation =
        ResolveCropInterpolation(in.interpolation(),
                                 field + ".interpolation");
    if (!interpolation.ok()) return interpolation.status();
    group.interpolation = *interpolation;
    absl::StatusOr<augment::AugmentPlan> ops = augment::AugmentPlan::Create(
        in.augment(), field + ".augment", group.transform.size);
    if (!ops.ok()) return ops.status();
    group.augment = *std::move(ops);
    for (uint32_t v = 0; v < group.count; ++v) {
      out.group_of_view.push_back(static_cast<uint32_t>(i));
    }
    out.groups.push_back(std::move(group));
  }
  return out;
}

}  // namespace batchd::server
