// Pipeline's scheduling of a batch: its samples read on the reader pool
// (with their fields), decoded on the worker pool (pipeline_decode.cc), bad
// ones substituted, and the batch assembled once every sample is done.
#include "server/pipeline/pipeline.h"

#include <chrono>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/random.h"
#include "server/dataset/dataset.h"
#include "server/decode/image_format.h"
#include "server/pipeline/pipeline_internal.h"
#include "server/pipeline/sample_fields.h"

namespace batchd::server {

using pipeline_internal::AssembleFields;
using pipeline_internal::MissingFieldDetail;
using pipeline_internal::NanosSince;
using pipeline_internal::ReadFieldsAndLabel;
using pipeline_internal::ZeroSample;

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
  if (absl::Status read = ReadFieldsAndLabel(
          *job->plan, index, &job->batch->labels[position],
          job->fields.empty() ? nullptr : &job->fields[position]);
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
