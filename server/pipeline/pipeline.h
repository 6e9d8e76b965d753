// Pipeline: builds batches. Given a resolved plan, an epoch and a batch
// index, it reads the batch's files on the reader pool, decodes and
// transforms each sample on the shared worker pool (one task per sample,
// writing straight into its slot of the batch buffer), and hands the
// finished batch to a callback.
//
// A batch is a pure function of (plan, epoch, batch index): every random
// number comes from common::SampleRandom keyed by (seed, epoch, sample), so
// the bytes do not depend on worker count, scheduling or daemon.
//
// Thread-safe. Owns its reader and worker pools. The destructor discards
// queued work (its callbacks never run) and waits for running tasks.
//
// Defined in pipeline.cc (a batch's reads, substitutes and assembly),
// pipeline_decode.cc (one sample's pixels: crop, views, augmentation) and
// pipeline_fields.cc (fields and json labels, pipeline_internal.h).
#ifndef BATCHD_SERVER_PIPELINE_PIPELINE_H_
#define BATCHD_SERVER_PIPELINE_PIPELINE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "batchd/v1/data.pb.h"
#include "common/sampler.h"
#include "server/pipeline/batch_buffer_pool.h"
#include "server/decode/capped_image.h"
#include "server/decode/decode_result.h"
#include "server/pipeline/decoded_cache.h"
#include "server/plan/resolved_plan.h"
#include "server/pipeline/read_cache.h"
#include "server/sched/worker_pool.h"
#include "server/storage/counting_object_store.h"
#include "server/storage/shard_cache.h"
#include "server/metrics/server_metrics.h"

namespace batchd::server {

// What a finished batch's header says (everything but its pixels).
struct BatchMetadata {
  uint64_t epoch = 0;
  uint64_t batch_index = 0;
  std::vector<uint64_t> sample_indices;
  // With Plan.repeats > 1: which repeat of its sample each one is; empty
  // otherwise (batchd.v1.BatchHeader.repeats).
  std::vector<uint32_t> repeats;
  // With Plan.sources: each sample's source; sample_indices are then
  // indices in its dataset (batchd.v1.BatchHeader.sources). Empty otherwise.
  std::vector<uint32_t> sources;
  std::vector<int32_t> labels;
  std::vector<uint64_t> shape;
  std::vector<batchd::v1::Substitution> substitutions;
  // The plan's fields (BatchHeader.field_data, field_sizes,
  // field_counts); empty without fields.
  std::string field_data;
  std::vector<uint32_t> field_sizes;
  std::vector<batchd::v1::FieldCounts> field_counts;
  // BatchHeader.erased and .mix (ResolvedPlan::Erased, ::Mix).
  std::vector<batchd::v1::ErasedRegion> erased;
  std::optional<batchd::v1::BatchMix> mix;
  // BatchHeader.views (ResolvedPlan::ViewShapes); empty without views.
  std::vector<batchd::v1::ViewShape> views;
  absl::Time finished;  // when the last sample was written
};

// A finished batch: its header's metadata and its pixel bytes.
struct BuiltBatch : BatchMetadata {
  BatchBuffer pixels;
};

// Cumulative counters, summed over threads.
struct PipelineCounters {
  double read_seconds = 0;
  double decode_seconds = 0;
  double transform_seconds = 0;
  double augment_seconds = 0;  // the plans' augmentation ops
  uint64_t samples_decoded = 0;
  uint64_t samples_substituted = 0;
};

struct PipelineOptions {
  int workers = 1;
  int readers = 2;
  DecodeLimits decode_limits;
  // Candidates tried, in the plan's random order, to substitute a bad sample
  // before giving up and zero-filling it.
  int max_substitute_attempts = 8;
  // Finished batches' buffers kept for reuse (server/pipeline/batch_buffer_pool.h).
  uint64_t idle_buffer_bytes = uint64_t{256} << 20;
  // Encoded samples kept for every plan (server/pipeline/read_cache.h); 0: none.
  uint64_t read_cache_bytes = 0;
  // Capped decoded images kept for every plan with decoded_max_side
  // (server/pipeline/decoded_cache.h); 0: none.
  uint64_t decoded_cache_bytes = 0;
  // Where stage times and substitutions are recorded; nullptr records
  // nothing. Not owned; must outlive the Pipeline.
  ServerMetrics* metrics = nullptr;
  // When a batch starts, the shards of this many following batches of its
  // epoch are prefetched (Dataset::Prefetch; remote datasets only).
  int prefetch_batches = 2;
  // Remote datasets' shard cache and store counters, reported in the
  // status; nullptr when there are none.
  std::shared_ptr<ShardCache> shard_cache;
  std::shared_ptr<ObjectStoreCounters> store_counters;
  // A debugging aid (--log-augment-sample): each time the sample of this
  // dataset index is built with augmentation ops, its drawn calls are
  // written to stderr (augment::Describe). -1: never.
  int64_t log_augment_sample = -1;
};

// Whether a batch's remaining work is unwanted: its stream ended, or the
// client withdrew this one batch. Both flags are shared with the stream,
// which sets them; neither may be null.
struct BatchCancellation {
  std::shared_ptr<const std::atomic<bool>> stream;
  std::shared_ptr<const std::atomic<bool>> batch;

