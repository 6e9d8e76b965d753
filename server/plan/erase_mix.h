// RandomErasing and MixUp/CutMix as plan fields (Pipeline.erasing,
// Pipeline.mix): their resolution from the wire, and the daemon's draws of
// each sample's erasing rectangle and each batch's mix, which travel in
// the BatchHeader for the client to apply after normalisation
// (client/cuda/erase_mix.h). Every draw is a pure function of (seed,
// epoch, sample index) or (seed, epoch, batch index, rank).
//
// Pure functions; thread-compatible.
#ifndef BATCHD_SERVER_PLAN_ERASE_MIX_H_
#define BATCHD_SERVER_PLAN_ERASE_MIX_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "batchd/v1/data.pb.h"
#include "common/random.h"

namespace batchd::server {

// Pipeline.erasing with torchvision's defaults filled in.
struct ErasingSpec {
  double p = 0.5;
  double scale_min = 0.02, scale_max = 0.33;  // fraction of the area
  double ratio_min = 0.3, ratio_max = 3.3;    // height / width
  bool random_value = false;
};

// Pipeline.mix with defaults filled in.
struct MixSpec {
  double mixup_alpha = 0;   // 0: no MixUp
  double cutmix_alpha = 0;  // 0: no CutMix
  double switch_prob = 0.5;
  double label_smoothing = 0;
  uint32_t num_classes = 0;
  double prob = 1;
};

// The largest alpha accepted for MixUp and CutMix.
inline constexpr double kMaxMixAlpha = 100;
// The most soft-label values of one batch (batch_size x num_classes):
// 256 MiB of float32 in the client per batch.
inline constexpr uint64_t kMaxSoftLabelValues = uint64_t{1} << 26;

// nullopt when `pipeline` has no erasing; INVALID_ARGUMENT naming the
// field (pipeline.erasing.p, ...) for a value out of its range.
absl::StatusOr<std::optional<ErasingSpec>> ResolveErasing(
    const batchd::v1::Pipeline& pipeline);
// nullopt when `pipeline` has no mix; INVALID_ARGUMENT naming the field
// (pipeline.mix.mixup_alpha, ...) for a value out of its range, a
// num_classes of 0 or above `dataset_classes`, or batch_size x num_classes
// above kMaxSoftLabelValues.
absl::StatusOr<std::optional<MixSpec>> ResolveMix(
    const batchd::v1::Pipeline& pipeline, uint64_t dataset_classes,
    uint32_t batch_size);

// The canonical text of each, for the plan's fingerprint (exact: doubles
// in hex).
std::string ErasingFingerprint(const ErasingSpec& spec);
std::string MixFingerprint(const MixSpec& spec);

// torchvision 0.14 RandomErasing.get_params for an image of `height` x
// `width`, after its `torch.rand(1) < p`: nullopt when the sample is not
// erased (or no rectangle fitted in 10 tries, or it is empty). Draws from
// `rng` (the sample's kErasing stream); the noise key, with random_value,
// from `noise_rng` (its kErasingNoise stream). `position` is copied.
std::optional<batchd::v1::ErasedRegion> DrawErasing(
    const ErasingSpec& spec, int height, int width, uint32_t position,
    common::SampleRandom& rng, common::SampleRandom& noise_rng);

// One batch's mix for images of `height` x `width`, drawn from `rng` (the
// batch's kBatchMix stream): torchvision's RandomChoice of RandomMixup and
// RandomCutmix (timm's switch_prob), after timm's `prob`.
batchd::v1::BatchMix DrawMix(const MixSpec& spec, int height, int width,
                             common::SampleRandom& rng);

}  // namespace batchd::server

#endif  // BATCHD_SERVER_PLAN_ERASE_MIX_H_
