#include "server/pipeline/pipeline.h"

#include "server/decode/image_format.h"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/random.h"
#include "server/augment/op_call.h"
#include "server/dataset/dataset.h"
#include "server/decode/image_decoder.h"
#include "server/decode/image_format.h"
#include "server/pipeline/sample_fields.h"

namespace batchd::server {
namespace {

uint64_t NanosSince(std::chrono::steady_clock::time_point start) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(
          std::chrono::steady_clock::now() - start)
          .count());
}

// One decoder per worker thread: decoders keep libjpeg state between images.
ImageDecoder& ThreadDecoder(const DecodeLimits& limits) {
  thread_local ImageDecoder decoder(limits);
  return decoder;
}

// One resizer per worker thread, for crops of capped images.
Resizer& ThreadResizer() {
  thread_local Resizer resizer;
  return resizer;
}

// The augmentation ops' temporary memory, one per worker thread.
augment::Scratch& ThreadAugmentScratch() {
  thread_local augment::Scratch scratch;
  return scratch;
}

// An NCHW plan's sample is decoded here (HWC) and augmented before it is
// written to its slot as planes; one per worker thread, `bytes` long.
uint8_t* ThreadHwcSample(size_t bytes) {
  thread_local std::vector<uint8_t> sample;
  if (sample.size() < bytes) sample.resize(bytes);
  return sample.data();
}

// `size` x `size` RGB pixels from HWC `hwc` to three planes at `chw`.
void HwcToChw(const uint8_t* hwc, int size, uint8_t* chw) {
  const size_t plane = static_cast<size_t>(size) * static_cast<size_t>(size);
  for (size_t i = 0; i < plane; ++i) {
    chw[i] = hwc[3 * i];
    chw[plane + i] = hwc[3 * i + 1];
    chw[2 * plane + i] = hwc[3 * i + 2];
  }
}

// What a substitution for missing fields says: the fields `index` lacks.
std::string MissingFieldDetail(const ResolvedPlan& plan, uint64_t index) {
  const ResolvedPlan::SampleRef ref = plan.At(index);
  std::string missing;
  for (const PlanField& field : ref.fields->fields) {
    if (field.key || ref.dataset->FindMember(ref.index, field.extension)) {
      continue;
    }
    absl::StrAppend(&missing, missing.empty() ? "" : ", ", field.name);
  }
  return absl::StrCat("missing field ", missing.substr(0, 180));
}

// The batch's field_data, field_sizes and field_counts from each
// position's fields, sample by sample.
void AssembleFields(const PlanFields& plan, std::vector<SampleFields>& fields,
                    BuiltBatch* batch) {
  const size_t n = plan.fields.size();
  batch->field_counts.resize(n);
  size_t bytes = 0;
  for (const SampleFields& sample : fields) {
    for (const std::string& value : sample.values) bytes += value.size();
  }
  batch->field_data.reserve(bytes);
  batch->field_sizes.reserve(fields.size() * n);
  for (SampleFields& sample : fields) {
    // A position whose task was cancelled has no values: empty fields.
    sample.values.resize(n);
    sample.cut.resize(n);
    sample.missing.resize(n);
    for (size_t i = 0; i < n; ++i) {
      batch->field_data.append(sample.values[i]);
      batch->field_sizes.push_back(
          static_cast<uint32_t>(sample.values[i].size()));
      batchd::v1::FieldCounts& counts = batch->field_counts[i];
      if (sample.cut[i]) counts.set_cut(counts.cut() + 1);
      if (sample.missing[i]) counts.set_missing(counts.missing() + 1);
    }
  }
}

}  // namespace