  bool cancelled() const {
    return stream->load(std::memory_order_relaxed) ||
           batch->load(std::memory_order_relaxed);
  }
};

// Memory a batch is to be written into instead of the pipeline's own
// buffers: a client's shared-memory slot. `owner` keeps it mapped until the
// last task that writes it is done, even if the stream ends first.
struct BatchDestination {
  uint8_t* data = nullptr;
  size_t capacity = 0;
  std::shared_ptr<const void> owner;
};

class Pipeline {
 public:
  explicit Pipeline(const PipelineOptions& options);
  ~Pipeline();

  // Starts building batch `batch_index` of `epoch` for `plan`, and calls
  // `done` once, on a pool thread: with the batch, or with nullptr when
  // `cancelled` was seen first (the remaining work was skipped).
  // RESOURCE_EXHAUSTED, with nothing started and `done` never called, when
  // there is no memory for the batch. With a `destination`, the pixels are
  // written there (BuiltBatch::pixels is a view of it) and nothing else;
  // INVALID_ARGUMENT when the batch does not fit it.
  // REQUIRES: batch_index < the plan's BatchesPerEpoch, epoch < 2^32.
  absl::Status BuildBatch(std::shared_ptr<const ResolvedPlan> plan,
                          uint64_t epoch, uint64_t batch_index,
                          BatchCancellation cancelled,
                          std::function<void(std::unique_ptr<BuiltBatch>)> done,
                          BatchDestination destination = {});

  WorkerPool& workers() { return workers_; }
  // Samples waiting for a reader thread.
  uint64_t read_queued() const { return readers_.queued(); }
  // Bytes of finished batches' buffers kept for reuse.
  uint64_t idle_buffer_bytes() const { return buffers_->idle_bytes(); }
  PipelineCounters counters() const;
  // The read cache's counts; nullopt without one.
  std::optional<ReadCacheCounts> read_cache_counts() const;
  uint64_t read_cache_bytes() const { return options_.read_cache_bytes; }
  // The remote shard cache and store counters (nullptr without them).
  const ShardCache* shard_cache() const { return options_.shard_cache.get(); }
  const ObjectStoreCounters* store_counters() const {
    return options_.store_counters.get();
  }
  // The decoded-image cache's counts; nullopt without one.
  std::optional<DecodedCacheCounts> decoded_cache_counts() const;
  uint64_t decoded_cache_bytes() const {
    return options_.decoded_cache_bytes;
  }

