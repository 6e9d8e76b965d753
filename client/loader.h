// The batchd client: streams the batches of one plan from one or more
// daemons, in order.
//
// A Loader keeps a ring of `window` host buffers ("slots", client/slot_ring.h),
// allocated once through a BufferAllocator and reused. It asks for a batch
// only when a slot is free for it (credit-based flow control: never more
// batches outstanding than free slots), so memory stays bounded. With
// several daemons it holds one StreamBatches stream to each
// (client/daemon_stream.h), spreads its requests over the healthy ones
// (client/request_scheduler.h), asks again elsewhere for what a lost daemon
// owed, and hedges batches that take far longer than usual (all of that is
// client/daemon_set.h). Each stream's reader thread writes chunks straight
// into their batch's slot (one copy from the gRPC message); batches may
// arrive in any order and from any daemon, and Next() hands them out in
// batch-index order. Because a batch is
// a pure function of (plan, epoch, index), the bytes are the same whichever
// daemon produced them.
//
//   LoaderOptions options;
//   options.endpoint = "host-a:7070,host-b:7070";  // or "dns:///svc:7070"
//   options.plan = plan;
//   ASSIGN_OR_RETURN(std::unique_ptr<Loader> loader,
//                    Loader::Create(std::move(options)));
//   RETURN_IF_ERROR(loader->StartEpoch(/*epoch=*/0));
//   for (;;) {
//     absl::StatusOr<Batch> batch = loader->Next();
//     if (absl::IsOutOfRange(batch.status())) break;  // end of the epoch
//     if (!batch.ok()) return batch.status();
//     Train(batch->data(), batch->size(), batch->labels);
//   }  // each Batch returns its slot to the ring when destroyed
//
// Thread-safety: Next(), StartEpoch() and Restore() are called by one
// consumer thread at a time. state(), stats(), timeline(), opened(),
// batches_per_epoch(), RecordCopy(), Diagnose(), epoch_diagnosis() and
// Cancel() may be called from any thread. A Batch may be released
// (destroyed) on any thread, also after its Loader is gone.
#ifndef BATCHD_CLIENT_LOADER_H_
#define BATCHD_CLIENT_LOADER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "batchd/v1/admin.pb.h"
#include "batchd/v1/data.pb.h"
#include "client/buffer.h"
#include "client/channel_security.h"
#include "client/endpoints.h"
#include "client/loader_options.h"
#include "client/loader_stats.h"
#include "client/step_timeline.h"
#include "grpcpp/channel.h"

namespace batchd::client {

namespace internal {
class LoaderCore;
}  // namespace internal

struct Diagnosis;  // client/diagnosis.h

// Which samples a batch holds, as the daemon's header says; shared by Batch
// and DeviceBatch.
struct BatchInfo {
  uint64_t epoch = 0;
  uint64_t batch_index = 0;
  // Dataset index and label of each sample, in order.
  std::vector<uint64_t> sample_indices;
  std::vector<int32_t> labels;
  // With Plan.repeats > 1: which repeat of its image each sample is; empty
  // otherwise.
  std::vector<uint32_t> repeats;
  // With Plan.sources: each sample's source (its number in Plan.sources);
  // sample_indices are then indices in that source's dataset. Empty
  // otherwise.
  std::vector<uint32_t> sources;
  // Samples whose pixels come from another sample, if any.
  std::vector<batchd::v1::Substitution> substitutions;
  // The plan's fields (Plan.fields), sample by sample: field(i, j) is
  // sample i's field j, in the plan's order, a view of `field_data` (valid
  // while this object, or a copy of `field_data`, lives). Empty without
  // fields. With a substitute's pixels come the substitute's fields.
  size_t field_count = 0;
  std::vector<absl::string_view> fields;
  // Per field, the samples whose member was cut to its bound or missing.
  std::vector<batchd::v1::FieldCounts> field_counts;
  std::shared_ptr<const std::string> field_data;

  absl::string_view field(size_t sample, size_t field) const {
    return fields[sample * field_count + field];
  }