batchd::v1::SubstitutionReason ToReason(SampleError error) {
  switch (error) {
    case SampleError::kReadError:
      return batchd::v1::READ_ERROR;
    case SampleError::kEmptyFile:
      return batchd::v1::EMPTY_FILE;
    case SampleError::kNotJpeg:
      return batchd::v1::NOT_JPEG;
    case SampleError::kUnsupportedFormat:
      return batchd::v1::UNSUPPORTED_FORMAT;
    case SampleError::kTruncated:
      return batchd::v1::TRUNCATED;
    case SampleError::kCorrupt:
      return batchd::v1::CORRUPT;
    case SampleError::kTooManyPixels:
      return batchd::v1::TOO_MANY_PIXELS;
    case SampleError::kTooManyScans:
      return batchd::v1::TOO_MANY_SCANS;
    case SampleError::kHtmlPage:
      return batchd::v1::HTML_PAGE;
    case SampleError::kNoImage:
      return batchd::v1::NO_IMAGE_MEMBER;
    case SampleError::kNone:
      break;
  }
  return batchd::v1::SUBSTITUTION_REASON_UNSPECIFIED;
}

// The shared state of one batch under construction. Each position is
// written by exactly one task; `remaining` counts tasks not yet finished.
struct Pipeline::BatchJob {
  std::shared_ptr<const ResolvedPlan> plan;
  BatchCancellation cancelled;
  std::function<void(std::unique_ptr<BuiltBatch>)> done;
  std::unique_ptr<BuiltBatch> batch;
  // One slot per position; set by that position's task only.
  std::vector<std::optional<batchd::v1::Substitution>> substitutions;
  // With the plan's fields: each position's, read with its sample (or its
  // substitute's); set by that position's task only.
  std::vector<SampleFields> fields;
  // Each position's plan sample number (ResolvedPlan::At) and its entry of
  // the epoch's order, which keys its random draws.
  std::vector<uint64_t> samples;
  std::vector<uint64_t> entries;
  std::atomic<size_t> remaining{0};
  // When BuildBatch accepted the batch: the start of its assemble stage.
  std::chrono::steady_clock::time_point started;
  // For the shard cache's forecast, published as the batch's first sample
  // is read; `order` is null when the dataset keeps no forecast.
  common::ShardSpec shard;
  std::shared_ptr<const std::vector<uint64_t>> order;
};

Pipeline::Pipeline(const PipelineOptions& options)
    : options_(options),
      read_cache_(options.read_cache_bytes > 0
                      ? std::make_unique<ReadCache>(options.read_cache_bytes)
                      : nullptr),
      decoded_cache_(options.decoded_cache_bytes > 0
                         ? std::make_unique<DecodedCache>(
                               options.decoded_cache_bytes)
                         : nullptr),
      buffers_(BatchBufferPool::Create(options.idle_buffer_bytes)),
      workers_(options.workers, "batchd-work"),
      readers_(options.readers, "batchd-read") {}

Pipeline::~Pipeline() = default;

std::optional<ReadCacheCounts> Pipeline::read_cache_counts() const {
  if (read_cache_ == nullptr) return std::nullopt;
  return read_cache_->counts();
}

std::optional<DecodedCacheCounts> Pipeline::decoded_cache_counts() const {
  if (decoded_cache_ == nullptr) return std::nullopt;
  return decoded_cache_->counts();
}

void Pipeline::RecordRead(uint64_t nanos) {
  read_nanos_ += nanos;
  if (options_.metrics != nullptr) {
    options_.metrics->read_seconds().Observe(nanos * 1e-9);
  }
}

absl::StatusOr<FileBytes> Pipeline::ReadBytes(const ResolvedPlan& plan,
                                              uint64_t index) {
  const ResolvedPlan::SampleRef ref = plan.At(index);
  const Dataset& dataset = *ref.dataset;
  if (read_cache_ == nullptr) return dataset.ReadSample(ref.index);
  return read_cache_->Read({dataset.name(), ref.index},
                           [&] { return dataset.ReadSample(ref.index); });
}

// One reader of a dataset's shard demand: a rank of a plan. The
// fingerprint keeps apart two jobs given the same name with different plans
// (one reader's positions would jump between their orders); plans with the
// same fingerprint build the same batches, once.
std::string Pipeline::ShardReaderName(const ResolvedPlan& plan,
                                      const common::ShardSpec& shard) {
  return absl::StrCat(plan.job, "/", FingerprintLabel(plan.fingerprint), "/",
                      shard.rank, "/", shard.world_size);
}

