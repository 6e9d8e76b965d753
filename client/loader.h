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
// consumer thread at a time. state(), stats(), opened() and
// batches_per_epoch() may be called from any thread. A Batch may be released
// (destroyed) on any thread, also after its Loader is gone.
#ifndef BATCHD_CLIENT_LOADER_H_
#define BATCHD_CLIENT_LOADER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "batchd/v1/data.pb.h"
#include "client/buffer.h"
#include "grpcpp/channel.h"

namespace batchd::client {

namespace internal {
class LoaderCore;
}  // namespace internal

// Largest gRPC message the client accepts: the protocol's 4 MiB chunks plus
// headroom for headers with many samples.
inline constexpr int kMaxReceiveMessageBytes = 8 << 20;

// A gRPC channel to a batchd daemon at `endpoint` ("host:port" or
// "unix:/path"), plaintext, with the receive limit above. Connects lazily.
std::shared_ptr<grpc::Channel> NewBatchdChannel(const std::string& endpoint);

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
};

// One batch, leasing a slot of the loader's ring. The pixel bytes stay valid
// (and the slot stays out of use) until the Batch is destroyed, moved-from
// or Release()d. Move-only.
class Batch {
 public:
  uint64_t epoch = 0;
  uint64_t batch_index = 0;
  // Dataset index and label of each sample, in order.
  std::vector<uint64_t> sample_indices;
  std::vector<int32_t> labels;
  // [n, H, W, C] for NHWC or [n, C, H, W] for NCHW; n may be smaller than
  // the plan's batch size for the last batch of an epoch.
  std::vector<uint64_t> shape;
  // Never LAYOUT_UNSPECIFIED (that is reported as LAYOUT_NHWC).
  batchd::v1::Layout layout = batchd::v1::LAYOUT_NHWC;
  // Samples whose pixels come from another sample, if any.
  std::vector<batchd::v1::Substitution> substitutions;

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
  // completely before a failure are still returned first.
  absl::StatusOr<Batch> Next();

  // (epoch, index of the batch the next Next() returns).
  LoaderState state() const;
  // Same as StartEpoch(state.epoch, state.next_batch).
  absl::Status Restore(const LoaderState& state);

  struct Stats {
    // Batches and pixel bytes returned by Next().
    uint64_t batches = 0;
    uint64_t bytes = 0;
    // Time spent inside Next() (waiting for input).
    absl::Duration waited;
    // Time since Create().
    absl::Duration wall;
  };
  Stats stats() const;

 private:
  explicit Loader(std::shared_ptr<internal::LoaderCore> core);

  // Shared with the Batches this loader returned.
  const std::shared_ptr<internal::LoaderCore> core_;
};

}  // namespace batchd::client

#endif  // BATCHD_CLIENT_LOADER_H_