  // Pipeline.erasing and Pipeline.mix: what the daemon drew for this batch
  // (BatchHeader.erased, BatchHeader.mix). A DeviceLoader applies them; a
  // plain Loader hands them over with the raw pixels.
  std::vector<batchd::v1::ErasedRegion> erased;
  std::optional<batchd::v1::BatchMix> mix;

  // With Plan.views: each view's shape ([n, H, W, 3] or [n, 3, H, W]) and
  // the byte offset of its pixels within the batch's, in the plan's group
  // order (BatchHeader.views; checked to tile the pixels exactly); empty
  // without views, when `shape` is the images' shape.
  std::vector<batchd::v1::ViewShape> views;
};

// One batch, leasing a slot of the loader's ring. The pixel bytes stay valid
// (and the slot stays out of use) until the Batch is destroyed, moved-from
// or Release()d. Move-only.
class Batch : public BatchInfo {
 public:
  // [n, H, W, C] for NHWC or [n, C, H, W] for NCHW; n may be smaller than
  // the plan's batch size for the last batch of an epoch.
  std::vector<uint64_t> shape;
  // Never LAYOUT_UNSPECIFIED (that is reported as LAYOUT_NHWC).
  batchd::v1::Layout layout = batchd::v1::LAYOUT_NHWC;

  // The batch's pixels, uint8, `size()` bytes; nullptr for an empty Batch.
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  // View `view`'s pixels (REQUIRES: view < views.size()), views[view]
  // .shape() bytes.
  const uint8_t* view_data(size_t view) const {
    return data_ + views[view].offset();
  }

  Batch() = default;
  Batch(Batch&& other) noexcept;
  Batch& operator=(Batch&& other) noexcept;
  Batch(const Batch&) = delete;
  Batch& operator=(const Batch&) = delete;
  // Returns the slot to the ring.
  ~Batch();

  // Returns the slot to the ring now; data() becomes nullptr. Idempotent.
  void Release();

 private:
  friend class internal::LoaderCore;

  std::shared_ptr<internal::LoaderCore> core_;  // null when empty
  int slot_ = -1;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Where a consumer is within the stream; store it in training checkpoints.
struct LoaderState {
  uint64_t epoch = 0;
  // Index of the batch the next Next() returns.
  uint64_t next_batch = 0;
  // The epoch's global position that every rank of the plan's world has
  // reached once each has returned `next_batch` batches in lockstep
  // (common::GlobalPosition; the dataset's size once the epoch is done).
  // To resume on another world size, open the plan with
  // Plan.resume = {epoch, position} and StartEpoch(epoch, 0): every
  // remaining sample comes exactly once over the new ranks
  // (docs/python.md, "Elastic resume"). Set by state(); Restore() reads
  // only epoch and next_batch.
  uint64_t position = 0;
};

// Streams one plan's batches from its daemons. See the file comment.
class Loader {
 public:
  // Connects to every daemon of `options.endpoint`, waits for the first
  // to open the plan, then allocates the ring; the others join as they
  // answer. Blocks up to `options.connect_timeout`.
  // Errors: INVALID_ARGUMENT for a malformed endpoint; UNAVAILABLE when no
  // daemon can be reached; a daemon's own status (code and message, e.g.
  // INVALID_ARGUMENT naming the bad field) for a plan every daemon refuses;
  // DEADLINE_EXCEEDED when a daemon connected but did not answer; INTERNAL
  // for a malformed answer; the allocator's error.
  // The first call also raises glibc's mmap and trim thresholds for the
  // whole process (common/malloc_tuning.h): receiving 4 MiB messages
  // otherwise costs page faults on every message.
  static absl::StatusOr<std::unique_ptr<Loader>> Create(LoaderOptions options);

  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;
  // Cancels the stream (or half-closes it when nothing is outstanding) and
  // joins the reader thread. Batches still held stay valid.
  ~Loader();

  // The daemon's answer to the plan: granted window, shape, sizes.
  const batchd::v1::PlanOpened& opened() const;
  uint64_t batches_per_epoch() const;
  // Slots in the ring: the granted window, capped at a non-zero `prefetch`;
  // with auto_prefetch, the slots grown to so far.
  uint32_t window() const;