 private:
  struct BatchJob;
  void ReadSample(std::shared_ptr<BatchJob> job, size_t position);
  // `image`: the sample's capped image when the reader found it cached
  // (then `bytes` is empty), else null.
  void DecodeSample(std::shared_ptr<BatchJob> job, size_t position,
                    FileBytes bytes, SampleError read_error,
                    std::string read_detail,
                    std::shared_ptr<const CappedImage> image);
  // Decodes epoch-order entry `entry` (its sample, common::SampleOf; the
  // entry, which tells repeats apart, keys its random draws) into `out` and
  // applies the plan's augmentation ops; reads the file itself when `bytes`
  // is null (substitutes are rare, so they are read on the worker). With
  // the plan's decoded_max_side, crops `image` when given, else the capped
  // image from the decoded cache or decoded now.
  DecodeResult DecodeOne(const ResolvedPlan& plan, uint64_t epoch,
                         uint64_t entry, const FileBytes* bytes,
                         std::shared_ptr<const CappedImage> image,
                         uint8_t* out);
  // DecodeOne for a plan with views: the sample decoded once (the capped
  // image, cached or not, or the whole file at full size) and each view
  // cut from it into its place in `batch` at `position`.
  DecodeResult DecodeViews(const ResolvedPlan& plan, uint64_t epoch,
                           uint64_t entry, const FileBytes* bytes,
                           std::shared_ptr<const CappedImage> image,
                           BuiltBatch& batch, size_t position);
  // DecodeOne's crop, resize and flip, written in `layout`.
  DecodeResult DecodeCrop(const ResolvedPlan& plan, uint64_t epoch,
                          uint64_t entry, const FileBytes* bytes,
                          std::shared_ptr<const CappedImage> image,
                          PixelLayout layout, uint8_t* out);
  // Draws and applies the augmentation calls of `entry` on `hwc`
  // (the sample's HWC pixels, in place), then, when `chw` is not null,
  // writes them as CHW planes there. REQUIRES: plan.augment is not empty.
  void AugmentSample(const ResolvedPlan& plan, uint64_t epoch,
                     uint64_t entry, uint8_t* hwc, uint8_t* chw,
                     uint32_t view = 0);
  // What a failed read of plan sample `index` (ResolvedPlan::At) gives: kNoImage for a tar shard key
  // without an image member, kReadError otherwise, with `status`'s message.
  static DecodeResult ReadFailure(const ResolvedPlan& plan, uint64_t index,
                                  const absl::Status& status);
  // Counts (batchd_content_mismatches_total) a sample whose bytes are not
  // the format its name says; read once per sample read, never for a
  // substitute's read.
  void CountContentMismatch(const ResolvedPlan& plan, uint64_t index,
                            const FileBytes& bytes);
  // `sample_index` decoded whole, its longer side capped at `max_side`
  // (server/decode/capped_image.h); reads the file when `bytes` is null.
  DecodedSample DecodeImage(const ResolvedPlan& plan, uint64_t sample_index,
                            const FileBytes* bytes, int max_side);
  // The capped image of `sample_index` (plan.decoded_max_side > 0), through
  // the decoded cache if any; reads the file when `bytes` is null.
  DecodedSample CappedImageOf(const ResolvedPlan& plan, uint64_t sample_index,
                              const FileBytes* bytes);
  // Records the time a read took.
  void RecordRead(uint64_t nanos);
  void FinishSample(const std::shared_ptr<BatchJob>& job);
  // Asks a remote dataset's shard cache to prefetch the samples of the
  // prefetch_batches batches after `batch_index`; called as that batch's
  // first sample is read, after its reader's position is published.
  static std::string ShardReaderName(const ResolvedPlan& plan,
                                     const common::ShardSpec& shard);
  void PrefetchAfter(const ResolvedPlan& plan, const common::ShardSpec& shard,
                     std::shared_ptr<const std::vector<uint64_t>> order,
                     uint64_t batch_index);
  // Sample `index` of `plan`'s dataset, through the read cache if any.
  absl::StatusOr<FileBytes> ReadBytes(const ResolvedPlan& plan,
                                      uint64_t index);

  // Constant after construction.
  const PipelineOptions options_;
  common::EpochOrderCache orders_;
  const std::unique_ptr<ReadCache> read_cache_;  // null without one
  const std::unique_ptr<DecodedCache> decoded_cache_;  // null without one

  std::atomic<uint64_t> read_nanos_{0};
  std::atomic<uint64_t> decode_nanos_{0};
  std::atomic<uint64_t> transform_nanos_{0};
  std::atomic<uint64_t> augment_nanos_{0};
  std::atomic<uint64_t> samples_decoded_{0};
  std::atomic<uint64_t> samples_substituted_{0};

  // Declared last: destroyed (joined) first, while the rest is alive.
  const std::shared_ptr<BatchBufferPool> buffers_;
  WorkerPool workers_;
  WorkerPool readers_;
};

// The proto enum for a decoder error.
batchd::v1::SubstitutionReason ToReason(SampleError error);

}  // namespace batchd::server

#endif  // BATCHD_SERVER_PIPELINE_PIPELINE_H_
