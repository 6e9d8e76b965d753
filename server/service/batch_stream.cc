#include "server/service/batch_stream.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/chunk_codec.h"
#include "common/local_address.h"
#include "common/sampler.h"
#include "common/tsan_handoff.h"

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

grpc::Status ToGrpc(const absl::Status& status) {
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

BatchStream::BatchStream(const BatchStreamContext* context,
                         absl::StatusOr<Caller> caller, std::string peer)
    : context_(*context),
      caller_(caller.ok() ? *caller : Caller{}),
      peer_(std::move(peer)),
      cancelled_(std::make_shared<std::atomic<bool>>(false)) {
  // Read first: once registered, a drain may finish the stream from another
  // thread, and a read must not be started after Finish.
  HandToGrpc();
  StartRead(&request_bytes_);
  grpc::Status refused =
      caller.ok()
          ? context_.registry->AddStream(this, common::PeerHost(peer_))
          : ToGrpc(caller.status());
  if (!refused.ok()) {
    FailStream(std::move(refused));
    Pump();
  }
  HandToGrpc();
}

void BatchStream::Cancel(const grpc::Status& status) {
  cancelled_->store(true);
  {
    absl::MutexLock lock(&mu_);
    if (!finish_status_) finish_status_ = status;
  }
  Pump();
}

void BatchStream::CancelIfNoPlan(const grpc::Status& status) {
  {
    absl::MutexLock lock(&mu_);
    if (plan_arrived_) return;
  }
  Cancel(status);
}

void BatchStream::OnReadDone(bool ok) {
  TakeFromGrpc();
  bool failed = false;
  {
    absl::MutexLock lock(&mu_);
    failed = finish_status_.has_value() || finished_;
    if (!ok) reads_done_ = true;
  }
  if (ok && !failed) {
    bool keep_reading = true;
    request_.Clear();
    if (!common::DecodeMessage(request_bytes_, &request_)) {
      request_.Clear();
      keep_reading = FailStream(
          grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                       "the request is not a batchd.v1.StreamRequest"));
    }
    switch (keep_reading ? request_.kind_case()
                         : StreamRequest::KIND_NOT_SET) {
      case StreamRequest::kOpen:
        keep_reading = HandleOpen(request_.open());
        break;
      case StreamRequest::kRequest:
        keep_reading = HandleRequest(request_.request());
        break;
      case StreamRequest::kCancel:
        keep_reading = HandleCancel(request_.cancel());
        break;
      case StreamRequest::kReport:
        keep_reading = HandleReport(request_.report());
        break;
      default:
        if (!keep_reading) break;
        keep_reading = FailStream(grpc::Status(
            grpc::StatusCode::INVALID_ARGUMENT,
            "empty StreamRequest: set `open` (first message), `request`, "
            "`cancel` or `report`"));
        break;
    }
    if (keep_reading && !PauseReadingIfBacklogged()) StartNextRead();
  }
  Pump();
  HandToGrpc();
}

void BatchStream::OnWriteDone(bool ok) {
  TakeFromGrpc();
  {
    absl::MutexLock lock(&mu_);
    write_in_flight_ = false;
    if (!ok) {
      cancelled_->store(true);
      if (!finish_status_) {
        finish_status_ =
            grpc::Status(grpc::StatusCode::CANCELLED, "the client went away");
      }
    } else if (written_batch_) {
      const CompletedBatch& done = *written_batch_;
      const absl::Duration send = absl::Now() - done.finished;
      context_.registry->AddSendTime(send);
      if (ServerMetrics* metrics = context_.metrics) {
        metrics->send_seconds().Observe(absl::ToDoubleSeconds(send));
      }
      context_.stats->BatchSent(plan_->job, done.images, done.bytes,
                                done.substitutions);
    }
    written_batch_.reset();
  }
  Pump();
  HandToGrpc();
}

