// StreamLedger: the bookkeeping of one StreamBatches call. It decides
// which requested batches are accepted (the window, the epoch's range, the
// drain, duplicates, shared-memory slot grants), follows each accepted batch
// until its last message is written or it is withdrawn, and holds the
// stream's reservation of the daemon's buffer budget until it is given back.
//
// Pure bookkeeping: no threads, no gRPC, no clock. BatchStream turns its
// answers into writes, pipeline work and metrics, so the rules are
// unit-tested on constructed event sequences (stream_ledger_test.cc).
//
// A batch's life: Accept -> (built) BatchBuilt -> HeaderSent -> Completed,
// or Accept -> withdrawn (Cancel of a queued batch, or BatchBuilt of a
// cancelled one), or dropped by Close.
//
// Thread-compatible: BatchStream calls it under its own mutex.
#ifndef BATCHD_SERVER_STREAM_STREAM_LEDGER_H_
#define BATCHD_SERVER_STREAM_STREAM_LEDGER_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/sampler.h"

namespace batchd::server {

class StreamLedger {
 public:
  using Key = std::pair<uint64_t, uint64_t>;  // (epoch, batch index)

  // An accepted batch: the flag that cancels its work (shared with the
  // pipeline, which reads it from its threads) and the shared-memory slot
  // it is written into, if any.
  struct Grant {
    std::shared_ptr<std::atomic<bool>> cancelled;
    std::optional<uint32_t> slot;
  };

  // What to do with a batch the pipeline gave back.
  enum class Built {
    kSend,             // queue it: header, then chunks
    kAnswerCancelled,  // withdrawn: answer it with CancelledAnswer()
    kDrop,             // not outstanding (closed or already answered)
  };

  // What the client's cancel of one batch did.
  enum class Cancelled {
    kUnknown,    // not outstanding: answered already, or never accepted
    kBuilding,   // its work stops; answered when the pipeline gives it back
    kWithdrawn,  // it was queued whole: take it out of the queue and answer
                 // it with CancelledAnswer()
    kSentWhole,  // its header is out: the rest of it is sent
  };

  using EpochBatches = common::EpochBatches;

  // The plan is open: at most `window` batches outstanding, batch indices
  // below `batches.In(epoch)`, `reserved_bytes` of the daemon's buffer
  // budget held for the stream.
  void Open(uint32_t window, EpochBatches batches, uint64_t reserved_bytes);
  uint32_t window() const { return window_; }

  // The client's shared-memory ring of `slots` slots is attached: every
  // later batch names a free slot. FAILED_PRECONDITION once a BatchRequest
  // was counted; INVALID_ARGUMENT for more slots than the window. The
  // reservation stays: the ring's pages are mapped into the daemon.
  absl::Status AttachSharedMemory(uint32_t slots);
  bool shared_memory() const { return shared_memory_; }

  // Whether a BatchRequest naming `batches` batches and `slots` slots can
  // be served at all (INVALID_ARGUMENT ends the stream): never more than
  // the window, and one slot per batch or none.
  absl::Status CheckRequest(size_t batches, size_t slots) const;
  // The same for a CancelBatches naming `batches` batches.
  absl::Status CheckCancel(size_t batches) const;

  // Counts a BatchRequest; shared memory attaches only before the first.
  void CountRequest() { ++requests_; }

  // Decides batch `key` of a BatchRequest, `slot` being the slot it names.
  // Returns its grant, or the status to reject it with in-band: epoch or
  // index out of range, or already outstanding (INVALID_ARGUMENT), the
  // daemon draining (UNAVAILABLE with `drain_message`, which is empty
  // unless the daemon was draining when the request came), the window full
  // (RESOURCE_EXHAUSTED), a slot missing, out of range or granted
  // (INVALID_ARGUMENT).
  absl::StatusOr<Grant> Accept(const Key& key, std::optional<uint32_t> slot,
                               absl::string_view drain_message);

  // The client withdraws `key`; see Cancelled.
  Cancelled Cancel(const Key& key);

  // The pipeline gave `key` back: `built` false when its work was
  // cancelled before it finished.
  Built BatchBuilt(const Key& key, bool built);

  // The header of `key` is being written: it can no longer be withdrawn.
  void HeaderSent(const Key& key);

  // The last message of `key` is being written: it stops being
  // outstanding and its slot is the client's again.
  void Completed(const Key& key);

  // The stream ended: forgets every outstanding batch and returns how many
  // there were.
  size_t Close();

  // The budget bytes the stream still holds; zero from then on.
  uint64_t TakeReservedBytes();

  // No batch outstanding.
  bool idle() const { return outstanding_.empty(); }
  size_t outstanding() const { return outstanding_.size(); }
  // Batch headers written, which bounds the batches a report may count.
  uint64_t headers_sent() const { return headers_sent_; }

  // What a withdrawn batch is answered with.
  static absl::Status CancelledAnswer();

 private:
  enum class Stage { kBuilding, kQueued, kSending };
  struct Batch {
    std::shared_ptr<std::atomic<bool>> cancelled;
    std::optional<uint32_t> slot;
    Stage stage = Stage::kBuilding;
  };

  // Why `slot` cannot be granted now ("" when it can): shared memory needs
  // a free slot in range for every batch, the bytes path none.
  std::string SlotProblem(std::optional<uint32_t> slot) const;
  // Forgets `it` and frees its slot.
  void Forget(std::map<Key, Batch>::iterator it);

  uint32_t window_ = 0;
  EpochBatches batches_;
  uint64_t reserved_bytes_ = 0;
  // BatchRequests counted.
  uint64_t requests_ = 0;
  uint64_t headers_sent_ = 0;
  bool shared_memory_ = false;
  // With shared memory: which slots are granted to an outstanding batch
  // (the daemon writes no others).
  std::vector<bool> slot_granted_;
  // Accepted batches whose last message is not yet handed to a write.
  std::map<Key, Batch> outstanding_;
};

}  // namespace batchd::server

#endif  // BATCHD_SERVER_STREAM_STREAM_LEDGER_H_