void Pipeline::PrefetchAfter(const ResolvedPlan& plan,
                             const common::ShardSpec& shard,
                             std::shared_ptr<const std::vector<uint64_t>> order,
                             uint64_t batch_index) {
  if (plan.dataset == nullptr || !plan.dataset->prefetches()) return;
  if (options_.prefetch_batches <= 0) return;
  // Batches are a pure function of (plan, epoch, index): the next ones'
  // samples are known now. Bounded: a few batches, and the cache bounds
  // what it queues.
  const uint64_t batches = common::BatchesPerEpoch(shard);
  std::vector<uint64_t> upcoming;
  for (uint64_t next = batch_index + 1;
       next < batches &&
       next <= batch_index + static_cast<uint64_t>(options_.prefetch_batches);
       ++next) {
    for (uint64_t entry : BatchIndicesFromOrder(shard, *order, next)) {
      upcoming.push_back(common::SampleOf(entry, shard.num_samples));
    }
  }
  plan.dataset->Prefetch(upcoming);
}

PipelineCounters Pipeline::counters() const {
  PipelineCounters c;
  c.read_seconds = read_nanos_.load() * 1e-9;
  c.decode_seconds = decode_nanos_.load() * 1e-9;
  c.transform_seconds = transform_nanos_.load() * 1e-9;
  c.augment_seconds = augment_nanos_.load() * 1e-9;
  c.samples_decoded = samples_decoded_.load();
  c.samples_substituted = samples_substituted_.load();
  return c;
}

absl::Status Pipeline::BuildBatch(
    std::shared_ptr<const ResolvedPlan> plan, uint64_t epoch,
    uint64_t batch_index, BatchCancellation cancelled,
    std::function<void(std::unique_ptr<BuiltBatch>)> done,
    BatchDestination destination) {
  const common::ShardSpec shard = plan->ShardFor(epoch);
  std::shared_ptr<const std::vector<uint64_t>> order =
      orders_.Get(shard, epoch);
  // Entries of the epoch's order: with repeats, the sample and which
  // repeat (common/sampler.h); the entry keys a sample's draws.
  const std::vector<uint64_t> entries =
      BatchIndicesFromOrder(shard, *order, batch_index);
  const size_t n = entries.size();
  std::vector<uint64_t> samples = entries;
  std::vector<uint64_t> sample_indices;
  std::vector<uint32_t> repeats;
  std::vector<uint32_t> sources;
  if (shard.mixture != nullptr) {
    // A mixture's entries name (source, sample, occurrence): the plan's
    // sample number is the entry less its occurrence (common/mixture.h).
    sample_indices.reserve(n);
    sources.reserve(n);
    for (uint64_t& sample : samples) {
      sample %= shard.num_samples;
      const ResolvedPlan::SampleRef ref = plan->At(sample);
      sample_indices.push_back(ref.index);
      sources.push_back(ref.source);
    }
  } else if (shard.repeats > 1) {
    repeats.reserve(n);
    for (uint64_t& entry : samples) {
      repeats.push_back(common::RepeatOf(entry, shard.num_samples));
      entry = common::SampleOf(entry, shard.num_samples);
    }
  }
  if (shard.mixture == nullptr) sample_indices = samples;
  // Uninitialised on purpose: every byte is written by a sample task.
  const uint64_t bytes = plan->batch_bytes(n);
  absl::StatusOr<BatchBuffer> pixels;
  if (destination.data != nullptr) {
    if (bytes > destination.capacity) {
      return absl::InvalidArgumentError(absl::StrCat(
          "batch ", batch_index, " needs ", bytes, " bytes; its destination "
          "holds ", destination.capacity));
    }
    pixels = BatchBuffer(destination.data, bytes,
                         std::move(destination.owner));
  } else {
    pixels = buffers_->Acquire(bytes);
  }
  if (!pixels.ok()) return pixels.status();
  auto job = std::make_shared<BatchJob>();
  job->batch = std::make_unique<BuiltBatch>();
  BuiltBatch& batch = *job->batch;
  batch.epoch = epoch;
  batch.batch_index = batch_index;
  batch.sample_indices = std::move(sample_indices);
  batch.repeats = std::move(repeats);
  batch.sources = std::move(sources);
  batch.labels.reserve(n);
  for (uint64_t sample : samples) {
    // A json label is read with the sample (ReadFieldsAndLabel).
    if (plan->fields.label_source != LabelSource::kDataset) {
      batch.labels.push_back(-1);
      continue;
    }
    const ResolvedPlan::SampleRef ref = plan->At(sample);
    batch.labels.push_back(ref.dataset->sample(ref.index).label);
  }
  batch.shape = plan->shape(n);
  batch.erased = plan->Erased(epoch, entries);
  batch.mix = plan->Mix(epoch, batch_index);
  batch.views = plan->ViewShapes(n);
  batch.pixels = *std::move(pixels);
  job->samples = std::move(samples);
  job->entries = entries;
  job->substitutions.resize(n);
  if (!plan->fields.fields.empty()) job->fields.resize(n);
  job->remaining = n;
  job->started = std::chrono::steady_clock::now();
  job->plan = std::move(plan);
  job->cancelled = std::move(cancelled);
  job->done = std::move(done);
  if (job->plan->dataset != nullptr && job->plan->dataset->prefetches()) {
    job->shard = shard;
    job->order = order;
    // Before any of its samples is read (ReadSample publishes each batch's
    // position as its first sample is read; the rest of a stream's first
    // batch can be read before that).
    job->plan->dataset->PublishStart(ShardReaderName(*job->plan, shard), shard,
                                     order, batch_index);
    // The batch's members, fetched ahead where their shards are read by
    // ranges: the readers then find them instead of waiting a round trip
    // each. This batch's, not the next ones': with several daemons serving
    // a stream, the next batches may go to another.
    job->plan->dataset->PrefetchMembers(job->samples);
  }

  const std::string& job_name = job->plan->job;
  for (size_t position = 0; position < n; ++position) {
    readers_.Submit(job_name,
                    [this, job, position] { ReadSample(job, position); });
  }
  return absl::OkStatus();
}

