#include "client/erase_mix_batch.h"

#include "absl/strings/str_cat.h"
#include "client/device_loader.h"

namespace batchd::client {

absl::Status ToEraseMix(const BatchInfo& batch,
                        const cuda::NormalizeParams& params,
                        cuda::EraseMix* out) {
  cuda::EraseMix em;
  if (!batch.erased.empty()) em.rects.resize(params.n);
  for (const batchd::v1::ErasedRegion& region : batch.erased) {
    if (region.position() >= params.n) {
      return absl::InternalError(absl::StrCat(
          "batch ", batch.batch_index, " erases sample ", region.position(),
          " of ", params.n));
    }
    cuda::EraseRect& r = em.rects[region.position()];
    r.top = region.top();
    r.left = region.left();
    r.height = region.height();
    r.width = region.width();
    r.noise = region.noise() ? 1 : 0;
    r.noise_key = region.noise_key();
  }
  if (batch.mix.has_value()) {
    const batchd::v1::BatchMix& mix = *batch.mix;
    cuda::MixKind kind = cuda::MixKind::kNone;
    if (mix.kind() == batchd::v1::BatchMix::KIND_MIXUP) {
      kind = cuda::MixKind::kMixup;
    } else if (mix.kind() == batchd::v1::BatchMix::KIND_CUTMIX) {
      kind = cuda::MixKind::kCutmix;
    }
    const cuda::Status made = cuda::MakeMixParams(
        kind, mix.lambda(),
        {.top = mix.box_top(), .left = mix.box_left(),
         .height = mix.box_height(), .width = mix.box_width()},
        &em.mix);
    if (!made.ok()) {
      return absl::InternalError(absl::StrCat(
          "batch ", batch.batch_index, ": ", made.message()));
    }
  }
  const cuda::Status checked = cuda::CheckEraseMix(params, em);
  if (!checked.ok()) {
    if (params.out_dtype == cuda::DType::kUint8) {
      return FromCudaStatus(checked);
    }
    return absl::InternalError(absl::StrCat(
        "batch ", batch.batch_index, ": ", checked.message()));
  }
  *out = std::move(em);
  return absl::OkStatus();
}

absl::Status SoftLabelsOf(const BatchInfo& batch, const cuda::MixParams& mix,
                          const batchd::v1::Plan& plan,
                          std::vector<float>* out) {
  out->clear();
  const bool planned = plan.pipeline().has_mix();
  if (batch.mix.has_value() != planned) {
    return absl::InternalError(absl::StrCat(
        "batch ", batch.batch_index, planned ? " has no" : " has a",
        " mix, but the plan ", planned ? "has one" : "has none"));
  }
  if (!planned) return absl::OkStatus();
  const uint32_t classes = batch.mix->num_classes();
  if (classes != plan.pipeline().mix().num_classes() ||
      batch.labels.size() > plan.batch_size()) {
    return absl::InternalError(absl::StrCat(
        "batch ", batch.batch_index, " has ", batch.labels.size(),
        " labels of ", classes, " classes; the plan asks for at most ",
        plan.batch_size(), " of ", plan.pipeline().mix().num_classes()));
  }
  out->resize(batch.labels.size() * classes);
  return FromCudaStatus(cuda::SoftLabels(batch.labels.data(),
                                         batch.labels.size(), classes,
                                         batch.mix->label_smoothing(), mix,
                                         out->data()));
}

}  // namespace batchd::client
