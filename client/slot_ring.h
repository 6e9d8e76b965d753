// SlotRing: the client's ring of batch slots and the window of batches it
// asks for. Pure bookkeeping like RequestScheduler: no threads, no gRPC, no
// clock; its rules are unit-tested on constructed sequences
// (slot_ring_test.cc).
//
// A slot's bytes are either a HostBuffer of its own (the bytes path) or a
// place in the shared-memory ring of the stream it was last granted to
// (client/shared_ring.h); Grant() binds one or the other, and data() hides
// which. The asked window is the next `active()` batches from the
// consumer's position (Ahead): the current epoch, then the next one's first
// batches (`next_epoch_prefetch`) up to `last_epoch`.
//
// Slot life cycle:
//   kFree --Reserve--> kRequested --Receive--> kReceiving --Complete--> kReady
//   kReady --TakeReady--> kLeased --Release--> kFree
//   kRequested --Reject--> kFailed --TakeFailed--> kFree
//   kReceiving --Restart (its daemon lost)--> kRequested (bytes start over)
// Retarget() (the consumer moved on) frees the slots the new window does
// not want, except those whose bytes are still being written (kReceiving,
// or granted in shared memory): those are `orphaned` and freed when their
// batch completes or their stream ends, unless Reserve() wants them again.
//
// Thread-compatible: DaemonSet calls it under its own mutex. The bytes of
// a kReceiving slot belong to the receiving stream's reader thread, those
// of a kLeased slot to the Batch, without the lock.
#ifndef BATCHD_CLIENT_SLOT_RING_H_
#define BATCHD_CLIENT_SLOT_RING_H_

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "batchd/v1/data.pb.h"
#include "client/buffer.h"
#include "client/shared_ring.h"
#include "common/sampler.h"

namespace batchd::client {

// The batches in each epoch of `plan` as its daemon opened it: fewer in
// the epoch an elastic resume (Plan.resume) starts part-way.
common::EpochBatches EpochBatchesOf(const batchd::v1::Plan& plan,
                                    const batchd::v1::PlanOpened& opened);

// The ring's size: `window` slots in use at first, and the most
// auto_prefetch may grow it to (`most`). With one daemon more slots than
// its granted window would never fill; with several the window is the
// client's `prefetch` (0: the grants'). auto_prefetch grows up to
// `auto_prefetch_max_bytes` of `opened.max_batch_bytes()` slots, never
// beyond the grants.
struct RingSize {
  uint64_t window = 0;
  uint64_t most = 0;
};
RingSize SizeRing(uint32_t prefetch, bool auto_prefetch,
                  uint64_t auto_prefetch_max_bytes,
                  const batchd::v1::PlanOpened& opened, uint64_t daemons);

class SlotRing {
 public:
  using Key = std::pair<uint64_t, uint64_t>;  // (epoch, batch index)

  // kInactive: beyond the ring's current size (it may grow into it).
  enum class State {
    kInactive, kFree, kRequested, kReceiving, kReady, kFailed, kLeased
  };

  struct Options {
    // Read the next epoch's first batches ahead (LoaderOptions).
    bool next_epoch_prefetch = true;
    // Nothing of a later epoch is read ahead.
    uint64_t last_epoch = std::numeric_limits<uint64_t>::max();
  };

  // A ready batch handed to the consumer: its slot stays kLeased until
  // Release(slot).
  struct Lease {
    int slot = -1;
    Key key{0, 0};
    const uint8_t* data = nullptr;
    batchd::v1::BatchHeader header;
    absl::Duration copy;  // copying its chunks into the slot
    int daemon = -1;      // who sent its bytes
  };

  // `allocator` (not owned) makes the slots' buffers on the bytes path.
  SlotRing(BufferAllocator* allocator, Options options);

  // Makes `most` slots of `slot_bytes`, the first `window` of them active.
  // Over shared memory (`shared`) their bytes come from the attached ring;
  // otherwise each active slot gets a buffer now. The allocator's error,
  // or INTERNAL for a buffer smaller than asked.
  absl::Status Build(uint64_t slot_bytes, common::EpochBatches batches,
                     size_t window, size_t most, bool shared);
  bool built() const { return built_; }
  // Batches in `epoch`.
  uint64_t batches_in(uint64_t epoch) const { return batches_.In(epoch); }
  // Slots in use, and the most the ring may grow to.
  size_t active() const { return active_; }
  size_t capacity() const { return slots_.size(); }

  // Puts up to `count` more slots in use, with their bytes in shared
  // memory, or with `buffers` (one each). Returns how many.
  size_t GrowShared(size_t count);
  size_t Grow(std::vector<std::unique_ptr<HostBuffer>> buffers);