void Pipeline::ReadSample(std::shared_ptr<BatchJob> job, size_t position) {
  if (job->cancelled.cancelled()) {
    FinishSample(job);
    return;
  }
  if (position == 0 && job->order != nullptr) {
    // The shard cache's eviction and whole-or-ranges choices follow every
    // reader's known future (server/storage/shard_demand.h): from the batch
    // being read now, not from the last one accepted (a client's window of
    // batches is accepted at once, and the reads of all but the last would
    // be missing from the forecast: their shards evicted or read by ranges
    // while they are being read). The next batches' prefetches are queued
    // after it, so that the cache weighs them by this forecast (queued
    // before any publication, a reader's first prefetches would find no
    // forecast and download whole shards the plan reads little of).
    const ResolvedPlan& plan = *job->plan;
    const uint64_t batch_index = job->batch->batch_index;
    plan.dataset->PublishReads(ShardReaderName(plan, job->shard), job->shard,
                               job->order, batch_index);
    PrefetchAfter(plan, job->shard, job->order, batch_index);
  }
  const uint64_t index = job->samples[position];
  const std::string job_name = job->plan->job;
  // The fields and a json label are read with the image, on the reader.
  // A failed read substitutes the sample as a failed image read does.
  SampleError read_error = SampleError::kNone;
  std::string detail;
  if (absl::Status read = ReadFieldsAndLabel(*job, position, index);
      !read.ok()) {
    read_error = SampleError::kReadError;
    detail = std::string(read.message());
  }
  if (job->plan->decoded_max_side > 0 && decoded_cache_ != nullptr &&
      read_error == SampleError::kNone) {
    // A cached capped image needs no file: straight to the workers.
    const ResolvedPlan::SampleRef ref = job->plan->At(index);
    std::shared_ptr<const CappedImage> image = decoded_cache_->Lookup(
        {ref.dataset->name(), ref.index, job->plan->decoded_max_side});
    if (image != nullptr) {
      workers_.Submit(job_name, [this, job = std::move(job), position,
                                 image = std::move(image)]() mutable {
        DecodeSample(std::move(job), position, FileBytes(), SampleError::kNone,
                     std::string(), std::move(image));
      });
      return;
    }
  }
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<FileBytes> bytes = ReadBytes(*job->plan, index);
  RecordRead(NanosSince(start));
  FileBytes data;
  if (bytes.ok()) {
    data = *std::move(bytes);
    CountContentMismatch(*job->plan, index, data);
  } else if (read_error == SampleError::kNone) {
    const DecodeResult failed = ReadFailure(*job->plan, index, bytes.status());
    read_error = failed.error;
    detail = failed.detail;
  }
  workers_.Submit(job_name, [this, job = std::move(job), position,
                             data = std::move(data), read_error,
                             detail = std::move(detail)]() mutable {
    DecodeSample(std::move(job), position, std::move(data), read_error,
                 std::move(detail), /*image=*/nullptr);
  });
}

