// ResolvedPlan: a client's batchd.v1.Plan checked against the daemon's
// datasets and limits, with defaults filled in. Everything that decides a
// batch's bytes is here; nothing else is consulted when building one.
//
// Immutable after ResolvePlan; shared (shared_ptr<const>) by a stream and its
// in-flight work. Thread-safe.
#ifndef BATCHD_SERVER_PLAN_RESOLVED_PLAN_H_
#define BATCHD_SERVER_PLAN_RESOLVED_PLAN_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "batchd/v1/data.pb.h"
#include "server/dataset/dataset.h"
#include "server/decode/crop_spec.h"
#include "common/sampler.h"
#include "server/augment/image.h"
#include "server/augment/op_call.h"
#include "server/augment/policy.h"
#include "server/plan/plan_fields.h"
#include "server/plan/erase_mix.h"
#include "server/plan/transform.h"

namespace batchd::server {

// Largest Pipeline.decoded_max_side accepted, pixels.
inline constexpr uint32_t kMaxDecodedSide = 16384;

// Limits a plan is checked against.
struct PlanLimits {
  uint32_t max_batch_size = 4096;
  int max_output_size = 4096;  // output side, pixels
};

struct ResolvedPlan {
  // The plan's dataset; null with sources (reach samples through At).
  std::shared_ptr<const Dataset> dataset;
  // Plan.sources (server/plan/plan_sources.h): each source's dataset, its
  // fields resolved against it, and its first sample number (the sources'
  // datasets concatenated in order). Empty for a plan of one dataset.
  struct Source {
    std::shared_ptr<const Dataset> dataset;
    PlanFields fields;
    uint64_t offset = 0;
  };
  std::vector<Source> sources;
  // The shard of a whole epoch.
  common::ShardSpec shard;
  // Plan.resume: epoch resume_epoch starts at shard position
  // resume_position (0: no resume).
  uint64_t resume_epoch = 0;
  uint64_t resume_position = 0;
  bool train = true;  // RandomResizedCrop + flip; else resize + centre crop
  TrainTransform train_transform;
  EvalTransform eval_transform;
  batchd::v1::Layout layout = batchd::v1::LAYOUT_NHWC;
  // Pipeline.decoded_max_side: 0 decodes each crop from the file; N > 0
  // crops the capped image (server/decode/capped_image.h).
  uint32_t decoded_max_side = 0;
  // Pipeline.interpolation: how the crop's window is resized, kBilinear
  // (the default) or kBicubic.
  augment::Interpolation interpolation = augment::Interpolation::kBilinear;
  // Pipeline.augment, resolved: the ops after the crop and flip (empty:
  // none).
  augment::AugmentPlan augment;
  // Plan.fields, missing_fields and label_field.
  PlanFields fields;
  // Pipeline.erasing and Pipeline.mix (nullopt: none). They leave the
  // daemon's pixels alone but change what the trainer gets, so they are in
  // the fingerprint.
  std::optional<ErasingSpec> erasing;
  std::optional<MixSpec> mix;
  std::string job;
  // Every field above that decides a batch's bytes, in a canonical text
  // (PlanFingerprint): two plans with the same fingerprint get
  // byte-identical batches, so their streams can share them
  // (server/pipeline/shared_batches.h). Not in it: the job, and the resume point
  // (which only moves the resumed epoch's start, ShardFor).
  std::string fingerprint;

  int output_size() const {
    return train ? train_transform.size : eval_transform.size;
  }
  // Pixel bytes of one sample: size * size * 3 (uint8 RGB).
  uint64_t sample_bytes() const {
    return uint64_t{3} * output_size() * output_size();
  }
  // Pixel bytes of a batch of `samples` samples.
  uint64_t batch_bytes(uint64_t samples) const {
    return samples * sample_bytes();
  }
  // A sample number of the plan (a dataset index, or with sources a
  // number in their concatenation): its dataset, the fields resolved
  // against it, its index there and its source (0 without sources).
  struct SampleRef {
    const Dataset* dataset = nullptr;
    const PlanFields* fields = nullptr;
    uint64_t index = 0;
    uint32_t source = 0;
  };
  SampleRef At(uint64_t sample) const;
  PixelLayout pixel_layout() const {
    return layout == batchd::v1::LAYOUT_NCHW ? PixelLayout::kCHW
                                             : PixelLayout::kHWC;
  }
  // The shard of `epoch`: `shard`, started at resume_position for the
  // resumed epoch.
  common::ShardSpec ShardFor(uint64_t epoch) const {
    common::ShardSpec s = shard;
    if (epoch == resume_epoch) s.start_position = resume_position;
    return s;
  }
  // Shape of a batch of `samples` samples in the plan's layout.
  std::vector<uint64_t> shape(uint64_t samples) const;
  // The crop of `sample_index` in `epoch` for an image of width x height.
  CropSpec Crop(uint64_t epoch, uint64_t sample_index, int width,
                int height) const;
  // The augmentation calls of `sample_index` in `epoch`, whose crop is
  // `width` x `height`: `augment` drawn from the sample's kAugmentOps
  // stream. Empty without augment ops.
  std::vector<augment::OpCall> AugmentCalls(uint64_t epoch,
                                            uint64_t sample_index, int width,
                                            int height) const;
  // BatchHeader.erased of a batch of epoch-order `entries` (sample
  // indices; with repeats, sample + repeat * N) in `epoch`: each sample's
  // rectangle from its own kErasing stream. Empty without erasing.
  std::vector<batchd::v1::ErasedRegion> Erased(
      uint64_t epoch, const std::vector<uint64_t>& entries) const;
  // BatchHeader.mix of batch `batch_index` of `epoch`, from the kBatchMix
  // stream of counter batch_index * world_size + rank (so ranks draw
  // apart). nullopt without mix.
  std::optional<batchd::v1::BatchMix> Mix(uint64_t epoch,
                                          uint64_t batch_index) const;
};

using DatasetMap = std::map<std::string, std::shared_ptr<const Dataset>>;

// Job names reach logs, terminals (`batchd top`), metric labels and
// GetStatus, so they are kept to a safe set: 1 to 128 characters from
// [A-Za-z0-9._:/@+=-], starting with a letter or a digit (names starting
// with '_' are the daemon's own: JobStats' kOtherJobs). INVALID_ARGUMENT,
// saying which byte is refused, otherwise.
absl::Status CheckJobName(const std::string& job);

// The canonical text of what decides `plan`'s bytes (ResolvedPlan's
// fingerprint); ResolvePlan sets it.
std::string PlanFingerprint(const ResolvedPlan& plan);
// A short stable name of a fingerprint for metric labels and status: 16
// hex digits of its 64-bit FNV-1a hash.
std::string FingerprintLabel(const std::string& fingerprint);

// Checks `plan` and fills in defaults. INVALID_ARGUMENT with a message naming
// the field and the accepted range for every kind of bad plan.
absl::StatusOr<std::shared_ptr<const ResolvedPlan>> ResolvePlan(
    const batchd::v1::Plan& plan, const DatasetMap& datasets,
    const PlanLimits& limits);

}  // namespace batchd::server

#endif  // BATCHD_SERVER_PLAN_RESOLVED_PLAN_H_
