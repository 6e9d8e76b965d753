// The batchd client: streams the batches of one plan from a daemon, in order.
//
// A Loader owns one StreamBatches stream (see proto/batchd/v1/data.proto) and
// a ring of `window` host buffers ("slots"), allocated once through a
// BufferAllocator and reused. It asks for a batch only when a slot is free
// for it (credit-based flow control, DESIGN.md §3), so at most `window`
// batches are ever outstanding and memory stays bounded. A reader thread
// writes each chunk straight into its batch's slot (one copy from the gRPC
// message); batches may arrive in any order and Next() hands them out in
// batch-index order.
//
//   LoaderOptions options;
//   options.endpoint = "localhost:7070";
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
// consumer thread at a time. state(), stats(), opened(),
// batches_per_epoch(), RecordCopy(), Diagnose(), epoch_diagnosis() and
// Cancel() may be called from any thread. A Batch may be released (destroyed) on any thread,
// also after its Loader is gone.
#ifndef BATCHD_CLIENT_LOADER_H_
#define BATCHD_CLIENT_LOADER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "batchd/v1/admin.pb.h"
#include "batchd/v1/data.pb.h"
#include "client/buffer.h"
#include "grpcpp/channel.h"

namespace batchd::client {

namespace internal {
class LoaderCore;
}  // namespace internal

struct Diagnosis;  // client/diagnosis.h

// Largest gRPC message the client accepts: the protocol's 4 MiB chunks plus
// headroom for headers with many samples.
inline constexpr int kMaxReceiveMessageBytes = 8 << 20;

// A gRPC channel to a batchd daemon at `endpoint` ("host:port" or
// "unix:/path"), plaintext, with the receive limit above. Connects lazily.
std::shared_ptr<grpc::Channel> NewBatchdChannel(const std::string& endpoint);

// The daemon's AdminService.GetStatus over `channel`, waiting at most
// `timeout`. Errors carry gRPC's code and message, prefixed with "GetStatus: ".
absl::StatusOr<batchd::v1::ServerStatus> FetchServerStatus(
    const std::shared_ptr<grpc::Channel>& channel, absl::Duration timeout);

struct LoaderOptions {
  // "host:port" or "unix:/path".
  std::string endpoint;
  // What to stream; validated by the daemon.
  batchd::v1::Plan plan;
  // Requested window: how many batches may be outstanding, and so the number
  // of ring slots. The daemon may grant fewer; 0 takes the daemon's default.
  uint32_t prefetch = 4;
  // Where slots come from; nullptr means 64-byte aligned heap memory. Not
  // owned; must outlive the Loader and every Batch it returned.
  BufferAllocator* allocator = nullptr;
  // Limit for connecting and for the daemon's answer to the plan.
  absl::Duration connect_timeout = absl::Seconds(10);
  // Called on the consumer thread when Next() reaches the end of an epoch,
  // with the epoch's one-line diagnosis (client/diagnosis.h), e.g.
  // "epoch 0: input-bound: waited 43 % of wall time; ...". nullptr reports
  // nothing; epoch_diagnosis() has the line either way.
  std::function<void(const std::string& line)> report;
  // Test and diagnostic knob: paces the receiving thread to at most this
  // many pixel bytes per second, as a slow network link would; 0 (the
  // default) does not pace. Used to rehearse the network-bound diagnosis.
  uint64_t max_receive_bytes_per_second = 0;
};

// Which samples a batch holds, as the daemon's header says; shared by Batch
// and DeviceBatch.
struct BatchInfo {
  uint64_t epoch = 0;
  uint64_t batch_index = 0;
  // Dataset index and label of each sample, in order.
  std::vector<uint64_t> sample_indices;
  std::vector<int32_t> labels;
  // Samples whose pixels come from another sample, if any.
  std::vector<batchd::v1::Substitution> substitutions;
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
};

// Streams one plan's batches from one daemon. See the file comment.
class Loader {
 public:
  // Connects to `options.endpoint`, opens the plan and waits for the
  // daemon's answer, then allocates the ring. Blocks up to
  // `options.connect_timeout` for each of connecting and the answer.
  // Errors: UNAVAILABLE when the daemon cannot be reached; the daemon's own
  // status (code and message, e.g. INVALID_ARGUMENT naming the bad field)
  // for a plan it refuses; DEADLINE_EXCEEDED when it does not answer;
  // INTERNAL for a malformed answer; the allocator's error.
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
  // Slots in the ring: the granted window, capped at a non-zero `prefetch`.
  uint32_t window() const;

