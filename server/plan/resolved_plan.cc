#include "server/plan/resolved_plan.h"

#include <algorithm>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "server/plan/plan_sources.h"

namespace batchd::server {
namespace {

absl::Status Invalid(const std::string& message) {
  return absl::InvalidArgumentError(message);
}

absl::Status CheckSize(const char* field, uint32_t size,
                       const PlanLimits& limits) {
  if (size == 0 || size > static_cast<uint32_t>(limits.max_output_size)) {
    return Invalid(absl::StrCat(field, " is ", size, "; it must be 1..",
                                limits.max_output_size,
                                " (output side in pixels, e.g. 224)"));
  }
  return absl::OkStatus();
}

absl::Status ResolveEval(const batchd::v1::ResizeCenterCrop& in,
                         const PlanLimits& limits, EvalTransform* out) {
  if (absl::Status s = CheckSize("pipeline.eval.size", in.size(), limits);
      !s.ok()) {
    return s;
  }
  out->size = static_cast<int>(in.size());
  // Checked as the unsigned value the client sent: narrowed first, 2^32-1
  // would be reported as -1.
  const uint64_t resize_shorter =
      in.resize_shorter() != 0 ? in.resize_shorter()
                               : uint64_t{in.size()} * 256 / 224;
  const uint64_t most = 4 * static_cast<uint64_t>(limits.max_output_size);
  if (resize_shorter < in.size() || resize_shorter > most) {
    return Invalid(absl::StrCat(
        "pipeline.eval.resize_shorter is ", resize_shorter,
        "; it must be at least pipeline.eval.size (", out->size,
        ") and at most ", most));
  }
  out->resize_shorter = static_cast<int>(resize_shorter);
  return absl::OkStatus();
}

}  // namespace

std::vector<uint64_t> ResolvedPlan::shape(uint64_t samples) const {
  if (!views.empty()) return {batch_bytes(samples)};
  const uint64_t side = static_cast<uint64_t>(output_size());
  if (layout == batchd::v1::LAYOUT_NCHW) return {samples, 3, side, side};
  return {samples, side, side, 3};
}

CropSpec ResolvedPlan::Crop(uint64_t epoch, uint64_t sample_index, int width,
                            int height) const {
  CropSpec crop;
  if (train) {
    common::SampleRandom rng(shard.seed, epoch, sample_index,
                             common::RandomPurpose::kAugment);
    crop = RandomResizedCropSpec(width, height, train_transform, rng);
  } else {
    crop = CenterCropSpec(width, height, eval_transform);
  }
  crop.filter = interpolation == augment::Interpolation::kBicubic
                    ? ResizeFilter::kBicubic
                    : ResizeFilter::kBilinear;
  return crop;
}

std::vector<batchd::v1::ViewShape> ResolvedPlan::ViewShapes(
    uint64_t samples) const {
  std::vector<batchd::v1::ViewShape> shapes;
  if (views.empty()) return shapes;
  for (uint32_t v = 0; v < view_count(); ++v) {
    batchd::v1::ViewShape& view = shapes.emplace_back();
    const uint64_t side = static_cast<uint64_t>(view_size(v));
    const std::vector<uint64_t> shape =
        layout == batchd::v1::LAYOUT_NCHW
            ? std::vector<uint64_t>{samples, 3, side, side}
            : std::vector<uint64_t>{samples, side, side, 3};
    view.mutable_shape()->Assign(shape.begin(), shape.end());
    view.set_offset(view_offset(v, samples));
  }
  return shapes;
}

CropSpec ResolvedPlan::ViewCrop(uint64_t epoch, uint64_t entry, uint32_t view,
                                int width, int height) const {
  if (views.empty()) return Crop(epoch, entry, width, height);
  const ViewGroupSpec& group = views.group(view);
  common::SampleRandom rng(
      shard.seed, epoch,
      common::ViewEntry(entry, view, shard.num_samples, shard.repeats),
      common::RandomPurpose::kAugment);
  CropSpec crop = RandomResizedCropSpec(width, height, group.transform, rng);
  crop.filter = group.interpolation == augment::Interpolation::kBicubic
                    ? ResizeFilter::kBicubic
                    : ResizeFilter::kBilinear;
  return crop;
}

std::vector<augment::OpCall> ResolvedPlan::ViewAugmentCalls(
    uint64_t epoch, uint64_t entry, uint32_t view, int width,
    int height) const {
  if (views.empty()) return AugmentCalls(epoch, entry, width, height);
  const augment::AugmentPlan& ops = views.group(view).augment;
  if (ops.empty()) return {};
  common::SampleRandom rng(
      shard.seed, epoch,
      common::ViewEntry(entry, view, shard.num_samples, shard.repeats),
      common::RandomPurpose::kAugmentOps);
  return ops.Draw(rng, width, height);
}

std::vector<augment::OpCall> ResolvedPlan::AugmentCalls(
    uint64_t epoch, uint64_t sample_index, int width, int height) const {
  if (augment.empty()) return {};
  common::SampleRandom rng(shard.seed, epoch, sample_index,
                           common::RandomPurpose::kAugmentOps);
  return augment.Draw(rng, width, height);
}

std::vector<batchd::v1::ErasedRegion> ResolvedPlan::Erased(
    uint64_t epoch, const std::vector<uint64_t>& entries) const {
  std::vector<batchd::v1::ErasedRegion> erased;
  if (!erasing.has_value()) return erased;
  const int side = output_size();
  for (size_t i = 0; i < entries.size(); ++i) {
    common::SampleRandom rng(shard.seed, epoch, entries[i],
                             common::RandomPurpose::kErasing);
    common::SampleRandom noise_rng(shard.seed, epoch, entries[i],
                                   common::RandomPurpose::kErasingNoise);
    std::optional<batchd::v1::ErasedRegion> region =
        DrawErasing(*erasing, /*height=*/side, /*width=*/side,
                    static_cast<uint32_t>(i), rng, noise_rng);
    if (region.has_value()) erased.push_back(*std::move(region));
  }
  return erased;
}

std::optional<batchd::v1::BatchMix> ResolvedPlan::Mix(
    uint64_t epoch, uint64_t batch_index) const {
  if (!mix.has_value()) return std::nullopt;
  // batch_index < 2^32 and world_size <= 2^32 in any plan that fits the
  // counter's 56 bits; the product is reduced to them regardless.
  const uint64_t counter =
      (batch_index * shard.world_size + shard.rank) & common::kMaxSampleIndex;
  common::SampleRandom rng(shard.seed, epoch, counter,
                           common::RandomPurpose::kBatchMix);
  const int side = output_size();
  return DrawMix(*mix, /*height=*/side, /*width=*/side, rng);
}

std::string PlanFingerprint(const ResolvedPlan& plan) {
  const common::ShardSpec& s = plan.shard;
  // Doubles in hex ("%a"): exact, so no two values print alike.
  std::string transform =
      plan.train
          ? absl::StrFormat("train size=%d scale=%a..%a ratio=%a..%a flip=%a",
                            plan.train_transform.size,
                            plan.train_transform.scale_min,
                            plan.train_transform.scale_max,
                            plan.train_transform.ratio_min,
                            plan.train_transform.ratio_max,
                            plan.train_transform.flip_probability)
          : absl::StrFormat("eval size=%d resize_shorter=%d",
                            plan.eval_transform.size,
                            plan.eval_transform.resize_shorter);
  // The window that decides the order: 0 for the per-sample shuffle (or
  // none), and windows past the shard count are one order.
  const uint32_t window =
      s.shuffle && s.shuffle_window_shards > 0 && s.shard_samples != nullptr
          ? common::EffectiveWindowShards(s.shuffle_window_shards,
                                          *s.shard_samples)
          : 0;
  std::string dataset;
  if (plan.dataset != nullptr) {
    dataset = plan.dataset->name();
  } else {
    // A mixture: its datasets and everything that decides its orders.
    for (const ResolvedPlan::Source& source : plan.sources) {
      absl::StrAppend(&dataset, dataset.empty() ? "" : "+",
                      source.dataset->name());
    }
    absl::StrAppend(&dataset, " ", common::MixtureText(*s.mixture));
  }
  return absl::StrCat(
      "dataset=", dataset, " samples=", s.num_samples,
      " seed=", s.seed, " shuffle=", s.shuffle, " window_shards=", window,
      // Written only when set, so that plans without repeats keep their
      // labels.
      s.repeats > 1 ? absl::StrCat(" repeats=", s.repeats) : "",
      " drop_last=", s.drop_last,
      " rank=", s.rank, "/", s.world_size, " batch=", s.batch_size, " ",
      transform, " layout=", batchd::v1::Layout_Name(plan.layout),
      " dtype=uint8",
      // Written only when set, so that uncapped plans keep their labels;
      // likewise the resize's interpolation when not the default, and the
      // augmentation ops when there are any.
      plan.decoded_max_side > 0
          ? absl::StrCat(" decoded_max_side=", plan.decoded_max_side)
          : "",
      plan.interpolation != augment::Interpolation::kBilinear
          ? absl::StrCat(" interpolation=",
                         static_cast<int>(plan.interpolation))
          : "",
      plan.augment.empty()
          ? ""
          : absl::StrCat(" augment=[", plan.augment.fingerprint(), "]"),
      // Fields change the batch's header bytes: plans that differ in them
      // never share.
      plan.fields.Fingerprint(),
      plan.erasing.has_value()
          ? absl::StrCat(" erasing=[", ErasingFingerprint(*plan.erasing), "]")
          : "",
      plan.mix.has_value()
          ? absl::StrCat(" mix=[", MixFingerprint(*plan.mix), "]")
          : "",
      plan.views.Fingerprint());
}

ResolvedPlan::SampleRef ResolvedPlan::At(uint64_t sample) const {
  if (sources.empty()) return SampleRef{dataset.get(), &fields, sample, 0};
  // The last source whose first sample number is <= sample.
  const auto it = std::upper_bound(
      sources.begin(), sources.end(), sample,
      [](uint64_t s, const Source& source) { return s < source.offset; });
  const Source& source = *std::prev(it);
  return SampleRef{source.dataset.get(), &source.fields,
                   sample - source.offset,
                   static_cast<uint32_t>(it - sources.begin() - 1)};
}

std::string FingerprintLabel(const std::string& fingerprint) {
  uint64_t hash = 0xcbf29ce484222325;  // FNV-1a, 64-bit
  for (unsigned char c : fingerprint) {
    hash ^= c;
    hash *= 0x100000001b3;
  }
  return absl::StrFormat("%016x", hash);
}

absl::Status CheckJobName(const std::string& job) {
  constexpr size_t kMaxJobName = 128;
  if (job.empty() || job.size() > kMaxJobName) {
    return Invalid(absl::StrCat("job name is ", job.size(),
                                " characters long; use 1 to ", kMaxJobName));
  }
  for (size_t i = 0; i < job.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(job[i]);
    const bool alnum = absl::ascii_isalnum(c);
    if (alnum || (i > 0 && absl::string_view("._:/@+=-").find(c) !=
                               absl::string_view::npos)) {
      continue;
    }
    return Invalid(absl::StrCat(
        "job name has byte 0x", absl::Hex(c, absl::kZeroPad2), " at offset ",
        i, "; use letters, digits and ._:/@+=- (starting with a letter or a "
        "digit)"));
  }
  return absl::OkStatus();
}

namespace {

// The classes a plan's labels range over: its dataset's, or the most of
// any of its sources.
size_t ClassCount(const ResolvedPlan& plan) {
  if (plan.dataset != nullptr) return plan.dataset->class_names().size();
  size_t classes = 0;
  for (const ResolvedPlan::Source& source : plan.sources) {
    classes = std::max(classes, source.dataset->class_names().size());
  }
  return classes;
}

}  // namespace

absl::StatusOr<std::shared_ptr<const ResolvedPlan>> ResolvePlan(
    const batchd::v1::Plan& plan, const DatasetMap& datasets,
    const PlanLimits& limits) {
  auto resolved = std::make_shared<ResolvedPlan>();
  auto it = datasets.find(plan.dataset());
  if (plan.sources_size() > 0) {
    // Checked below, after batch_size and rank.
  } else if (it == datasets.end()) {
    std::vector<std::string> names;
    for (const auto& [name, dataset] : datasets) names.push_back(name);
    return Invalid(absl::StrCat("unknown dataset '", plan.dataset(),
                                "'; this daemon serves: ",
                                names.empty() ? "(none)"
                                              : absl::StrJoin(names, ", ")));
  }
  if (plan.sources_size() == 0) resolved->dataset = it->second;
  if (plan.batch_size() == 0 || plan.batch_size() > limits.max_batch_size) {
    return Invalid(absl::StrCat("batch_size is ", plan.batch_size(),
                                "; it must be 1..", limits.max_batch_size));
  }
  const uint32_t world_size = plan.world_size() == 0 ? 1 : plan.world_size();
  if (plan.rank() >= world_size) {
    return Invalid(absl::StrCat("rank ", plan.rank(),
                                " is out of range for world_size ", world_size,
                                "; it must be 0..", world_size - 1));
  }
  if (resolved->dataset != nullptr &&
      resolved->dataset->size() > common::kMaxSampleIndex) {
    return Invalid("dataset is too large (more than 2^56 samples)");
  }
  resolved->shard = common::ShardSpec{
      .num_samples = resolved->dataset != nullptr ? resolved->dataset->size()
                                                  : 0,
      .seed = plan.seed(),
      .shuffle = plan.shuffle(),
      .drop_last = plan.drop_last(),
      .rank = plan.rank(),
      .world_size = world_size,
      .batch_size = plan.batch_size(),
  };
  if (plan.sources_size() > 0) {
    if (absl::Status s = ResolveSources(plan, datasets, resolved.get());
        !s.ok()) {
      return s;
    }
  } else if (const uint32_t window = plan.shuffle_window_shards();
             window > 0) {
    const std::vector<uint64_t>& layout = *resolved->dataset->shard_samples();
    if (!plan.shuffle()) {
      return Invalid(absl::StrCat(
          "shuffle_window_shards is ", window, " but shuffle is off; the "
          "shard-aware shuffle is a kind of shuffle: set shuffle, or leave "
          "shuffle_window_shards at 0"));
    }
    if (layout.empty()) {
      return Invalid(absl::StrCat(
          "shuffle_window_shards is ", window, " but dataset '",
          plan.dataset(), "' has no shards; the shard-aware shuffle needs a "
          "TAR_SHARDS dataset: use shuffle_window_shards 0 (the per-sample "
          "shuffle) for this one"));
    }
    if (window > common::kMaxShuffleWindowShards) {
      return Invalid(absl::StrCat(
          "shuffle_window_shards is ", window, "; it must be 1..",
          common::kMaxShuffleWindowShards, " (shards open at once; dataset '",
          plan.dataset(), "' has ", layout.size(), " shards, and a window "
          "of all of them shuffles every sample)"));
    }
    resolved->shard.shuffle_window_shards = window;
    resolved->shard.shard_samples = resolved->dataset->shard_samples();
  }
  if (plan.repeats() > common::kMaxRepeats) {
    return Invalid(absl::StrCat(
        "repeats is ", plan.repeats(), "; it must be 0..",
        common::kMaxRepeats, " (0 and 1: each sample once an epoch; R: "
        "torchvision's RASampler with R repetitions, as --ra-reps)"));
  }
  resolved->shard.repeats = std::max<uint32_t>(plan.repeats(), 1);
  if (BatchesPerEpoch(resolved->shard) == 0) {
    return Invalid(absl::StrCat(
        "with drop_last, batch_size ", plan.batch_size(),
        " is larger than this shard's ", ShardSize(resolved->shard),
        " samples, so an epoch has no batches; lower batch_size or unset "
        "drop_last"));
  }
  if (plan.resume().position() > 0) {
    const uint64_t samples = common::EpochLength(resolved->shard);
    if (plan.resume().position() >= samples) {
      return Invalid(absl::StrCat(
          "resume.position ", plan.resume().position(),
          " is not below the epoch's ", samples,
          " samples; an epoch resumed at its end is done: start epoch ",
          plan.resume().epoch(), " + 1 at position 0 instead"));
    }
    if (plan.resume().epoch() > 0xFFFFFFFFull) {
      return Invalid(absl::StrCat("resume.epoch ", plan.resume().epoch(),
                                  " is too large; epochs are 0..4294967295"));
    }
    resolved->resume_epoch = plan.resume().epoch();
    resolved->resume_position = plan.resume().position();
    const common::ShardSpec rest = resolved->ShardFor(resolved->resume_epoch);
    if (BatchesPerEpoch(rest) == 0) {
      return Invalid(absl::StrCat(
          "with drop_last, the ", samples - plan.resume().position(),
          " samples left of epoch ", plan.resume().epoch(),
          " give this shard ", ShardSize(rest),
          ", fewer than batch_size ", plan.batch_size(),
          ", so nothing of that epoch is left to deliver: start the next "
          "epoch at position 0 instead"));
    }
  }
  const batchd::v1::Pipeline& pipeline = plan.pipeline();
  if (plan.views_size() > 0) {
    absl::StatusOr<PlanViews> views =
        ResolveViews(plan, limits.max_output_size);
    if (!views.ok()) return views.status();
    resolved->views = *std::move(views);
    // Every view's draw keys an entry below N * R * views.
    const uint64_t entries = resolved->shard.num_samples *
                             resolved->shard.repeats *
                             resolved->view_count();
    if (entries > common::kMaxSampleIndex) {
      return Invalid("views: the dataset is too large for this many views "
                     "(samples x repeats x views above 2^56)");
    }
    resolved->train_transform = resolved->views.groups[0].transform;
  }
  switch (plan.views_size() > 0 ? batchd::v1::Pipeline::kTrain
                                : pipeline.transform_case()) {
    case batchd::v1::Pipeline::kTrain:
      resolved->train = true;
      if (plan.views_size() > 0) break;
      if (absl::Status s =
              ResolveTrain(pipeline.train(), "pipeline.train",
                           limits.max_output_size, &resolved->train_transform);
          !s.ok()) {
        return s;
      }
      break;
    case batchd::v1::Pipeline::kEval:
      resolved->train = false;
      if (absl::Status s = ResolveEval(pipeline.eval(), limits,
                                       &resolved->eval_transform);
          !s.ok()) {
        return s;
      }
      break;
    default:
      return Invalid(
          "pipeline has no transform; set pipeline.train (RandomResizedCrop) "
          "or pipeline.eval (ResizeCenterCrop)");
  }
  switch (pipeline.layout()) {
    case batchd::v1::LAYOUT_UNSPECIFIED:
    case batchd::v1::LAYOUT_NHWC:
      resolved->layout = batchd::v1::LAYOUT_NHWC;
      break;
    case batchd::v1::LAYOUT_NCHW:
      resolved->layout = batchd::v1::LAYOUT_NCHW;
      break;
    default:
      return Invalid(absl::StrCat("pipeline.layout ", pipeline.layout(),
                                  " is unknown; use LAYOUT_NHWC or "
                                  "LAYOUT_NCHW"));
  }
  if (pipeline.decoded_max_side() > 0) {
    const uint32_t cap = pipeline.decoded_max_side();
    // At least the largest output: every view is cut from the capped image.
    uint32_t size = 0;
    for (uint32_t v = 0; v < resolved->view_count(); ++v) {
      size = std::max(size, static_cast<uint32_t>(resolved->view_size(v)));
    }
    if (cap < size || cap > kMaxDecodedSide) {
      return Invalid(absl::StrCat(
          "pipeline.decoded_max_side is ", cap, "; it must be 0 (off) or ",
          size, "..", kMaxDecodedSide,
          " (at least the output size, e.g. 2x it)"));
    }
    resolved->decoded_max_side = cap;
  }
  absl::StatusOr<augment::Interpolation> interpolation =
      ResolveCropInterpolation(pipeline.interpolation(),
                               "pipeline.interpolation");
  if (!interpolation.ok()) return interpolation.status();
  resolved->interpolation = *interpolation;
  absl::StatusOr<augment::AugmentPlan> augment =
      augment::AugmentPlan::Create(pipeline.augment(), "pipeline.augment",
                                   resolved->output_size());
  if (!augment.ok()) return augment.status();
  resolved->augment = *std::move(augment);
  if (resolved->dataset != nullptr) {
    absl::StatusOr<PlanFields> fields =
        ResolveFields(plan, *resolved->dataset, plan.batch_size());
    if (!fields.ok()) return fields.status();
    resolved->fields = *std::move(fields);
  } else {
    // What every source's fields share (names, bounds, policies); the
    // member numbers are each source's own (At).
    resolved->fields = resolved->sources.front().fields;
  }
  absl::StatusOr<std::optional<ErasingSpec>> erasing =
      ResolveErasing(pipeline);
  if (!erasing.ok()) return erasing.status();
  resolved->erasing = *erasing;
  absl::StatusOr<std::optional<MixSpec>> mix =
      ResolveMix(pipeline, ClassCount(*resolved),
                 plan.batch_size());
  if (!mix.ok()) return mix.status();
  resolved->mix = *mix;
  resolved->job = plan.job().empty() ? "default" : plan.job();
  if (absl::Status name = CheckJobName(resolved->job); !name.ok()) {
    return name;
  }
  resolved->fingerprint = PlanFingerprint(*resolved);
  return std::shared_ptr<const ResolvedPlan>(std::move(resolved));
}

}  // namespace batchd::server
