#include "server/stream/stream_ledger.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace batchd::server {

void StreamLedger::Open(uint32_t window, EpochBatches batches,
                        uint64_t reserved_bytes) {
  window_ = window;
  batches_ = batches;
  reserved_bytes_ = reserved_bytes;
}

absl::Status StreamLedger::AttachSharedMemory(uint32_t slots) {
  if (requests_ > 0) {
    return absl::FailedPreconditionError(
        "the stream already asked for batches as bytes; attach shared "
        "memory before the first BatchRequest");
  }
  if (slots == 0 || slots > window_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a ring of ", slots, " slots, but this stream's granted window "
        "(PlanOpened.window) is ", window_, "; create a ring of 1..", window_,
        " slots"));
  }
  shared_memory_ = true;
  slot_granted_.assign(slots, false);
  return absl::OkStatus();
}

absl::Status StreamLedger::CheckRequest(size_t batches, size_t slots) const {
  if (batches > window_) {
    // Never acceptable whole: refused once, not index by index (which
    // would answer a small message with a flood of rejections).
    return absl::InvalidArgumentError(
        absl::StrCat("a BatchRequest names ", batches,
                     " batches but the window is ", window_,
                     "; ask for at most window batches at a time"));
  }
  if (slots != 0 && slots != batches) {
    return absl::InvalidArgumentError(
        absl::StrCat("a BatchRequest names ", batches, " batches and ", slots,
                     " slots; give one slot per batch, or none"));
  }
  return absl::OkStatus();
}

absl::Status StreamLedger::CheckCancel(size_t batches) const {
  if (batches > window_) {
    return absl::InvalidArgumentError(
        absl::StrCat("a CancelBatches names ", batches,
                     " batches but at most window=", window_,
                     " can be outstanding"));
  }
  return absl::OkStatus();
}

absl::StatusOr<StreamLedger::Grant> StreamLedger::Accept(
    const Key& key, std::optional<uint32_t> slot,
    absl::string_view drain_message) {
  const auto [epoch, index] = key;
  if (epoch > 0xFFFFFFFFull) {
    return absl::InvalidArgumentError(absl::StrCat(
        "epoch ", epoch, " is too large; epochs are 0..4294967295"));
  }
  if (const uint64_t batches = batches_.In(epoch); index >= batches) {
    const std::string which =
        epoch == batches_.resumed_epoch
            ? absl::StrCat(" batches left in epoch ", epoch, ", resumed")
            : std::string(" batches per epoch");
    return absl::InvalidArgumentError(
        absl::StrCat("batch index ", index,
                     " is beyond the epoch: this plan has ", batches, which,
                     " (0..", batches - 1, ")"));
  }
  if (!drain_message.empty()) {
    return absl::UnavailableError(drain_message);
  }
  if (outstanding_.count(key) > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch ", index, " of epoch ", epoch,
                     " is already outstanding on this stream; it is "
                     "answered once, so do not request it again before it "
                     "arrives"));
  }
  if (outstanding_.size() >= window_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("more than window=", window_,
                     " batches outstanding; request another batch only "
                     "after one has fully arrived"));
  }
  if (std::string wrong = SlotProblem(slot); !wrong.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch ", index, " of epoch ", epoch, ": ", wrong));
  }
  Batch& batch = outstanding_[key];
  batch.cancelled = std::make_shared<std::atomic<bool>>(false);
  batch.slot = slot;
  if (slot.has_value()) slot_granted_[*slot] = true;
  return Grant{batch.cancelled, slot};
}

std::string StreamLedger::SlotProblem(std::optional<uint32_t> slot) const {
  if (!shared_memory_) {
    if (!slot.has_value()) return "";
    return "BatchRequest.slots names a slot but no shared memory is "
           "attached to this stream; attach it first "
           "(PlanOpened.shared_memory), or leave slots empty";
  }
  if (!slot.has_value()) {
    return "this stream has shared memory attached: name a slot for each "
           "batch in BatchRequest.slots";
  }
  if (*slot >= slot_granted_.size()) {
    return absl::StrCat("slot ", *slot, " is beyond the attached ring's ",
                        slot_granted_.size(), " slots (0..",
                        slot_granted_.size() - 1, ")");
  }
  if (slot_granted_[*slot]) {
    return absl::StrCat("slot ", *slot,
                        " is already granted to another batch; grant it "
                        "again only after that batch's header arrived");
  }
  return "";
}

StreamLedger::Cancelled StreamLedger::Cancel(const Key& key) {
  auto it = outstanding_.find(key);
  if (it == outstanding_.end()) return Cancelled::kUnknown;
  it->second.cancelled->store(true);
  switch (it->second.stage) {
    case Stage::kBuilding:
      return Cancelled::kBuilding;
    case Stage::kQueued:
      Forget(it);
      return Cancelled::kWithdrawn;
    case Stage::kSending:
      break;
  }
  return Cancelled::kSentWhole;
}

StreamLedger::Built StreamLedger::BatchBuilt(const Key& key, bool built) {
  auto it = outstanding_.find(key);
  if (it == outstanding_.end()) return Built::kDrop;
  if (!built || it->second.cancelled->load()) {
    // Its work is over: the pipeline gave it back.
    Forget(it);
    return Built::kAnswerCancelled;
  }
  it->second.stage = Stage::kQueued;
  return Built::kSend;
}

void StreamLedger::HeaderSent(const Key& key) {
  ++headers_sent_;
  auto it = outstanding_.find(key);
  if (it != outstanding_.end()) it->second.stage = Stage::kSending;
}

void StreamLedger::Completed(const Key& key) {
  auto it = outstanding_.find(key);
  if (it != outstanding_.end()) Forget(it);
}

size_t StreamLedger::Close() {
  const size_t dropped = outstanding_.size();
  outstanding_.clear();
  return dropped;
}

uint64_t StreamLedger::TakeReservedBytes() {
  return std::exchange(reserved_bytes_, 0);
}

absl::Status StreamLedger::CancelledAnswer() {
  return absl::CancelledError("cancelled at the client's request");
}

void StreamLedger::Forget(std::map<Key, Batch>::iterator it) {
  if (it->second.slot.has_value()) slot_granted_[*it->second.slot] = false;
  outstanding_.erase(it);
}

}  // namespace batchd::server