  // Starts returning batches `first_batch`, `first_batch`+1, ... of `epoch`
  // and requests as many as there are free slots. Batches still outstanding
  // from before are no longer wanted: they still arrive (the daemon counts
  // them against the window) and their slots are freed on arrival, or reused
  // at once when the new range asks for the same batch. Batches already
  // received but not returned are dropped.
  // INVALID_ARGUMENT for `epoch` >= 2^32 or `first_batch` >
  // batches_per_epoch(); the sticky stream error if the stream has failed.
  absl::Status StartEpoch(uint64_t epoch, uint64_t first_batch = 0);

  // Blocks until the next batch in index order is complete and returns it.
  // OUT_OF_RANGE after the epoch's last batch; FAILED_PRECONDITION before
  // StartEpoch(), or when every slot is leased by a held Batch (release one).
  // A batch the daemon rejected returns the rejection's code and message;
  // the position does not advance, so calling Next() again asks for that
  // batch again. When the stream fails the error is sticky: UNAVAILABLE when
  // the connection is lost or the daemon ends the stream early, INTERNAL
  // for a protocol violation, or the daemon's status. Batches that arrived
  // completely before a failure are still returned first. CANCELLED once
  // Cancel() has been called (ready batches are not returned then).
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

  // Where one step's time went.
  struct StepTimes {
    // Inside the Next() call that returned the batch.
    absl::Duration waited;
    // From the previous Next() returning to this one being called: the
    // trainer's own work.
    absl::Duration compute;
    // Copying this batch's bytes into its ring buffer (receive thread), plus
    // any copy reported with RecordCopy().
    absl::Duration copy;
  };

  // Totals since Create(); Since() turns two snapshots into an interval.
  struct Stats {
    // Steps: Next() calls that returned a batch; their images and pixel
    // bytes.
    uint64_t batches = 0;
    uint64_t images = 0;
    uint64_t bytes = 0;
    // Time spent inside Next() (waiting for input), all calls.
    absl::Duration waited;
    // The part of `waited` spent in the first Next() of each epoch (after
    // StartEpoch() or Restore()), while the pipeline fills.
    absl::Duration startup_waited;
    // Time between a Next() returning and the next call (the trainer's
    // compute), all calls.
    absl::Duration compute;
    // Time the receive thread spent copying batch bytes into ring buffers,
    // plus copies reported with RecordCopy() (e.g. host to device).
    absl::Duration copy;
    // Pixel bytes received from the daemon, including batches no longer
    // wanted after a StartEpoch().
    uint64_t received_bytes = 0;
    // Time since Create() (for an interval: its length).
    absl::Duration wall;
    // The last step (not differenced by Since()).
    StepTimes last_step;

    // `*this` minus `earlier`: the figures of the interval between them.
    Stats Since(const Stats& earlier) const;
    // Shares of wall time, 0..1 (0 when wall is 0).
    double waited_fraction() const;
    // Waited share once the pipeline is full: `waited` and `wall` without
    // `startup_waited`. The diagnosis uses this, so that a short interval
    // is not called input-bound for its first batch alone.
    double steady_waited_fraction() const;
    double compute_fraction() const;
    double copy_fraction() const;
    // Rates over wall time, per second.
    double batches_per_second() const;
    double images_per_second() const;
    double bytes_per_second() const;
    double received_bytes_per_second() const;
  };
  Stats stats() const;

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