void BatchStream::OnCancel() {
  TakeFromGrpc();
  cancelled_->store(true);
  {
    absl::MutexLock lock(&mu_);
    if (!finish_status_) {
      finish_status_ =
          grpc::Status(grpc::StatusCode::CANCELLED, "stream cancelled");
    }
  }
  Pump();
  HandToGrpc();
}

void BatchStream::OnDone() {
  TakeFromGrpc();
  cancelled_->store(true);
  {
    absl::MutexLock lock(&mu_);
    queue_.clear();
    queued_messages_ = 0;
    const size_t dropped = ledger_.Close();
    if (ServerMetrics* metrics = context_.metrics) {
      // Batches accepted but never fully sent (the stream ended first).
      metrics->batches_outstanding().Add(-static_cast<double>(dropped));
    }
    ReleaseBudgetLocked();
    if (plan_ != nullptr) {
      context_.stats->StreamClosed(plan_->job);
      if (context_.shared_batches != nullptr) {
        context_.shared_batches->StreamClosed(*plan_);
      }
    }
  }
  if (report_id_ != 0) context_.reports->Close(report_id_);
  if (!ticket_.empty()) context_.shared_memory->Withdraw(ticket_);
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
  if (plan_ != nullptr) context_.registry->RemoveJobStream(plan_->job);
  context_.registry->RemoveStream(this);
  Unref();
}

bool BatchStream::FailStream(grpc::Status status) {
  CountRejected(status.error_code());
  absl::MutexLock lock(&mu_);
  cancelled_->store(true);
  if (!finish_status_) finish_status_ = std::move(status);
  return false;
}

bool BatchStream::HandleOpen(const batchd::v1::OpenPlan& open) {
  StreamRegistry& registry = *context_.registry;
  {
    absl::MutexLock lock(&mu_);
    plan_arrived_ = true;
  }
  registry.PlanArrived(this);
  if (registry.draining()) return FailStream(registry.DrainingRefusal());
  if (plan_ != nullptr) {
    return FailStream(grpc::Status(
        grpc::StatusCode::FAILED_PRECONDITION,
        "the plan is already open; a stream carries one plan, so open a "
        "new stream for another"));
  }
  absl::StatusOr<std::shared_ptr<const ResolvedPlan>> plan =
      ResolvePlan(open.plan(), *context_.datasets, context_.limits);
  if (!plan.ok()) return FailStream(ToGrpc(plan.status()));
  const ResolvedPlan& p = **plan;
  if (absl::Status allowed = CheckJob(caller_, p.job); !allowed.ok()) {
    return FailStream(grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                                   std::string(allowed.message())));
  }
  // A shard smaller than one batch makes one smaller batch: reserve and
  // announce what is real.
  const uint64_t max_batch_bytes = p.batch_bytes(
      std::min<uint64_t>(p.shard.batch_size, ShardSize(p.shard)));
  const uint32_t wanted =
      std::min(open.window() == 0 ? context_.default_window : open.window(),
               context_.max_window);
  if (grpc::Status counted = registry.AddJobStream(p.job); !counted.ok()) {
    return FailStream(std::move(counted));
  }
  // From here the stream counts against its job, and in its statistics,
  // until OnDone.
  {
    absl::MutexLock lock(&mu_);
    plan_ = *plan;
  }
  context_.stats->StreamOpened(p.job);
  if (context_.shared_batches != nullptr) {
    context_.shared_batches->StreamOpened(p);
  }
  // A stream that may attach a ring reserves its slots as the ring has
  // them, page-aligned: the ring's pages that the workers write are the
  // daemon's memory as much as the bytes path's buffers are.
  const uint64_t reserve_bytes =
      open.offer_shared_memory() && context_.shared_memory != nullptr
          ? SharedSlotBytes(max_batch_bytes)
          : max_batch_bytes;
  BufferBudget& budget = *context_.budget;
  const uint32_t window = budget.ReserveUpTo(p.job, wanted, reserve_bytes);
  if (window == 0) {
    return FailStream(ToGrpc(budget.Refusal(p.job, reserve_bytes)));
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
    InviteSharedMemory(max_batch_bytes, window,
                       opened->mutable_shared_memory());
  }
  report_id_ = context_.reports->Open(p.job, p.shard.batch_size, absl::Now());

  absl::MutexLock lock(&mu_);
  ledger_.Open(window, batches, uint64_t{window} * reserve_bytes);
  QueueMessageLocked(std::move(response));
  return true;
}

