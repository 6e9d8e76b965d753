#include "client/slot_ring.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace batchd::client {

common::EpochBatches EpochBatchesOf(const batchd::v1::Plan& plan,
                                    const batchd::v1::PlanOpened& opened) {
  common::EpochBatches batches{.per_epoch = opened.batches_per_epoch()};
  if (plan.resume().position() > 0) {
    batches.resumed_epoch = plan.resume().epoch();
    batches.resumed = opened.resumed_epoch_batches();
  }
  return batches;
}

RingSize SizeRing(uint32_t prefetch, bool auto_prefetch,
                  uint64_t auto_prefetch_max_bytes,
                  const batchd::v1::PlanOpened& opened, uint64_t daemons) {
  const uint64_t granted = uint64_t{opened.window()} * daemons;
  RingSize ring;
  ring.window = std::min<uint64_t>(prefetch > 0 ? prefetch : granted, granted);
  ring.most = ring.window;
  if (auto_prefetch && opened.max_batch_bytes() > 0) {
    ring.most = std::max<uint64_t>(
        ring.window,
        std::min<uint64_t>(auto_prefetch_max_bytes / opened.max_batch_bytes(),
                           granted));
  }
  return ring;
}

SlotRing::SlotRing(BufferAllocator* allocator, Options options)
    : allocator_(allocator), options_(options) {}

absl::Status SlotRing::Build(uint64_t slot_bytes, common::EpochBatches batches,
                             size_t window, size_t most, bool shared) {
  slot_bytes_ = slot_bytes;
  batches_ = batches;
  std::vector<Slot> slots(std::max(window, most));
  for (size_t i = window; i < slots.size(); ++i) {
    slots[i].state = State::kInactive;
  }
  for (size_t i = 0; i < (shared ? 0 : window); ++i) {
    absl::StatusOr<std::unique_ptr<HostBuffer>> buffer =
        allocator_->Allocate(static_cast<size_t>(slot_bytes));
    if (!buffer.ok()) return buffer.status();
    if (*buffer == nullptr || (*buffer)->size() < slot_bytes) {
      return absl::InternalError(absl::StrCat(
          "allocator '", allocator_->name(),
          "' returned a buffer smaller than ", slot_bytes, " bytes"));
    }
    slots[i].buffer = *std::move(buffer);
  }
  slots_ = std::move(slots);
  active_ = window;
  built_ = true;
  return absl::OkStatus();
}

size_t SlotRing::GrowShared(size_t count) {
  size_t grown = 0;
  for (; grown < count && active_ < slots_.size(); ++grown) {
    slots_[active_++].state = State::kFree;
  }
  return grown;
}

size_t SlotRing::Grow(std::vector<std::unique_ptr<HostBuffer>> buffers) {
  size_t grown = 0;
  for (std::unique_ptr<HostBuffer>& buffer : buffers) {
    if (active_ == slots_.size()) break;
    Slot& slot = slots_[active_++];
    slot.buffer = std::move(buffer);
    slot.state = State::kFree;
    ++grown;
  }
  return grown;
}

std::optional<SlotRing::Key> SlotRing::Ahead(uint64_t ahead) const {
  const uint64_t end = batches_.In(epoch_);
  const uint64_t position = next_batch_ + ahead;
  if (position < end) return Key{epoch_, position};
  const uint64_t last_epoch = std::min<uint64_t>(
      options_.last_epoch, std::numeric_limits<uint32_t>::max());
  if (!options_.next_epoch_prefetch || epoch_ >= last_epoch ||
      position - end >= batches_.In(epoch_ + 1)) {
    return std::nullopt;
  }
  return Key{epoch_ + 1, position - end};
}

std::vector<SlotRing::Key> SlotRing::Retarget(uint64_t epoch,
                                              uint64_t first_batch) {
  started_ = true;
  epoch_ = epoch;
  next_batch_ = first_batch;
  // Batches the new window wants that are already requested or here (read
  // ahead) stay; Reserve() asks for the rest.
  std::vector<bool> wanted(slots_.size(), false);
  for (uint64_t ahead = 0; ahead < active_; ++ahead) {
    const std::optional<Key> key = Ahead(ahead);
    if (!key.has_value()) break;
    const int existing = Find(*key);
    if (existing >= 0) wanted[existing] = true;
  }
  std::vector<Key> freed;
  for (size_t i = 0; i < slots_.size(); ++i) {
    Slot& slot = slots_[i];
    if (wanted[i]) continue;
    if (slot.state == State::kReceiving ||
        (slot.state == State::kRequested && slot.ring != nullptr)) {
      // Its bytes are being written (by the stream, or by a daemon's
      // workers into shared memory) until its batch arrives.
      slot.orphaned = true;
    } else if (slot.state == State::kRequested ||
               slot.state == State::kReady || slot.state == State::kFailed) {
      freed.push_back(slot.key);
      Free(static_cast<int>(i));
    }
  }
  return freed;
}