absl::Status Pipeline::ReadFieldsAndLabel(BatchJob& job, size_t position,
                                          uint64_t index) {
  const ResolvedPlan& plan = *job.plan;
  if (plan.fields.label_source == LabelSource::kJson) {
    absl::StatusOr<int32_t> label = SampleLabel(plan, index);
    if (!label.ok()) return label.status();
    job.batch->labels[position] = *label;
  }
  if (job.fields.empty()) return absl::OkStatus();
  absl::StatusOr<SampleFields> fields = ReadSampleFields(plan, index);
  if (!fields.ok()) return fields.status();
  job.fields[position] = *std::move(fields);
  return absl::OkStatus();
}

DecodeResult Pipeline::ReadFailure(const ResolvedPlan& plan, uint64_t index,
                                   const absl::Status& status) {
  DecodeResult result;
  const ResolvedPlan::SampleRef ref = plan.At(index);
  result.error = ref.dataset->sample(ref.index).has_image
                     ? SampleError::kReadError
                     : SampleError::kNoImage;
  result.detail = std::string(status.message());
  return result;
}

void Pipeline::CountContentMismatch(const ResolvedPlan& plan, uint64_t index,
                                    const FileBytes& bytes) {
  if (options_.metrics == nullptr) return;
  const ResolvedPlan::SampleRef ref = plan.At(index);
  const std::optional<ContentKind> named =
      KindFromName(ref.dataset->sample(ref.index).path);
  if (!named.has_value()) return;
  const ContentKind content = SniffContent(bytes.bytes());
  // An empty file is EMPTY_FILE whatever its name.
  if (content == *named || content == ContentKind::kEmpty) return;
  options_.metrics->ContentMismatch(ContentKindName(*named),
                                    ContentKindName(content));
}

DecodedSample Pipeline::DecodeImage(const ResolvedPlan& plan,
                                   uint64_t sample_index,
                                   const FileBytes* bytes, int max_side) {
  DecodedSample sample;
  FileBytes read_bytes;
  if (bytes == nullptr) {
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<FileBytes> file = ReadBytes(plan, sample_index);
    RecordRead(NanosSince(start));
    if (!file.ok()) {
      sample.result = ReadFailure(plan, sample_index, file.status());
      return sample;
    }
    read_bytes = *std::move(file);
    bytes = &read_bytes;
  }
  auto image = std::make_shared<CappedImage>();
  DecodeTimings timings;
  sample.result = DecodeCapped(ThreadDecoder(options_.decode_limits),
                               bytes->bytes(), max_side, image.get(),
                               &timings);
  decode_nanos_ += static_cast<uint64_t>(timings.decode_seconds * 1e9);
  if (options_.metrics != nullptr) {
    options_.metrics->decode_seconds().Observe(timings.decode_seconds);
  }
  if (sample.result.ok()) sample.image = std::move(image);
  return sample;
}

DecodedSample Pipeline::CappedImageOf(const ResolvedPlan& plan,
                                     uint64_t sample_index,
                                     const FileBytes* bytes) {
  auto decode = [&]() -> DecodedSample {
    return DecodeImage(plan, sample_index, bytes,
                       static_cast<int>(plan.decoded_max_side));
  };
  if (decoded_cache_ == nullptr) return decode();
  const ResolvedPlan::SampleRef ref = plan.At(sample_index);
  return decoded_cache_->Get(
      {ref.dataset->name(), ref.index, plan.decoded_max_side}, decode);
}