  // Starts returning batches `first_batch`, `first_batch`+1, ... of `epoch`
  // and requests as many as there are free slots. Batches still outstanding
  // from before are no longer wanted: they still arrive (the daemon counts
  // them against the window) and their slots are freed on arrival. Batches
  // of the new range already requested or received (the next epoch's first
  // batches, read ahead; see next_epoch_prefetch) are kept; other batches
  // received but not returned are dropped.
  // INVALID_ARGUMENT for `epoch` >= 2^32 or `first_batch` >
  // batches_per_epoch(); the sticky stream error if the stream has failed.
  absl::Status StartEpoch(uint64_t epoch, uint64_t first_batch = 0);

  // Blocks until the next batch in index order is complete and returns it.
  // OUT_OF_RANGE after the epoch's last batch; FAILED_PRECONDITION before
  // StartEpoch(), or when every slot is leased by a held Batch (release one).
  // A batch the daemon rejected returns the rejection's code and message;
  // the position does not advance, so calling Next() again asks for that
  // batch again. A lost daemon is not an error while another can serve
  // its batches (or it comes back within `unavailable_timeout`). Errors are
  // sticky: UNAVAILABLE when no daemon was up for `unavailable_timeout`
  // (the message names each daemon and its last error), or, once every
  // daemon has failed for good, the last one's error (INTERNAL for a
  // protocol violation, UNAVAILABLE for a stream ended with batches owed,
  // or the daemon's status). Batches that arrived completely before a
  // failure are still returned first. CANCELLED once Cancel() has been
  // called (ready batches are not returned then).
  // Stall accounting: the time inside Next() counts as waited, the time
  // since the previous call returned as compute (see Stats). At the end of
  // an epoch Next() also diagnoses it, which fetches the daemon's status
  // once (up to 2 s), and calls LoaderOptions::report.
  absl::StatusOr<Batch> Next();

  // Makes every Next() blocked now, and every later one, return CANCELLED
  // ("the loader was cancelled") promptly, and cancels the stream, so that
  // a consumer thread stuck on a daemon that stopped answering can be woken
  // and joined before the Loader is destroyed. Later StartEpoch() and
  // Restore() calls return CANCELLED too. Batches already returned stay
  // valid. The Loader still belongs to its owner, who destroys it once no
  // thread is inside Next(). Idempotent; any thread.
  void Cancel();

  // (epoch, index of the batch the next Next() returns).
  LoaderState state() const;
  // Same as StartEpoch(state.epoch, state.next_batch). Both also fetch the
  // daemon's status (up to 2 s) to mark the start of the epoch's diagnosis.
  absl::Status Restore(const LoaderState& state);

  // Where one step's time went, and totals since Create()
  // (client/loader_stats.h).
  using StepTimes = LoaderStepTimes;
  using Stats = LoaderStats;
  Stats stats() const;

  // The last 1024 finished steps, oldest first: when each began and how
  // long it waited in Next(), copied (RecordCopy) and computed
  // (client/step_timeline.h). A step ends when the following Next() is
  // entered, so the step in progress is not among them. Any thread.
  std::vector<TimelineStep> timeline() const;

  // Adds `duration` to the copy time (of the total and of the last step):
  // for a copy path outside the loader, e.g. host to device. Any thread.
  void RecordCopy(absl::Duration duration);

  // One-line diagnosis of the current epoch so far (since StartEpoch() or
  // Restore(), or Create()): the client's figures combined with the
  // daemon's admin status, fetched now (up to 2 s; without it the verdict
  // uses the client's figures alone). See client/diagnosis.h.
  Diagnosis Diagnose();
  // The line reported for the last epoch that ended, or "" if none has.
  std::string epoch_diagnosis() const;

 private:
  explicit Loader(std::shared_ptr<internal::LoaderCore> core);

  // Shared with the Batches this loader returned.
  const std::shared_ptr<internal::LoaderCore> core_;
};

}  // namespace batchd::client

#endif  // BATCHD_CLIENT_LOADER_H_