std::vector<SlotRing::Key> SlotRing::Reserve() {
  std::vector<Key> reserved;
  if (!started_ || !built_) return reserved;
  size_t free_slot = 0;
  for (uint64_t ahead = 0; ahead < active_; ++ahead) {
    const std::optional<Key> wanted = Ahead(ahead);
    if (!wanted.has_value()) break;
    const int existing = Find(*wanted);
    if (existing >= 0) {
      slots_[existing].orphaned = false;  // wanted again
      continue;
    }
    while (free_slot < slots_.size() &&
           slots_[free_slot].state != State::kFree) {
      ++free_slot;
    }
    if (free_slot == slots_.size()) break;
    Slot& slot = slots_[free_slot];
    slot.state = State::kRequested;
    slot.key = *wanted;
    pending_[*wanted] = static_cast<int>(free_slot);
    reserved.push_back(*wanted);
  }
  return reserved;
}

int SlotRing::Find(const Key& key) const {
  auto it = pending_.find(key);
  return it == pending_.end() ? -1 : it->second;
}

absl::Status SlotRing::Grant(int index,
                             const std::shared_ptr<SharedRing>& shared) {
  Slot& slot = slots_[index];
  if (shared != nullptr) {
    // Granted to this stream until its header or rejection arrives.
    slot.ring = shared;
    slot.shared = shared->slot(static_cast<uint32_t>(index));
    return absl::OkStatus();
  }
  slot.ring.reset();
  slot.shared = nullptr;
  if (slot.buffer == nullptr) {
    // This slot has only lived in shared memory so far, and its daemon now
    // streams bytes.
    absl::StatusOr<std::unique_ptr<HostBuffer>> buffer =
        allocator_->Allocate(static_cast<size_t>(slot_bytes_));
    if (!buffer.ok()) return buffer.status();
    slot.buffer = *std::move(buffer);
  }
  return absl::OkStatus();
}

uint8_t* SlotRing::data(int index) const {
  const Slot& slot = slots_[index];
  return slot.shared != nullptr ? slot.shared : slot.buffer->data();
}

bool SlotRing::Receive(int index, int daemon, batchd::v1::BatchHeader header) {
  Slot& slot = slots_[index];
  if (slot.state != State::kRequested) return false;
  slot.state = State::kReceiving;
  slot.header = std::move(header);
  slot.copy = absl::ZeroDuration();
  slot.daemon = daemon;
  return true;
}

void SlotRing::Complete(int index) {
  if (slots_[index].orphaned) {
    Free(index);
  } else {
    slots_[index].state = State::kReady;
  }
}

bool SlotRing::Reject(int index, absl::Status error) {
  Slot& slot = slots_[index];
  if (slot.state != State::kRequested) return true;
  if (slot.orphaned) {
    Free(index);
    return false;
  }
  slot.error = std::move(error);
  slot.state = State::kFailed;
  return true;
}

void SlotRing::Restart(const Key& key) {
  const int index = Find(key);
  if (index < 0 || slots_[index].state != State::kReceiving) return;
  if (slots_[index].orphaned) {
    Free(index);
  } else {
    slots_[index].state = State::kRequested;
    slots_[index].header.Clear();
  }
}

std::vector<SlotRing::Key> SlotRing::DropOrphanGrants(const SharedRing* ring) {
  std::vector<Key> freed;
  for (size_t i = 0; i < slots_.size(); ++i) {
    Slot& slot = slots_[i];
    if (slot.state == State::kRequested && slot.orphaned &&
        slot.ring.get() == ring) {
      freed.push_back(slot.key);
      Free(static_cast<int>(i));
    }
  }
  return freed;
}

SlotRing::Lease SlotRing::TakeReady(int index) {
  Slot& slot = slots_[index];
  pending_.erase(slot.key);
  slot.state = State::kLeased;
  Lease lease;
  lease.slot = index;
  lease.key = slot.key;
  lease.data = data(index);
  lease.header = std::move(slot.header);
  slot.header.Clear();
  lease.copy = std::exchange(slot.copy, absl::ZeroDuration());
  lease.daemon = slot.daemon;
  ++next_batch_;
  return lease;
}

absl::Status SlotRing::TakeFailed(int index) {
  absl::Status rejection = slots_[index].error;
  Free(index);
  return rejection;
}

bool SlotRing::Release(int index) {
  if (index < 0 || static_cast<size_t>(index) >= slots_.size() ||
      slots_[index].state != State::kLeased) {
    return false;
  }
  Free(index);
  return true;
}

bool SlotRing::AnyFree() const {
  return std::any_of(slots_.begin(), slots_.end(), [](const Slot& slot) {
    return slot.state == State::kFree;
  });
}

bool SlotRing::AllLeased() const {
  return std::all_of(slots_.begin(), slots_.end(), [](const Slot& slot) {
    return slot.state == State::kLeased || slot.state == State::kInactive;
  });
}

bool SlotRing::AnyInFlight() const {
  return std::any_of(slots_.begin(), slots_.end(), [](const Slot& slot) {
    return slot.state == State::kRequested || slot.state == State::kReceiving;
  });
}

void SlotRing::Free(int index) {
  Slot& slot = slots_[index];
  auto it = pending_.find(slot.key);
  if (it != pending_.end() && it->second == index) pending_.erase(it);
  slot.state = State::kFree;
  slot.orphaned = false;
  slot.header.Clear();
  slot.copy = absl::ZeroDuration();
  slot.error = absl::OkStatus();
}

}  // namespace batchd::client