DecodeResult Pipeline::DecodeViews(const ResolvedPlan& plan, uint64_t epoch,
                                   uint64_t entry, const FileBytes* bytes,
                                   std::shared_ptr<const CappedImage> image,
                                   BuiltBatch& batch, size_t position) {
  if (image == nullptr) {
    const uint64_t sample_index =
        common::SampleOf(entry, plan.shard.num_samples);
    // Decode once, cut every view from it: the capped image (through the
    // decoded cache), or without a cap the whole image at full size, since
    // the views' windows together may cover any part of it.
    DecodedSample sample =
        plan.decoded_max_side > 0
            ? CappedImageOf(plan, sample_index, bytes)
            : DecodeImage(plan, sample_index, bytes,
                          static_cast<int>(kMaxDecodedSide));
    if (!sample.result.ok()) return sample.result;
    image = std::move(sample.image);
  }
  const uint64_t samples = batch.sample_indices.size();
  const bool planes = plan.pixel_layout() == PixelLayout::kCHW;
  DecodeResult result;
  for (uint32_t view = 0; view < plan.view_count(); ++view) {
    uint8_t* out = batch.pixels.data() + plan.view_offset(view, samples) +
                   position * plan.view_bytes(view);
    // The ops work on HWC pixels: an NCHW view with ops is cut into a
    // scratch sample first, and written as planes once augmented.
    const bool ops = plan.view_has_ops(view);
    uint8_t* cut = ops && planes ? ThreadHwcSample(plan.view_bytes(view)) : out;
    const auto start = std::chrono::steady_clock::now();
    result = TransformCapped(
        ThreadResizer(), *image,
        [&](int width, int height) {
          return plan.ViewCrop(epoch, entry, view, width, height);
        },
        ops ? PixelLayout::kHWC : plan.pixel_layout(), cut);
    const uint64_t nanos = NanosSince(start);
    transform_nanos_ += nanos;
    if (options_.metrics != nullptr) {
      options_.metrics->transform_seconds().Observe(nanos * 1e-9);
    }
    if (!result.ok()) return result;
    if (ops) AugmentSample(plan, epoch, entry, cut, planes ? out : nullptr, view);
  }
  return result;
}

void Pipeline::ZeroSample(const ResolvedPlan& plan, BuiltBatch& batch,
                          size_t position) {
  const uint64_t samples = batch.sample_indices.size();
  for (uint32_t view = 0; view < plan.view_count(); ++view) {
    std::memset(batch.pixels.data() + plan.view_offset(view, samples) +
                    position * plan.view_bytes(view),
                0, plan.view_bytes(view));
  }
}

DecodeResult Pipeline::DecodeOne(const ResolvedPlan& plan, uint64_t epoch,
                                 uint64_t entry, const FileBytes* bytes,
                                 std::shared_ptr<const CappedImage> image,
                                 uint8_t* out) {
  if (plan.augment.empty()) {
    return DecodeCrop(plan, epoch, entry, bytes, std::move(image),
                      plan.pixel_layout(), out);
  }
  // The ops work on HWC pixels: an NCHW sample is decoded into a scratch
  // sample first, and written as planes once augmented.
  const bool planes = plan.pixel_layout() == PixelLayout::kCHW;
  uint8_t* hwc = planes ? ThreadHwcSample(plan.sample_bytes()) : out;
  DecodeResult result = DecodeCrop(plan, epoch, entry, bytes,
                                   std::move(image), PixelLayout::kHWC, hwc);
  if (result.ok()) {
    AugmentSample(plan, epoch, entry, hwc, planes ? out : nullptr);
  }
  return result;
}

