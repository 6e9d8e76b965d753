#include "server/stream/stream_session.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/local_address.h"
#include "common/sampler.h"

namespace batchd::server {

using batchd::v1::StreamRequest;
using batchd::v1::StreamResponse;

namespace {

// A shared-memory slot for batches of up to `max_batch_bytes`: every slot
// starts on a page, so the decoder's and the copy engine's accesses stay
// aligned.
uint64_t SharedSlotBytes(uint64_t max_batch_bytes) {
  return (max_batch_bytes + 4095) / 4096 * 4096;
}

}  // namespace

StreamSession::StreamSession(const StreamSessionContext* context,
                             std::string peer, std::string identity,
                             JobCheck may_stream, std::function<void()> wake)
    : context_(*context),
      peer_(std::move(peer)),
      identity_(std::move(identity)),
      may_stream_(std::move(may_stream)),
      wake_(std::move(wake)),
      cancelled_(std::make_shared<std::atomic<bool>>(false)) {}

bool StreamSession::ReadDone(bool ok) {
  absl::MutexLock lock(&mu_);
  const bool ending = finish_status_.has_value() || finished_;
  if (!ok) reads_done_ = true;
  return ok && !ending;
}

absl::Status StreamSession::Handle(const StreamRequest& request,
                                   const KeepAlive& owner, absl::Time now) {
  switch (request.kind_case()) {
    case StreamRequest::kOpen:
      return Open(request.open(), owner, now);
    case StreamRequest::kRequest:
      return Request(request.request(), owner);
    case StreamRequest::kCancel:
      return Cancel(request.cancel());
    case StreamRequest::kReport:
      return Report(request.report(), now);
    case StreamRequest::KIND_NOT_SET:
      break;
  }
  return Fail(absl::InvalidArgumentError(
      "empty StreamRequest: set `open` (first message), `request`, "
      "`cancel` or `report`"));
}

absl::Status StreamSession::Open(const batchd::v1::OpenPlan& open,
                                 const KeepAlive& owner, absl::Time now) {
  StreamAdmission& admission = *context_.admission;
  bool already_open = false;
  {
    absl::MutexLock lock(&mu_);
    plan_arrived_ = true;
    already_open = plan_ != nullptr;
  }
  if (admission.draining()) return Fail(admission.DrainingRefusal());
  if (already_open) {
    return Fail(absl::FailedPreconditionError(
        "the plan is already open; a stream carries one plan, so open a "
        "new stream for another"));
  }
  absl::StatusOr<std::shared_ptr<const ResolvedPlan>> plan =
      ResolvePlan(open.plan(), *context_.datasets, context_.limits);
  if (!plan.ok()) return Fail(plan.status());
  const ResolvedPlan& p = **plan;
  if (absl::Status allowed = may_stream_(p.job); !allowed.ok()) {
    return Fail(absl::PermissionDeniedError(allowed.message()));
  }
  // A shard smaller than one batch makes one smaller batch: reserve and
  // announce what is real.
  const uint64_t max_batch_bytes = p.batch_bytes(
      std::min<uint64_t>(p.shard.batch_size, ShardSize(p.shard)));
  const uint32_t wanted =
      std::min(open.window() == 0 ? context_.default_window : open.window(),
               context_.max_window);
  if (absl::Status counted = admission.AddJobStream(p.job); !counted.ok()) {
    return Fail(std::move(counted));
  }
  // From here the stream counts against its job, and in its statistics,
  // until Close.
  {
    absl::MutexLock lock(&mu_);
    plan_ = *plan;
  }
  context_.stats->StreamOpened(p.job, now);
  context_.batches->StreamOpened(p);
  // A stream that may attach a ring reserves its slots as the ring has
  // them, page-aligned: the ring's pages that the workers write are the
  // daemon's memory as much as the bytes path's buffers are.
  // The fields ride in the header, outside the ring: counted on both
  // paths, at their bound.
  const uint64_t field_bytes =
      std::min<uint64_t>(p.shard.batch_size, ShardSize(p.shard)) *
      p.fields.sample_bytes();
  const uint64_t reserve_bytes =
      (open.offer_shared_memory() && context_.shared_memory != nullptr
           ? SharedSlotBytes(max_batch_bytes)
           : max_batch_bytes) +
      field_bytes;
  BufferBudget& budget = *context_.budget;
  const BufferBudget::Reservation reserved =
      budget.ReserveUpTo(p.job, identity_, wanted, reserve_bytes);
  const uint32_t window = reserved.window;
  if (window == 0) {
    return Fail(budget.Refusal(p.job, identity_, reserve_bytes));
  }
  StreamResponse response;
  batchd::v1::PlanOpened* opened = response.mutable_opened();
  opened->set_window(window);
  opened->set_batches_per_epoch(BatchesPerEpoch(p.shard));
  opened->set_samples_per_epoch(ShardSize(p.shard));
  opened->set_dataset_samples(p.shard.num_samples);
  StreamLedger::EpochBatches batches{.per_epoch = BatchesPerEpoch(p.shard)};
  if (p.resume_position > 0) {
    const common::ShardSpec rest = p.ShardFor(p.resume_epoch);
    batches.resumed_epoch = p.resume_epoch;
    batches.resumed = BatchesPerEpoch(rest);
    opened->set_resumed_epoch_batches(batches.resumed);
    opened->set_resumed_epoch_samples(ShardSize(rest));
  }
  for (uint64_t d : p.shape(p.shard.batch_size)) opened->add_shape(d);
  opened->set_max_batch_bytes(max_batch_bytes);
  opened->set_dtype(batchd::v1::DTYPE_UINT8);
  opened->set_layout(p.layout);
  *opened->mutable_daemon() = context_.daemon_info;
  if (open.offer_shared_memory()) {
    InviteSharedMemory(max_batch_bytes, window, owner,
                       opened->mutable_shared_memory());
  }
  const uint64_t report_id =
      context_.reports->Open(p.job, p.shard.batch_size, now);

  absl::MutexLock lock(&mu_);
  report_id_ = report_id;
  ledger_.Open(window, batches, reserved.bytes);
  queue_.PushMessage(std::move(response));
  return absl::OkStatus();
}

void StreamSession::InviteSharedMemory(
    uint64_t max_batch_bytes, uint32_t window, const KeepAlive& owner,
    batchd::v1::SharedMemoryInvite* invite) {
  SharedMemoryBroker* broker = context_.shared_memory;
  if (broker == nullptr) {
    invite->set_declined("the daemon runs with --shm=false");
    return;
  }
  if (!common::IsLocalPeer(peer_)) {
    invite->set_declined(absl::StrCat(
        "the client connects from ", peer_,
        ", not over a Unix socket or the loopback, so it is not on this "
        "host"));
    return;
  }
  const uint64_t slot_bytes = SharedSlotBytes(max_batch_bytes);
  std::string ticket = broker->Invite(
      slot_bytes, /*max_slots=*/window,
      [this, owner, slot_bytes](std::shared_ptr<common::SharedRegion> region,
                                uint32_t slots) {
        return AttachSharedMemory(std::move(region), slots, slot_bytes);
      });
  invite->set_socket(broker->socket());
  invite->set_ticket(ticket);
  invite->set_slot_bytes(slot_bytes);
  absl::MutexLock lock(&mu_);
  ticket_ = std::move(ticket);
}

absl::Status StreamSession::AttachSharedMemory(
    std::shared_ptr<common::SharedRegion> region, uint32_t slots,
    uint64_t slot_bytes) {
  absl::MutexLock lock(&mu_);
  if (finished_ || finish_status_) {
    return absl::FailedPreconditionError("the stream has already ended");
  }
  if (absl::Status attached = ledger_.AttachSharedMemory(slots);
      !attached.ok()) {
    return attached;
  }
  if (ServerMetrics* metrics = context_.metrics) {
    metrics->shared_memory_bytes().Add(static_cast<double>(region->size()));
  }
  region_ = std::move(region);
  slot_bytes_ = slot_bytes;
  // The stream keeps its reservation of the buffer budget: the ring has at
  // most `window` slots, and every page of it the workers write is mapped
  // into the daemon (RELIABILITY.md, "Resource model").
  return absl::OkStatus();
}

absl::Status StreamSession::Request(const batchd::v1::BatchRequest& request,
                                    const KeepAlive& owner) {
  std::shared_ptr<const ResolvedPlan> plan;
  {
    absl::MutexLock lock(&mu_);
    plan = plan_;
  }
  if (plan == nullptr) {
    return Fail(absl::FailedPreconditionError(
        "a batch request came before the plan: send `open` with a Plan as "
        "the stream's first message"));
  }
  const uint64_t epoch = request.epoch();
  // Decided once per request: a request either came before the drain (all
  // of it is served) or after (none of it is).
  const StreamAdmission& admission = *context_.admission;
  const std::string drain_message =
      admission.draining()
          ? absl::StrCat(admission.DrainMessage(),
                         " and starts no new batches; request this one from "
                         "another daemon")
          : std::string();
  struct Accepted {
    uint64_t index;
    BatchCancellation cancellation;
    BatchDestination destination;
  };
  std::vector<Accepted> accepted;
  {
    absl::MutexLock lock(&mu_);
    if (absl::Status shape = ledger_.CheckRequest(request.batch_indices_size(),
                                                  request.slots_size());
        !shape.ok()) {
      return FailLocked(std::move(shape));
    }
    ledger_.CountRequest();
    for (int i = 0; i < request.batch_indices_size(); ++i) {
      const Key key{epoch, request.batch_indices(i)};
      const std::optional<uint32_t> slot =
          request.slots_size() > 0 ? std::optional<uint32_t>(request.slots(i))
                                   : std::nullopt;
      absl::StatusOr<StreamLedger::Grant> grant =
          ledger_.Accept(key, slot, drain_message);
      if (!grant.ok()) {
        QueueRejectionLocked(key, grant.status());
        continue;
      }
      BatchDestination destination;
      if (grant->slot.has_value()) {
        destination.data = region_->data() + *grant->slot * slot_bytes_;
        destination.capacity = slot_bytes_;
        destination.owner = region_;
      }
      accepted.push_back(
          Accepted{key.second, BatchCancellation{cancelled_, grant->cancelled},
                   std::move(destination)});
      if (ServerMetrics* metrics = context_.metrics) {
        metrics->batches_outstanding().Add(1);
      }
    }
  }
  for (Accepted& a : accepted) {
    const Key key{epoch, a.index};
    const absl::Status started = context_.batches->Get(
        plan, epoch, a.index, std::move(a.cancellation),
        [this, owner, key](std::shared_ptr<const BuiltBatch> batch) {
          if (BatchBuilt(key, std::move(batch))) wake_();
        },
        std::move(a.destination));
    if (!started.ok()) {
      return Fail(absl::ResourceExhaustedError(started.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status StreamSession::Cancel(const batchd::v1::CancelBatches& cancel) {
  absl::MutexLock lock(&mu_);
  if (plan_ == nullptr) {
    return FailLocked(absl::FailedPreconditionError(
        "a cancel came before the plan: send `open` with a Plan as the "
        "stream's first message"));
  }
  if (absl::Status shape = ledger_.CheckCancel(cancel.batch_indices_size());
      !shape.ok()) {
    return FailLocked(std::move(shape));
  }
  for (uint64_t index : cancel.batch_indices()) {
    const Key key{cancel.epoch(), index};
    // Being built: BatchBuilt answers it. Header out: it is sent whole.
    if (ledger_.Cancel(key) != StreamLedger::Cancelled::kWithdrawn) continue;
    queue_.Withdraw(key);
    AnswerWithdrawnLocked(key);
  }
  return absl::OkStatus();
}

absl::Status StreamSession::Report(const batchd::v1::TrainerReport& report,
                                   absl::Time now) {
  absl::MutexLock lock(&mu_);
  if (plan_ == nullptr) {
    return FailLocked(absl::FailedPreconditionError(
        "a report came before the plan: send `open` with a Plan as the "
        "stream's first message"));
  }
  const absl::Status kept = context_.reports->Record(
      report_id_, report, ledger_.headers_sent(), now);
  if (!kept.ok()) {
    CountRejected(absl::StatusCode::kInvalidArgument);
    StreamResponse response;
    response.mutable_report_rejected()->set_message(
        std::string(kept.message()));
    queue_.PushMessage(std::move(response));
  }
  return absl::OkStatus();
}

absl::Status StreamSession::Fail(absl::Status status) {
  absl::MutexLock lock(&mu_);
  return FailLocked(std::move(status));
}

absl::Status StreamSession::FailLocked(absl::Status status) {
  CountRejected(status.code());
  cancelled_->store(true);
  if (!finish_status_) finish_status_ = status;
  return status;
}

void StreamSession::End(absl::Status status) {
  cancelled_->store(true);
  absl::MutexLock lock(&mu_);
  if (!finish_status_) finish_status_ = std::move(status);
}

bool StreamSession::EndIfNoPlan(absl::Status status) {
  absl::MutexLock lock(&mu_);
  if (plan_arrived_) return false;
  cancelled_->store(true);
  if (!finish_status_) finish_status_ = std::move(status);
  return true;
}

void StreamSession::CountRejected(absl::StatusCode code) const {
  if (ServerMetrics* metrics = context_.metrics) {
    metrics->RequestRejected(static_cast<int>(code));
  }
}

bool StreamSession::BatchBuilt(const Key& key,
                               std::shared_ptr<const BuiltBatch> batch) {
  absl::MutexLock lock(&mu_);
  if (finished_ || finish_status_) return false;
  switch (ledger_.BatchBuilt(key, /*built=*/batch != nullptr)) {
    case StreamLedger::Built::kSend:
      queue_.PushBatch(std::move(batch), plan_->layout);
      return true;
    case StreamLedger::Built::kAnswerCancelled:
      AnswerWithdrawnLocked(key);
      return true;
    case StreamLedger::Built::kDrop:
      break;
  }
  return false;
}

void StreamSession::QueueRejectionLocked(const Key& key,
                                         const absl::Status& status) {
  CountRejected(status.code());
  StreamResponse response;
  batchd::v1::RequestRejected* rejected = response.mutable_rejected();
  rejected->set_epoch(key.first);
  rejected->set_batch_index(key.second);
  rejected->set_code(static_cast<int32_t>(status.code()));
  rejected->set_message(std::string(status.message()));
  queue_.PushMessage(std::move(response));
}

void StreamSession::AnswerWithdrawnLocked(const Key& key) {
  if (ServerMetrics* metrics = context_.metrics) {
    metrics->batches_outstanding().Add(-1);
  }
  QueueRejectionLocked(key, StreamLedger::CancelledAnswer());
}

bool StreamSession::PauseReading() {
  {
    absl::MutexLock lock(&mu_);
    if (queue_.messages() < kMaxQueuedMessages) return false;
    read_paused_ = true;
  }
  if (ServerMetrics* metrics = context_.metrics) {
    metrics->BoundHit("stream_reads_paused");
  }
  return true;
}

StreamSession::Action StreamSession::Next() {
  Action action;
  absl::MutexLock lock(&mu_);
  // Reading resumes once the client has taken half the backlog (hence not
  // one read per write at the bound).
  if (read_paused_ && !finished_ && !finish_status_ &&
      queue_.messages() <= kMaxQueuedMessages / 2) {
    read_paused_ = false;
    action.resume_reading = true;
  }
  if (write_in_flight_ || finished_) return action;
  const bool idle = ledger_.idle() && queue_.empty();
  if (!finish_status_ && (action.write = NextMessageLocked())) {
    write_in_flight_ = true;
  } else if (finish_status_ || (reads_done_ && idle)) {
    finished_ = true;
    action.finish = finish_status_.value_or(absl::OkStatus());
    // With nothing left to build or send, the stream's memory is free now:
    // give it back before the client sees the status, so that a client
    // that closes and reopens at once finds its budget.
    if (idle) ReleaseBudgetLocked();
  } else if (idle && context_.admission->draining()) {
    // Everything accepted before the drain has been sent; anything more
    // must come from another daemon.
    finished_ = true;
    ReleaseBudgetLocked();
    CountRejected(absl::StatusCode::kUnavailable);
    action.finish = absl::UnavailableError(
        absl::StrCat(context_.admission->DrainMessage(),
                     ": every batch requested before the drain was sent; "
                     "request further batches from another daemon"));
  }
  return action;
}

std::optional<StreamSession::Message> StreamSession::NextMessageLocked() {
  std::optional<SendQueue::Popped> next = queue_.Pop();
  if (!next) return std::nullopt;
  if (next->header_of) ledger_.HeaderSent(*next->header_of);
  if (const BuiltBatch* batch = next->completed.get()) {
    // Its last message is being written: it stops being outstanding.
    written_batch_ =
        CompletedBatch{batch->sample_indices.size(), batch->pixels.size(),
                       batch->substitutions.size(), batch->finished};
    ledger_.Completed(Key{batch->epoch, batch->batch_index});
    if (ServerMetrics* metrics = context_.metrics) {
      metrics->batches_outstanding().Add(-1);
    }
  }
  return std::move(next->message);
}

void StreamSession::WriteDone(bool ok, absl::Time now) {
  absl::MutexLock lock(&mu_);
  write_in_flight_ = false;
  if (!ok) {
    cancelled_->store(true);
    if (!finish_status_) {
      finish_status_ = absl::CancelledError("the client went away");
    }
  } else if (written_batch_) {
    const CompletedBatch& done = *written_batch_;
    const absl::Duration send = now - done.finished;
    context_.admission->AddSendTime(send);
    if (ServerMetrics* metrics = context_.metrics) {
      metrics->send_seconds().Observe(absl::ToDoubleSeconds(send));
    }
    context_.stats->BatchSent(plan_->job, done.images, done.bytes,
                              done.substitutions);
  }
  written_batch_.reset();
}

void StreamSession::ReleaseBudgetLocked() {
  if (const uint64_t bytes = ledger_.TakeReservedBytes(); bytes > 0) {
    context_.budget->Release(plan_->job, identity_, bytes);
  }
}

void StreamSession::Close() {
  cancelled_->store(true);
  std::shared_ptr<const ResolvedPlan> plan;
  uint64_t report_id = 0;
  std::string ticket;
  {
    absl::MutexLock lock(&mu_);
    queue_.Clear();
    const size_t dropped = ledger_.Close();
    if (ServerMetrics* metrics = context_.metrics) {
      // Batches accepted but never fully sent (the stream ended first).
      metrics->batches_outstanding().Add(-static_cast<double>(dropped));
    }
    ReleaseBudgetLocked();
    plan = plan_;
    report_id = report_id_;
    ticket = ticket_;
  }
  if (plan != nullptr) {
    context_.stats->StreamClosed(plan->job);
    context_.batches->StreamClosed(*plan);
  }
  if (report_id != 0) context_.reports->Close(report_id);
  if (!ticket.empty()) context_.shared_memory->Withdraw(ticket);
  {
    absl::MutexLock lock(&mu_);
    // Batches still being built keep the mapping alive until they finish.
    if (region_ != nullptr) {
      if (ServerMetrics* metrics = context_.metrics) {
        metrics->shared_memory_bytes().Add(
            -static_cast<double>(region_->size()));
      }
      region_.reset();
    }
  }
  if (plan != nullptr) context_.admission->RemoveJobStream(plan->job);
}

size_t StreamSession::outstanding() const {
  absl::MutexLock lock(&mu_);
  return ledger_.outstanding();
}

}  // namespace batchd::server
