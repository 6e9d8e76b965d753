// DaemonSet, part 2: the consumer's window (StartEpoch, TakeNext, Release)
// and the requests that go out for it.
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/daemon_set.h"

namespace batchd::client {

// ---- The consumer's window ----

uint32_t DaemonSet::window() const {
  absl::MutexLock lock(&mu_);
  return static_cast<uint32_t>(ring_.active());
}

std::pair<uint64_t, uint64_t> DaemonSet::position() const {
  absl::MutexLock lock(&mu_);
  return {ring_.epoch(), ring_.next_batch()};
}

absl::Status DaemonSet::StartEpoch(uint64_t epoch, uint64_t first_batch) {
  {
    absl::MutexLock lock(&mu_);
    if (epoch > std::numeric_limits<uint32_t>::max()) {
      return absl::InvalidArgumentError(
          absl::StrCat("epoch ", epoch, " is beyond 2^32-1"));
    }
    if (const uint64_t batches = ring_.batches_in(epoch);
        first_batch > batches) {
      return absl::InvalidArgumentError(absl::StrCat(
          "first batch ", first_batch, " is beyond epoch ", epoch, "'s ",
          batches, " batches"));
    }
    if (!error_.ok()) return error_;
    for (const Key& key : ring_.Retarget(epoch, first_batch)) {
      scheduler_.Unwant(key);
    }
  }
  RequestMore();
  return absl::OkStatus();
}

absl::StatusOr<SlotRing::Lease> DaemonSet::TakeNext() {
  for (;;) {
    RequestMore();
    absl::MutexLock lock(&mu_);
    // Before any ready batch: a cancelled loader hands out nothing more.
    if (cancelled_) return absl::CancelledError("the loader was cancelled");
    if (!ring_.started()) {
      return absl::FailedPreconditionError(
          "Next() before StartEpoch() or Restore()");
    }
    if (const uint64_t batches = ring_.batches_in(ring_.epoch());
        ring_.next_batch() >= batches) {
      return absl::OutOfRangeError(absl::StrCat("end of epoch ", ring_.epoch(),
                                                ": all ", batches,
                                                " batches returned"));
    }
    const Key key{ring_.epoch(), ring_.next_batch()};
    auto resolved = [this, &key]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      const int index = ring_.Find(key);
      return index < 0 || ring_.state(index) == SlotRing::State::kReady ||
             ring_.state(index) == SlotRing::State::kFailed || !error_.ok() ||
             shutdown_ || cancelled_;
    };
    mu_.Await(absl::Condition(&resolved));
    if (cancelled_) return absl::CancelledError("the loader was cancelled");
    const int index = ring_.Find(key);
    if (index >= 0 && ring_.state(index) == SlotRing::State::kReady) {
      SlotRing::Lease lease = ring_.TakeReady(index);
      if (lease.daemon >= 0) ++daemons_[lease.daemon].consumed_since_report;
      return lease;
    }
    // The position stays; the next call asks for this batch again.
    if (index >= 0 && ring_.state(index) == SlotRing::State::kFailed) {
      return ring_.TakeFailed(index);
    }
    if (!error_.ok()) return error_;
    if (shutdown_) return absl::CancelledError("the loader is shutting down");
    // Not requested yet: request it, unless every slot is leased.
    if (ring_.AnyFree()) continue;
    if (ring_.AllLeased()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "all ", ring_.active(),
          " ring slots are held by unreleased Batch objects; release one "
          "before calling Next()"));
    }
    // Slots are busy with orphaned batches; wait for one to free up.
    auto slot_freed = [this, &key]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return ring_.Find(key) >= 0 || !error_.ok() || shutdown_ ||
             cancelled_ || ring_.AnyFree();
    };
    mu_.Await(absl::Condition(&slot_freed));
  }
}

void DaemonSet::Release(int slot) {
  {
    absl::MutexLock lock(&mu_);
    if (!ring_.Release(slot)) return;
  }
  RequestMore();
}

void DaemonSet::RequestMore() {
  std::vector<Outgoing> outgoing;
  {
    absl::MutexLock lock(&mu_);
    if (!ring_.started() || !ring_.built() || shutdown_ || !error_.ok()) {
      return;
    }
    for (const Key& key : ring_.Reserve()) scheduler_.Want(key);
    outgoing = ScheduleLocked();
  }
  Send(std::move(outgoing));
}

std::vector<DaemonSet::Outgoing> DaemonSet::ScheduleLocked() {
  std::vector<Outgoing> outgoing;
  if (!ring_.built() || shutdown_ || !error_.ok()) return outgoing;
  // Cancels first: on one stream, a cancel never overtakes a later request
  // for the same batch.
  for (RequestScheduler::Request& r : scheduler_.TakeCancels()) {
    Outgoing out;
    out.stream = daemons_[r.daemon].stream;
    if (out.stream == nullptr) continue;
    batchd::v1::CancelBatches* cancel = out.request.mutable_cancel();
    cancel->set_epoch(r.epoch);
    for (uint64_t index : r.indices) cancel->add_batch_indices(index);
    outgoing.push_back(std::move(out));
  }
  for (RequestScheduler::Request& r : scheduler_.Schedule(absl::Now())) {
    Daemon& d = daemons_[r.daemon];
    Outgoing out;
    out.stream = d.stream;
    if (out.stream == nullptr) continue;  // DaemonDown() follows at once
    batchd::v1::BatchRequest* request = out.request.mutable_request();
    request->set_epoch(r.epoch);
    for (uint64_t index : r.indices) {
      // Every wanted batch has a slot (RequestMore reserves it first).
      const int slot = ring_.Find(Key{r.epoch, index});
      if (slot < 0) continue;
      request->add_batch_indices(index);
      absl::Status granted = ring_.Grant(slot, d.ring);
      if (!granted.ok()) {
        error_ = granted;
        return {};
      }
      if (d.ring != nullptr) request->add_slots(static_cast<uint32_t>(slot));
    }
    if (request->batch_indices_size() > 0) outgoing.push_back(std::move(out));
  }
  return outgoing;
}

void DaemonSet::Send(std::vector<Outgoing> outgoing) {
  // A failed write means that stream has ended; its reader thread reports
  // why, and the scheduler moves the batches elsewhere.
  for (Outgoing& out : outgoing) out.stream->Send(out.request);
}

}  // namespace batchd::client