void Pipeline::AugmentSample(const ResolvedPlan& plan, uint64_t epoch,
                             uint64_t entry, uint8_t* hwc, uint8_t* chw,
                             uint32_t view) {
  const auto start = std::chrono::steady_clock::now();
  const int size = plan.view_size(view);
  const std::vector<augment::OpCall> calls =
      plan.ViewAugmentCalls(epoch, entry, view, size, size);
  const uint64_t sample_index =
      common::SampleOf(entry, plan.shard.num_samples);
  if (options_.log_augment_sample >= 0 &&
      sample_index == static_cast<uint64_t>(options_.log_augment_sample)) {
    std::fprintf(stderr, "batchd: augment: plan %s epoch %llu sample %llu: %s\n",
                 FingerprintLabel(plan.fingerprint).c_str(),
                 static_cast<unsigned long long>(epoch),
                 static_cast<unsigned long long>(sample_index),
                 augment::Describe(calls).c_str());
  }
  augment::Apply(calls,
                 augment::Image{hwc, size, size, ptrdiff_t{3} * size},
                 &ThreadAugmentScratch());
  if (chw != nullptr) HwcToChw(hwc, size, chw);
  const uint64_t nanos = NanosSince(start);
  augment_nanos_ += nanos;
  if (options_.metrics != nullptr) {
    options_.metrics->augment_seconds().Observe(nanos * 1e-9);
  }
}

DecodeResult Pipeline::DecodeCrop(const ResolvedPlan& plan, uint64_t epoch,
                                  uint64_t entry, const FileBytes* bytes,
                                  std::shared_ptr<const CappedImage> image,
                                  PixelLayout layout, uint8_t* out) {
  const uint64_t sample_index =
      common::SampleOf(entry, plan.shard.num_samples);
  if (plan.decoded_max_side > 0) {
    if (image == nullptr) {
      DecodedSample sample = CappedImageOf(plan, sample_index, bytes);
      if (!sample.result.ok()) return sample.result;
      image = std::move(sample.image);
    }
    const auto start = std::chrono::steady_clock::now();
    DecodeResult result = TransformCapped(
        ThreadResizer(), *image,
        [&](int width, int height) {
          return plan.Crop(epoch, entry, width, height);
        },
        layout, out);
    const uint64_t nanos = NanosSince(start);
    transform_nanos_ += nanos;
    if (options_.metrics != nullptr) {
      options_.metrics->transform_seconds().Observe(nanos * 1e-9);
    }
    return result;
  }
  FileBytes read_bytes;
  if (bytes == nullptr) {
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<FileBytes> file = ReadBytes(plan, sample_index);
    RecordRead(NanosSince(start));
    if (!file.ok()) return ReadFailure(plan, sample_index, file.status());
    read_bytes = *std::move(file);
    bytes = &read_bytes;
  }
  DecodeTimings timings;
  DecodeResult result = ThreadDecoder(options_.decode_limits)
                            .Decode(
                                bytes->bytes(),
                                [&](int width, int height) {
                                  return plan.Crop(epoch, entry, width,
                                                   height);
                                },
                                layout, out, &timings);
  decode_nanos_ += static_cast<uint64_t>(timings.decode_seconds * 1e9);
  transform_nanos_ += static_cast<uint64_t>(timings.transform_seconds * 1e9);
  if (options_.metrics != nullptr) {
    options_.metrics->decode_seconds().Observe(timings.decode_seconds);
    options_.metrics->transform_seconds().Observe(timings.transform_seconds);
  }
  return result;
}