void BatchStream::InviteSharedMemory(uint64_t max_batch_bytes,
                                     uint32_t window,
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
  auto ref = std::make_shared<Ref>(this);
  ticket_ = broker->Invite(
      slot_bytes, /*max_slots=*/window,
      [ref, slot_bytes](std::shared_ptr<common::SharedRegion> region,
                        uint32_t slots) {
        return ref->stream->AttachSharedMemory(std::move(region), slots,
                                               slot_bytes);
      });
  invite->set_socket(broker->socket());
  invite->set_ticket(ticket_);
  invite->set_slot_bytes(slot_bytes);
}

absl::Status BatchStream::AttachSharedMemory(
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

void BatchStream::CountRejected(grpc::StatusCode code) {
  if (ServerMetrics* metrics = context_.metrics) {
    metrics->RequestRejected(static_cast<int>(code));
  }
}

void BatchStream::QueueRejectionLocked(const Key& key,
                                       const absl::Status& status) {
  const auto code = static_cast<grpc::StatusCode>(status.code());
  CountRejected(code);
  StreamResponse response;
  batchd::v1::RequestRejected* rejected = response.mutable_rejected();
  rejected->set_epoch(key.first);
  rejected->set_batch_index(key.second);
  rejected->set_code(code);
  rejected->set_message(std::string(status.message()));
  QueueMessageLocked(std::move(response));
}

bool BatchStream::HandleRequest(const batchd::v1::BatchRequest& request) {
  if (plan_ == nullptr) {
    return FailStream(grpc::Status(
        grpc::StatusCode::FAILED_PRECONDITION,
        "a batch request came before the plan: send `open` with a Plan as "
        "the stream's first message"));
  }
  const uint64_t epoch = request.epoch();
  // Decided once per request: a request either came before the drain (all
  // of it is served) or after (none of it is).
  const StreamRegistry& registry = *context_.registry;
  const std::string drain_message =
      registry.draining()
          ? absl::StrCat(registry.DrainMessage(),
                         " and starts no new batches; request this one from "
                         "another daemon")
          : std::string();
  absl::Status shape;
  {
    absl::MutexLock lock(&mu_);
    shape = ledger_.CheckRequest(request.batch_indices_size(),
                                 request.slots_size());
  }
  if (!shape.ok()) return FailStream(ToGrpc(shape));
  struct Accepted {
    uint64_t index;
    BatchCancellation cancellation;
    BatchDestination destination;
  };
  std::vector<Accepted> accepted;
  {
    absl::MutexLock lock(&mu_);
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
    auto ref = std::make_shared<Ref>(this);
    const Key key{epoch, a.index};
    absl::Status started;
    if (context_.shared_batches == nullptr) {
      started = context_.pipeline->BuildBatch(
          plan_, epoch, a.index, std::move(a.cancellation),
          [ref, key](std::unique_ptr<BuiltBatch> batch) {
            ref->stream->OnBatchBuilt(key, std::move(batch));
          },
          std::move(a.destination));
    } else {
      started = context_.shared_batches->Get(
          plan_, epoch, a.index, std::move(a.cancellation),
          [ref, key](std::shared_ptr<const BuiltBatch> batch) {
            ref->stream->OnBatchBuilt(key, std::move(batch));
          },
          std::move(a.destination));
    }
    if (!started.ok()) {
      return FailStream(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                     std::string(started.message())));
    }
  }
  return true;
}

