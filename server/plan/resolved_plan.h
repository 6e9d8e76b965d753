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
#include "server/plan/views.h"

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
  // Plan.views (empty: one view, the pipeline's transform). With views,
  // `train_transform` is view 0's, so output_size() is view 0's side.
  PlanViews views;
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
  // Views of each sample: Plan.views' total, or 1.
  uint32_t view_count() const {
    return views.empty() ? 1
                         : static_cast<uint32_t>(views.group_of_view.size());
  }
  // Output side of view `view`, pixels.
  int view_size(uint32_t view) const {
    return views.empty() ? output_size() : views.group(view).transform.size;
  }
  // Pixel bytes of one sample's view `view`: side * side * 3 (uint8 RGB).
  uint64_t view_bytes(uint32_t view) const {
    const uint64_t side = static_cast<uint64_t>(view_size(view));
    return 3 * side * side;
  }
  // Pixel bytes of one sample, all its views.
  uint64_t sample_bytes() const {
    uint64_t bytes = 0;
    for (uint32_t v = 0; v < view_count(); ++v) bytes += view_bytes(v);
    return bytes;
  }
  // Where view `view` starts in a batch of `samples` samples: the views
  // are view-major (all samples' view 0, then view 1, ...).
  uint64_t view_offset(uint32_t view, uint64_t samples) const {
    uint64_t offset = 0;
    for (uint32_t v = 0; v < view; ++v) offset += samples * view_bytes(v);
    return offset;
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
  // Shape of a batch of `samples` samples in the plan's layout; with views
  // the flat [bytes] (each view's shape is in ViewShapes).
  std::vector<uint64_t> shape(uint64_t samples) const;
  // BatchHeader.views of a batch of `samples` samples; empty without views.
  std::vector<batchd::v1::ViewShape> ViewShapes(uint64_t samples) const;
  // The crop of view `view` of epoch-order entry `entry` (its own draw,
  // common::ViewEntry) for an image of width x height; view 0 of a plan
  // without views is Crop(epoch, entry, ...).
  CropSpec ViewCrop(uint64_t epoch, uint64_t entry, uint32_t view, int width,
                    int height) const;
  // The augmentation calls of view `view` of `entry`, as ViewCrop; empty
  // when the view has no ops.
  std::vector<augment::OpCall> ViewAugmentCalls(uint64_t epoch,
                                                uint64_t entry, uint32_t view,
                                                int width, int height) const;
  // Whether view `view` has augmentation ops.
  bool view_has_ops(uint32_t view) const {
    return views.empty() ? !augment.empty() : !views.group(view).augment.empty();
  }
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