  // ---- The asked window ----
  // Whether Retarget() was called: nothing is asked before.
  bool started() const { return started_; }
  uint64_t epoch() const { return epoch_; }
  uint64_t next_batch() const { return next_batch_; }
  // The batch `ahead` places after the consumer's position; nullopt beyond
  // the window's reach.
  std::optional<Key> Ahead(uint64_t ahead) const;
  // Moves the consumer to (`epoch`, `first_batch`). Slots of batches the
  // new window wants stay; the others are freed or orphaned (see above).
  // Returns the batches freed, which nobody wants any more.
  std::vector<Key> Retarget(uint64_t epoch, uint64_t first_batch);
  // Gives every batch of the window without a slot a free one (kRequested)
  // and takes back orphans it wants again. Returns the newly reserved
  // batches, in window order.
  std::vector<Key> Reserve();
  // The slot holding `key` (any state but kFree, kLeased), or -1.
  int Find(const Key& key) const;

  // ---- The receiving side ----
  // Binds slot `index` for a request on a stream: into `shared` (its
  // attached ring) or, when null, into the slot's own buffer, allocated
  // now if it has none. The allocator's error.
  absl::Status Grant(int index, const std::shared_ptr<SharedRing>& shared);
  // Where slot `index`'s bytes are; its ring slot if granted in shared
  // memory.
  uint8_t* data(int index) const;
  // A header for the batch in slot `index` arrived from `daemon`: true
  // when the slot was kRequested and is now kReceiving.
  bool Receive(int index, int daemon, batchd::v1::BatchHeader header);
  void AddCopy(int index, absl::Duration copy) { slots_[index].copy += copy; }
  // The last byte of slot `index` arrived: kReady, or freed when orphaned.
  void Complete(int index);
  // The request for slot `index`'s batch was rejected with `error`. Returns
  // false when the slot was orphaned and is freed (nobody waits for it),
  // true when it is kFailed, or unchanged because it is not kRequested.
  bool Reject(int index, absl::Status error);
  // The stream writing `key`'s bytes ended: its slot, if kReceiving, goes
  // back to kRequested, or is freed when orphaned.
  void Restart(const Key& key);
  // The stream whose shared ring is `ring` ended: orphaned slots granted
  // in it are freed. Returns their batches.
  std::vector<Key> DropOrphanGrants(const SharedRing* ring);

  // ---- The consumer ----
  State state(int index) const { return slots_[index].state; }
  // REQUIRES: state(index) == kReady. Leases the slot and advances the
  // consumer's position.
  Lease TakeReady(int index);
  // REQUIRES: state(index) == kFailed. Frees it; returns the rejection.
  absl::Status TakeFailed(int index);
  // A leased slot comes back; false if `index` is not leased.
  bool Release(int index);
  bool AnyFree() const;
  // Every active slot is leased.
  bool AllLeased() const;
  // Some slot is kRequested or kReceiving.
  bool AnyInFlight() const;

 private:
  struct Slot {
    // Its own buffer (bytes path); set on first use, constant then.
    std::unique_ptr<HostBuffer> buffer;
    // Over shared memory: the ring of the stream it was last granted to and
    // where in it its bytes are; bound anew at every grant, so a slot is
    // never reused in a stream that ended while the daemon may still write.
    std::shared_ptr<SharedRing> ring;
    uint8_t* shared = nullptr;
    State state = State::kFree;
    Key key{0, 0};
    // Not wanted any more, but its bytes are being written; freed when
    // that ends unless wanted again.
    bool orphaned = false;
    int daemon = -1;                  // kReceiving/kReady: who sends it
    batchd::v1::BatchHeader header;   // kReceiving/kReady
    absl::Duration copy;              // copying its chunks so far
    absl::Status error;               // kFailed: the rejection
  };

  void Free(int index);

  BufferAllocator* const allocator_;
  const Options options_;
  uint64_t slot_bytes_ = 0;
  common::EpochBatches batches_;
  bool built_ = false;
  // Size fixed by Build(): the first active_ are in use, the rest kInactive.
  std::vector<Slot> slots_;
  size_t active_ = 0;
  // Slots by batch, for every slot not kFree, kLeased or kInactive.
  absl::flat_hash_map<Key, int> pending_;
  bool started_ = false;
  uint64_t epoch_ = 0;
  uint64_t next_batch_ = 0;
};

}  // namespace batchd::client

#endif  // BATCHD_CLIENT_SLOT_RING_H_