bool BatchStream::HandleCancel(const batchd::v1::CancelBatches& cancel) {
  if (plan_ == nullptr) {
    return FailStream(grpc::Status(
        grpc::StatusCode::FAILED_PRECONDITION,
        "a cancel came before the plan: send `open` with a Plan as the "
        "stream's first message"));
  }
  absl::Status shape;
  {
    absl::MutexLock lock(&mu_);
    shape = ledger_.CheckCancel(cancel.batch_indices_size());
  }
  if (!shape.ok()) return FailStream(ToGrpc(shape));
  absl::MutexLock lock(&mu_);
  for (uint64_t index : cancel.batch_indices()) {
    const Key key{cancel.epoch(), index};
    // Being built: OnBatchBuilt answers it. Header out: it is sent whole.
    if (ledger_.Cancel(key) != StreamLedger::Cancelled::kWithdrawn) continue;
    auto queued = std::find_if(
        queue_.begin(), queue_.end(), [&key](const Outgoing& out) {
          return out.batch != nullptr && !out.header_sent &&
                 Key{out.batch->epoch, out.batch->batch_index} == key;
        });
    if (queued != queue_.end()) queue_.erase(queued);
    AnswerWithdrawnLocked(key);
  }
  return true;
}

bool BatchStream::HandleReport(const batchd::v1::TrainerReport& report) {
  if (plan_ == nullptr) {
    return FailStream(grpc::Status(
        grpc::StatusCode::FAILED_PRECONDITION,
        "a report came before the plan: send `open` with a Plan as the "
        "stream's first message"));
  }
  absl::MutexLock lock(&mu_);
  const absl::Status kept = context_.reports->Record(
      report_id_, report, ledger_.headers_sent(), absl::Now());
  if (!kept.ok()) {
    CountRejected(grpc::StatusCode::INVALID_ARGUMENT);
    StreamResponse response;
    response.mutable_report_rejected()->set_message(
        std::string(kept.message()));
    QueueMessageLocked(std::move(response));
  }
  return true;
}

void BatchStream::QueueMessageLocked(StreamResponse response) {
  queue_.push_back(Outgoing{std::move(response)});
  ++queued_messages_;
}

bool BatchStream::PauseReadingIfBacklogged() {
  {
    absl::MutexLock lock(&mu_);
    if (queued_messages_ < kMaxQueuedMessages) return false;
    read_paused_ = true;
  }
  if (ServerMetrics* metrics = context_.metrics) {
    metrics->BoundHit("stream_reads_paused");
  }
  return true;
}

void BatchStream::AnswerWithdrawnLocked(const Key& key) {
  if (ServerMetrics* metrics = context_.metrics) {
    metrics->batches_outstanding().Add(-1);
  }
  QueueRejectionLocked(key, StreamLedger::CancelledAnswer());
}

void BatchStream::OnBatchBuilt(const Key& key,
                               std::shared_ptr<const BuiltBatch> batch) {
  {
    absl::MutexLock lock(&mu_);
    if (finished_ || finish_status_) return;
    switch (ledger_.BatchBuilt(key, /*built=*/batch != nullptr)) {
      case StreamLedger::Built::kSend: {
        Outgoing out;
        out.batch = std::move(batch);
        queue_.push_back(std::move(out));
        break;
      }
      case StreamLedger::Built::kAnswerCancelled:
        AnswerWithdrawnLocked(key);
        break;
      case StreamLedger::Built::kDrop:
        return;
    }
  }
  Pump();
}