void Pipeline::DecodeSample(std::shared_ptr<BatchJob> job, size_t position,
                            FileBytes bytes, SampleError read_error,
                            std::string read_detail,
                            std::shared_ptr<const CappedImage> image) {
  if (job->cancelled.cancelled()) {
    FinishSample(job);
    return;
  }
  const ResolvedPlan& plan = *job->plan;
  BuiltBatch& batch = *job->batch;
  const uint64_t index = job->samples[position];
  // Repeat r of sample i draws as entry i + r * N (common/sampler.h), a
  // mixture's occurrence o as i + o * T (common/mixture.h).
  const uint64_t repeat_offset = job->entries[position] - index;
  // Without views the sample's pixels are contiguous at `out`; with views
  // DecodeViews places each view.
  uint8_t* out = batch.pixels.data() + position * plan.sample_bytes();
  auto decode = [&](uint64_t entry, const FileBytes* from,
                    std::shared_ptr<const CappedImage> decoded) {
    return plan.views.empty()
               ? DecodeOne(plan, batch.epoch, entry, from, std::move(decoded),
                           out)
               : DecodeViews(plan, batch.epoch, entry, from,
                             std::move(decoded), batch, position);
  };

  // MISSING_FIELD_SUBSTITUTE: a sample without a requested field is
  // replaced whole, as a bad image is.
  const bool lacks_fields =
      plan.fields.substitute_missing && !HasAllFields(plan, index);
  DecodeResult result{read_error, std::move(read_detail)};
  if (read_error == SampleError::kNone && !lacks_fields) {
    result = decode(index + repeat_offset,
                    image != nullptr ? nullptr : &bytes, std::move(image));
  }
  samples_decoded_.fetch_add(1, std::memory_order_relaxed);
  if (result.damage != SampleError::kNone && options_.metrics != nullptr) {
    // --corrupt-policy decode: kept, and counted apart from substitutions.
    options_.metrics->SampleDecodedDamaged(ToReason(result.damage));
  }
  if (lacks_fields || !result.ok()) {
    // A deterministic substitute: candidates come from the plan's generator
    // keyed by (seed, epoch, sample), so every daemon picks the same one.
    const batchd::v1::SubstitutionReason reason =
        result.ok() ? batchd::v1::SUBSTITUTION_REASON_UNSPECIFIED
                    : ToReason(result.error);
    samples_substituted_.fetch_add(1, std::memory_order_relaxed);
    if (options_.metrics != nullptr) {
      options_.metrics->SampleSubstituted(reason);
    }
    // Substitutes come from the sample's own dataset; the indices sent
    // are that dataset's (a mixture's plan sample numbers less `first`).
    const ResolvedPlan::SampleRef ref = plan.At(index);
    const uint64_t first = index - ref.index;
    batchd::v1::Substitution sub;
    sub.set_position(static_cast<uint32_t>(position));
    sub.set_original_index(ref.index);
    sub.set_substitute_index(ref.index);
    sub.set_reason(reason);
    sub.set_detail(result.ok() ? MissingFieldDetail(plan, index)
                               : result.detail.substr(0, 200));
    common::SampleRandom rng(plan.shard.seed, batch.epoch, index,
                             common::RandomPurpose::kSubstitute);
    bool found = false;
    const uint64_t n = ref.dataset->size();
    for (int attempt = 0; attempt < options_.max_substitute_attempts && n > 1;
         ++attempt) {
      const uint64_t candidate = first + rng.UniformInt(n);
      if (candidate == index) continue;
      if (plan.fields.substitute_missing && !HasAllFields(plan, candidate)) {
        continue;
      }
      if (!decode(candidate + repeat_offset, nullptr, nullptr).ok()) {
        continue;
      }
      // The fields follow the pixels: a substitute's caption with its
      // image.
      if (!job->fields.empty()) {
        absl::StatusOr<SampleFields> fields =
            ReadSampleFields(plan, candidate);
        if (!fields.ok()) continue;
        job->fields[position] = *std::move(fields);
      }
      sub.set_substitute_index(candidate - first);
      found = true;
      break;
    }
    if (!found) ZeroSample(plan, batch, position);
    job->substitutions[position] = std::move(sub);
  }
  FinishSample(job);
}

void Pipeline::FinishSample(const std::shared_ptr<BatchJob>& job) {
  // acq_rel: the last finisher sees every other task's writes to the batch.
  if (job->remaining.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  if (job->cancelled.cancelled()) {
    job->done(nullptr);
    return;
  }
  for (auto& sub : job->substitutions) {
    if (sub.has_value()) job->batch->substitutions.push_back(std::move(*sub));
  }
  if (!job->fields.empty()) AssembleFields(job->plan->fields, job->fields,
                                           job->batch.get());
  job->batch->finished = absl::Now();
  if (options_.metrics != nullptr) {
    options_.metrics->assemble_seconds().Observe(NanosSince(job->started) *
                                                 1e-9);
  }
  job->done(std::move(job->batch));
}

}  // namespace batchd::server