bool BatchStream::NextMessageLocked() {
  if (queue_.empty()) return false;
  Outgoing& front = queue_.front();
  if (front.message) {
    current_ = common::EncodeMessage(*front.message);
    queue_.pop_front();
    --queued_messages_;
    return true;
  }
  const BuiltBatch& batch = *front.batch;
  if (!front.header_sent) {
    StreamResponse response;
    batchd::v1::BatchHeader* header = response.mutable_header();
    header->set_epoch(batch.epoch);
    header->set_batch_index(batch.batch_index);
    header->mutable_sample_indices()->Assign(batch.sample_indices.begin(),
                                             batch.sample_indices.end());
    header->mutable_labels()->Assign(batch.labels.begin(), batch.labels.end());
    header->mutable_shape()->Assign(batch.shape.begin(), batch.shape.end());
    header->set_dtype(batchd::v1::DTYPE_UINT8);
    header->set_layout(plan_->layout);
    header->set_total_bytes(batch.pixels.size());
    for (const auto& sub : batch.substitutions) {
      *header->add_substitutions() = sub;
    }
    header->set_in_shared_memory(batch.pixels.external());
    current_ = common::EncodeMessage(response);
    front.header_sent = true;
    ledger_.HeaderSent(Key{batch.epoch, batch.batch_index});
    // In shared memory the pixels are already the client's: the header
    // completes the batch.
    if (batch.pixels.external()) CompleteFrontLocked();
    return true;
  }
  const uint64_t length =
      std::min(kMaxChunkBytes, batch.pixels.size() - front.offset);
  current_ = common::EncodeChunk(batch.epoch, batch.batch_index, front.offset,
                                 batch.pixels.data() + front.offset, length,
                                 front.batch);
  front.offset += length;
  if (front.offset == batch.pixels.size()) CompleteFrontLocked();
  return true;
}

void BatchStream::CompleteFrontLocked() {
  const BuiltBatch& batch = *queue_.front().batch;
  written_batch_ =
      CompletedBatch{batch.sample_indices.size(), batch.pixels.size(),
                     batch.substitutions.size(), batch.finished};
  ledger_.Completed(Key{batch.epoch, batch.batch_index});
  queue_.pop_front();
  if (ServerMetrics* metrics = context_.metrics) {
    metrics->batches_outstanding().Add(-1);
  }
}

void BatchStream::ReleaseBudgetLocked() {
  if (const uint64_t bytes = ledger_.TakeReservedBytes(); bytes > 0) {
    context_.budget->Release(plan_->job, bytes);
  }
}

void BatchStream::Pump() {
  bool write = false;
  bool resume_reading = false;
  std::optional<grpc::Status> finish;
  {
    absl::MutexLock lock(&mu_);
    // Reading resumes once the client has taken half the backlog (hence
    // not one read per write at the bound).
    if (read_paused_ && !finished_ && !finish_status_ &&
        queued_messages_ <= kMaxQueuedMessages / 2) {
      read_paused_ = false;
      resume_reading = true;
    }
  }
  if (resume_reading) StartNextRead();
  {
    absl::MutexLock lock(&mu_);
    if (write_in_flight_ || finished_) return;
    const bool idle = ledger_.idle() && queue_.empty();
    if (!finish_status_ && NextMessageLocked()) {
      write_in_flight_ = true;
      write = true;
    } else if (finish_status_ || (reads_done_ && idle)) {
      finished_ = true;
      finish = finish_status_.value_or(grpc::Status::OK);
      // With nothing left to build or send, the stream's memory is free
      // now: give it back before the client sees the status, so that a
      // client that closes and reopens at once finds its budget.
      if (idle) ReleaseBudgetLocked();
    } else if (idle && context_.registry->draining()) {
      // Everything accepted before the drain has been sent; anything more
      // must come from another daemon.
      finished_ = true;
      ReleaseBudgetLocked();
      CountRejected(grpc::StatusCode::UNAVAILABLE);
      finish = grpc::Status(
          grpc::StatusCode::UNAVAILABLE,
          absl::StrCat(context_.registry->DrainMessage(),
                       ": every batch requested before the drain was sent; "
                       "request further batches from another daemon"));
    }
  }
  if (write) {
    HandToGrpc();
    StartWrite(&current_);
  } else if (finish) {
    {
      absl::MutexLock lock(&grpc_ops_mu_);
      finish_called_ = true;
    }
    HandToGrpc();
    Finish(*finish);
  }
}

void BatchStream::StartNextRead() {
  absl::MutexLock lock(&grpc_ops_mu_);
  if (finish_called_) return;
  HandToGrpc();
  StartRead(&request_bytes_);
}

void BatchStream::HandToGrpc() { common::TsanHandOff(this); }
void BatchStream::TakeFromGrpc() { common::TsanTakeBack(this); }

}  // namespace batchd::server
