#include "server/service/data_service.h"

#include <algorithm>
#include <deque>
#include <map>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/chunk_codec.h"
#include "common/local_address.h"
#include "common/sampler.h"
#include "common/tsan_handoff.h"

namespace batchd::server {

using batchd::v1::StreamRequest;
using batchd::v1::StreamResponse;

grpc::Status ToGrpc(const absl::Status& status) {
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

uint32_t BufferBudget::ReserveUpTo(const std::string& job, uint32_t wanted,
                                   uint64_t unit) {
  absl::MutexLock lock(&mu_);
  auto it = by_job_.find(job);
  const uint64_t job_reserved = it == by_job_.end() ? 0 : it->second;
  const uint64_t free =
      std::min(limit_ - reserved_, job_limit_ - job_reserved);
  const uint64_t fits = unit == 0 ? wanted : free / unit;
  const uint32_t granted =
      static_cast<uint32_t>(std::min<uint64_t>(wanted, fits));
  if (granted == 0) return 0;
  reserved_ += granted * unit;
  by_job_[job] += granted * unit;
  return granted;
}

void BufferBudget::Release(const std::string& job, uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  reserved_ -= bytes;
  auto it = by_job_.find(job);
  it->second -= bytes;
  if (it->second == 0) by_job_.erase(it);
}

uint64_t BufferBudget::reserved() const {
  absl::MutexLock lock(&mu_);
  return reserved_;
}

uint64_t BufferBudget::reserved(const std::string& job) const {
  absl::MutexLock lock(&mu_);
  auto it = by_job_.find(job);
  return it == by_job_.end() ? 0 : it->second;
}

// One StreamBatches call. Lifetime: reference-counted; gRPC holds one
// reference until OnDone, each batch being built holds one, and the service
// holds one while it wakes or cancels its streams (drain), so neither a
// pipeline callback nor the service touches a deleted stream.
//
// Lock order: a stream's mu_ may be held while taking the service's mu_,
// never the other way round.
//
// The stream is raw bytes both ways: requests are parsed here, and a batch's
// chunks are written as slices of the batch buffer itself
// (common/chunk_codec.h), so pixels are never copied in user space on the
// way out.
class DataServiceImpl::BatchStream final
    : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  // `caller` is who the call's token says; its error refuses the stream.
  // `peer` is gRPC's name for the client's address.
  BatchStream(DataServiceImpl* service, absl::StatusOr<Caller> caller,
              std::string peer)
      : service_(service),
        caller_(caller.ok() ? *caller : Caller{}),
        peer_(std::move(peer)),
        cancelled_(std::make_shared<std::atomic<bool>>(false)) {
    // Read first: once registered, a drain may finish the stream from another
    // thread, and a read must not be started after Finish.
    HandToGrpc();
    StartRead(&request_bytes_);
    grpc::Status refused =
        caller.ok() ? service_->AddStream(this) : ToGrpc(caller.status());
    if (!refused.ok()) {
      FailStream(std::move(refused));
      Pump();
    }
    HandToGrpc();
  }

  void AddRef() { refs_.fetch_add(1, std::memory_order_relaxed); }
  void Unref() {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

  // Re-examines the stream after the service began draining: one with
  // nothing outstanding ends now.
  void Wake() { Pump(); }

  // Stops building this stream's batches and ends it with `status` once no
  // write is in flight.
  void Cancel(const grpc::Status& status) {
    cancelled_->store(true);
    {
      absl::MutexLock lock(&mu_);
      if (!finish_status_) finish_status_ = status;
    }
    Pump();
  }

  void OnReadDone(bool ok) override {
    TakeFromGrpc();
    bool failed = false;
    {
      absl::MutexLock lock(&mu_);
      failed = finish_status_.has_value() || finished_;
      if (!ok) reads_done_ = true;
    }
    if (ok && !failed) {
      bool keep_reading = true;
      grpc::Slice bytes;
      request_.Clear();
      if (!request_bytes_.DumpToSingleSlice(&bytes).ok() ||
          !request_.ParseFromArray(bytes.begin(),
                                   static_cast<int>(bytes.size()))) {
        request_.Clear();
        keep_reading = FailStream(grpc::Status(
            grpc::StatusCode::INVALID_ARGUMENT,
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
      if (keep_reading) {
        HandToGrpc();
        StartRead(&request_bytes_);
      }
    }
    Pump();
    HandToGrpc();
  }

  void OnWriteDone(bool ok) override {
    TakeFromGrpc();
    {
      absl::MutexLock lock(&mu_);
      write_in_flight_ = false;
      if (!ok) {
        cancelled_->store(true);
        if (!finish_status_) {
          finish_status_ = grpc::Status(grpc::StatusCode::CANCELLED,
                                        "the client went away");
        }
      } else if (written_batch_) {
        const CompletedBatch& done = *written_batch_;
        const absl::Duration send = absl::Now() - done.finished;
        service_->send_nanos_ +=
            static_cast<uint64_t>(absl::ToInt64Nanoseconds(send));
        if (ServerMetrics* metrics = service_->options_.metrics) {
          metrics->send_seconds().Observe(absl::ToDoubleSeconds(send));
        }
        service_->stats_->BatchSent(plan_->job, done.images, done.bytes,
                                    done.substitutions);
      }
      written_batch_.reset();
    }
    Pump();
    HandToGrpc();
  }

  void OnCancel() override {
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

  void OnDone() override {
    TakeFromGrpc();
    cancelled_->store(true);
    {
      absl::MutexLock lock(&mu_);
      queue_.clear();
      if (ServerMetrics* metrics = service_->options_.metrics) {
        // Batches accepted but never fully sent (the stream ended first).
        metrics->batches_outstanding().Add(
            -static_cast<double>(outstanding_.size()));
      }
      outstanding_.clear();
      ReleaseBudgetLocked();
      if (plan_ != nullptr) service_->stats_->StreamClosed(plan_->job);
    }
    if (report_id_ != 0) service_->reports_->Close(report_id_);
    if (!ticket_.empty()) service_->options_.shared_memory->Withdraw(ticket_);
    {
      absl::MutexLock lock(&mu_);
      // Batches still being built keep the mapping alive until they finish.
      if (region_ != nullptr) {
        if (ServerMetrics* metrics = service_->options_.metrics) {
          metrics->shared_memory_bytes().Add(
              -static_cast<double>(region_->size()));
        }
        region_.reset();
      }
    }
    if (plan_ != nullptr) service_->RemoveJobStream(plan_->job);
    service_->RemoveStream(this);
    Unref();
  }

 private:
  // Pixel counts of a batch whose last chunk is being written.
  struct CompletedBatch {
    uint64_t images = 0;
    uint64_t bytes = 0;
    uint64_t substitutions = 0;
    absl::Time finished;
  };
  using Key = std::pair<uint64_t, uint64_t>;  // (epoch, batch index)

  // A message to send, or a finished batch to send as header + chunks.
  struct Outgoing {
    std::optional<StreamResponse> message;
    // Shared with the chunks' slices, which gRPC may hold after the write.
    std::shared_ptr<BuiltBatch> batch;
    bool header_sent = false;
    uint64_t offset = 0;
  };
  // Releases the stream's reference when the pipeline is done with a batch,
  // whether or not its callback ran.
  struct Ref {
    explicit Ref(BatchStream* stream) : stream(stream) { ++stream->refs_; }
    ~Ref() { stream->Unref(); }
    BatchStream* stream;
  };

  ~BatchStream() override = default;

  // Records a stream error; the stream finishes with it once no write is in
  // flight. Returns false (stop reading).
  bool FailStream(grpc::Status status) {
    CountRejected(status.error_code());
    absl::MutexLock lock(&mu_);
    cancelled_->store(true);
    if (!finish_status_) finish_status_ = std::move(status);
    return false;
  }

  bool HandleOpen(const batchd::v1::OpenPlan& open) {
    if (service_->draining()) {
      return FailStream(service_->DrainingRefusal());
    }
    if (plan_ != nullptr) {
      return FailStream(grpc::Status(
          grpc::StatusCode::FAILED_PRECONDITION,
          "the plan is already open; a stream carries one plan, so open a "
          "new stream for another"));
    }
    absl::StatusOr<std::shared_ptr<const ResolvedPlan>> plan = ResolvePlan(
        open.plan(), service_->datasets_, service_->options_.limits);
    if (!plan.ok()) {
      return FailStream(ToGrpc(plan.status()));
    }
    const ResolvedPlan& p = **plan;
    if (absl::Status allowed = CheckJob(caller_, p.job); !allowed.ok()) {
      return FailStream(grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                                     std::string(allowed.message())));
    }
    const DataServiceOptions& options = service_->options_;
    // A shard smaller than one batch makes one smaller batch: reserve and
    // announce what is real.
    const uint64_t max_batch_bytes = p.batch_bytes(
        std::min<uint64_t>(p.shard.batch_size, ShardSize(p.shard)));
    const uint32_t wanted = std::min(
        open.window() == 0 ? options.default_window : open.window(),
        options.max_window);
    if (grpc::Status counted = service_->AddJobStream(p.job); !counted.ok()) {
      return FailStream(std::move(counted));
    }
    // From here the stream counts against its job until OnDone.
    {
      absl::MutexLock lock(&mu_);
      plan_ = *plan;
    }
    BufferBudget& budget = service_->budget_;
    const uint32_t window = budget.ReserveUpTo(p.job, wanted, max_batch_bytes);
    if (window == 0) return FailStream(BudgetRefusal(p.job, max_batch_bytes));
    StreamResponse response;
    batchd::v1::PlanOpened* opened = response.mutable_opened();
    opened->set_window(window);
    opened->set_batches_per_epoch(BatchesPerEpoch(p.shard));
    opened->set_samples_per_epoch(ShardSize(p.shard));
    for (uint64_t d : p.shape(p.shard.batch_size)) opened->add_shape(d);
    opened->set_max_batch_bytes(max_batch_bytes);
    opened->set_dtype(batchd::v1::DTYPE_UINT8);
    opened->set_layout(p.layout);
    *opened->mutable_daemon() = service_->options_.daemon_info;
    if (open.offer_shared_memory()) {
      InviteSharedMemory(max_batch_bytes, opened->mutable_shared_memory());
    }
    service_->stats_->StreamOpened(p.job);
    report_id_ =
        service_->reports_->Open(p.job, p.shard.batch_size, absl::Now());

    absl::MutexLock lock(&mu_);
    window_ = window;
    batches_per_epoch_ = opened->batches_per_epoch();
    reserved_bytes_ = uint64_t{window} * max_batch_bytes;
    queue_.push_back(Outgoing{std::move(response)});
    return true;
  }

  // Answers an offer of shared memory: a ticket for the broker, or why not.
  void InviteSharedMemory(uint64_t max_batch_bytes,
                          batchd::v1::SharedMemoryInvite* invite) {
    SharedMemoryBroker* broker = service_->options_.shared_memory;
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
    // Every slot starts on a page: the decoder's and the copy engine's
    // accesses stay aligned.
    const uint64_t slot_bytes = (max_batch_bytes + 4095) / 4096 * 4096;
    auto ref = std::make_shared<Ref>(this);
    ticket_ = broker->Invite(
        slot_bytes, [ref, slot_bytes](
                        std::shared_ptr<common::SharedRegion> region,
                        uint32_t slots) {
          return ref->stream->AttachSharedMemory(std::move(region), slots,
                                                 slot_bytes);
        });
    invite->set_socket(broker->socket());
    invite->set_ticket(ticket_);
    invite->set_slot_bytes(slot_bytes);
  }

  // Runs on the broker's thread once the client's region is mapped.
  absl::Status AttachSharedMemory(std::shared_ptr<common::SharedRegion> region,
                                  uint32_t slots, uint64_t slot_bytes)
      ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    if (finished_ || finish_status_) {
      return absl::FailedPreconditionError("the stream has already ended");
    }
    if (requested_ > 0) {
      return absl::FailedPreconditionError(
          "the stream already asked for batches as bytes; attach shared "
          "memory before the first BatchRequest");
    }
    if (ServerMetrics* metrics = service_->options_.metrics) {
      metrics->shared_memory_bytes().Add(static_cast<double>(region->size()));
    }
    region_ = std::move(region);
    slot_bytes_ = slot_bytes;
    slot_granted_.assign(slots, false);
    // The batches go into the client's memory, which the daemon's budget
    // does not count.
    ReleaseBudgetLocked();
    return absl::OkStatus();
  }

  // Why a stream of `job` whose batches need `batch_bytes` each got no
  // window: the job's share or the whole budget is reserved.
  grpc::Status BudgetRefusal(const std::string& job, uint64_t batch_bytes) {
    const BufferBudget& budget = service_->budget_;
    const uint64_t job_free = budget.job_limit() - budget.reserved(job);
    if (job_free < batch_bytes) {
      return grpc::Status(
          grpc::StatusCode::RESOURCE_EXHAUSTED,
          absl::StrCat("job \"", job, "\" holds ", budget.reserved(job),
                       " bytes of batch buffers, and a batch of this plan "
                       "needs ",
                       batch_bytes, " more than its share of ",
                       budget.job_limit(),
                       " bytes (--max-job-buffer-share of --max-buffer-bytes) "
                       "allows; close a stream of this job, lower batch_size, "
                       "size or prefetch, or raise --max-job-buffer-share"));
    }
    return grpc::Status(
        grpc::StatusCode::RESOURCE_EXHAUSTED,
        absl::StrCat("the daemon's batch buffers are full: a batch of this "
                     "plan needs ",
                     batch_bytes, " bytes, ", budget.limit() - budget.reserved(),
                     " of --max-buffer-bytes=", budget.limit(),
                     " are free; retry later, lower batch_size or size, or "
                     "raise --max-buffer-bytes"));
  }

  void CountRejected(grpc::StatusCode code) {
    if (ServerMetrics* metrics = service_->options_.metrics) {
      metrics->RequestRejected(static_cast<int>(code));
    }
  }

  StreamResponse Rejected(uint64_t epoch, uint64_t batch_index,
                          grpc::StatusCode code, std::string message) {
    CountRejected(code);
    StreamResponse response;
    batchd::v1::RequestRejected* rejected = response.mutable_rejected();
    rejected->set_epoch(epoch);
    rejected->set_batch_index(batch_index);
    rejected->set_code(code);
    rejected->set_message(std::move(message));
    return response;
  }

  bool HandleRequest(const batchd::v1::BatchRequest& request) {
    if (plan_ == nullptr) {
      return FailStream(grpc::Status(
          grpc::StatusCode::FAILED_PRECONDITION,
          "a batch request came before the plan: send `open` with a Plan as "
          "the stream's first message"));
    }
    const uint64_t epoch = request.epoch();
    // Decided once per request: a request either came before the drain (all
    // of it is served) or after (none of it is).
    const bool draining = service_->draining();
    const std::string drain_message =
        draining ? absl::StrCat(service_->DrainMessage(),
                                " and starts no new batches; request this "
                                "one from another daemon")
                 : std::string();
    const uint32_t window = Window();
    if (static_cast<uint64_t>(request.batch_indices_size()) > window) {
      // Never acceptable whole: refused once, not index by index (which
      // would answer a small message with a flood of rejections).
      return FailStream(grpc::Status(
          grpc::StatusCode::INVALID_ARGUMENT,
          absl::StrCat("a BatchRequest names ", request.batch_indices_size(),
                       " batches but the window is ", window,
                       "; ask for at most window batches at a time")));
    }
    if (request.slots_size() != 0 &&
        request.slots_size() != request.batch_indices_size()) {
      return FailStream(grpc::Status(
          grpc::StatusCode::INVALID_ARGUMENT,
          absl::StrCat("a BatchRequest names ", request.batch_indices_size(),
                       " batches and ", request.slots_size(),
                       " slots; give one slot per batch, or none")));
    }
    struct Accepted {
      uint64_t index;
      BatchCancellation cancellation;
      BatchDestination destination;
    };
    std::vector<Accepted> accepted;
    {
      absl::MutexLock lock(&mu_);
      ++requested_;
      for (int i = 0; i < request.batch_indices_size(); ++i) {
        const uint64_t index = request.batch_indices(i);
        const std::optional<uint32_t> slot =
            request.slots_size() > 0 ? std::optional<uint32_t>(request.slots(i))
                                     : std::nullopt;
        if (epoch > 0xFFFFFFFFull) {
          queue_.push_back(Outgoing{Rejected(
              epoch, index, grpc::StatusCode::INVALID_ARGUMENT,
              absl::StrCat("epoch ", epoch, " is too large; epochs are "
                                            "0..4294967295"))});
        } else if (index >= batches_per_epoch_) {
          queue_.push_back(Outgoing{Rejected(
              epoch, index, grpc::StatusCode::INVALID_ARGUMENT,
              absl::StrCat("batch index ", index,
                           " is beyond the epoch: this plan has ",
                           batches_per_epoch_, " batches per epoch (0..",
                           batches_per_epoch_ - 1, ")"))});
        } else if (draining) {
          queue_.push_back(Outgoing{Rejected(
              epoch, index, grpc::StatusCode::UNAVAILABLE, drain_message)});
        } else if (outstanding_.count({epoch, index}) > 0) {
          queue_.push_back(Outgoing{Rejected(
              epoch, index, grpc::StatusCode::INVALID_ARGUMENT,
              absl::StrCat("batch ", index, " of epoch ", epoch,
                           " is already outstanding on this stream; it is "
                           "answered once, so do not request it again "
                           "before it arrives"))});
        } else if (outstanding_.size() >= window_) {
          queue_.push_back(Outgoing{Rejected(
              epoch, index, grpc::StatusCode::RESOURCE_EXHAUSTED,
              absl::StrCat("more than window=", window_,
                           " batches outstanding; request another batch only "
                           "after one has fully arrived"))});
        } else if (std::string wrong = SlotProblemLocked(slot); !wrong.empty()) {
          queue_.push_back(Outgoing{Rejected(
              epoch, index, grpc::StatusCode::INVALID_ARGUMENT,
              absl::StrCat("batch ", index, " of epoch ", epoch, ": ",
                           wrong))});
        } else {
          auto cancelled = std::make_shared<std::atomic<bool>>(false);
          outstanding_.emplace(Key{epoch, index}, cancelled);
          BatchDestination destination;
          if (slot.has_value()) {
            slot_granted_[*slot] = true;
            slot_of_[Key{epoch, index}] = *slot;
            destination.data = region_->data() + *slot * slot_bytes_;
            destination.capacity = slot_bytes_;
            destination.owner = region_;
          }
          accepted.push_back(Accepted{index,
                                      BatchCancellation{cancelled_, cancelled},
                                      std::move(destination)});
          if (ServerMetrics* metrics = service_->options_.metrics) {
            metrics->batches_outstanding().Add(1);
          }
        }
      }
    }
    for (Accepted& a : accepted) {
      auto ref = std::make_shared<Ref>(this);
      const absl::Status started = service_->pipeline_->BuildBatch(
          plan_, epoch, a.index, std::move(a.cancellation),
          [ref, key = Key{epoch, a.index}](std::unique_ptr<BuiltBatch> batch) {
            ref->stream->OnBatchBuilt(key, std::move(batch));
          },
          std::move(a.destination));
      if (!started.ok()) {
        return FailStream(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                       std::string(started.message())));
      }
    }
    return true;
  }

  // Why `slot` cannot be granted now ("" when it can): shared memory needs
  // a free slot in range for every batch, the bytes path none.
  std::string SlotProblemLocked(std::optional<uint32_t> slot)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (region_ == nullptr) {
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

  // The daemon is done writing `key`'s slot, if it had one: the slot is
  // the client's again.
  void ReleaseSlotLocked(const Key& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = slot_of_.find(key);
    if (it == slot_of_.end()) return;
    slot_granted_[it->second] = false;
    slot_of_.erase(it);
  }

  // Withdraws requested batches whose header is not sent yet: queued ones
  // at once, ones being built when the pipeline gives them back.
  bool HandleCancel(const batchd::v1::CancelBatches& cancel) {
    if (plan_ == nullptr) {
      return FailStream(grpc::Status(
          grpc::StatusCode::FAILED_PRECONDITION,
          "a cancel came before the plan: send `open` with a Plan as the "
          "stream's first message"));
    }
    const uint32_t window = Window();
    if (static_cast<uint64_t>(cancel.batch_indices_size()) > window) {
      return FailStream(grpc::Status(
          grpc::StatusCode::INVALID_ARGUMENT,
          absl::StrCat("a CancelBatches names ", cancel.batch_indices_size(),
                       " batches but at most window=", window,
                       " can be outstanding")));
    }
    absl::MutexLock lock(&mu_);
    for (uint64_t index : cancel.batch_indices()) {
      const Key key{cancel.epoch(), index};
      auto it = outstanding_.find(key);
      if (it == outstanding_.end()) continue;  // answered already
      it->second->store(true);
      auto queued = std::find_if(
          queue_.begin(), queue_.end(), [&key](const Outgoing& out) {
            return out.batch != nullptr && !out.header_sent &&
                   Key{out.batch->epoch, out.batch->batch_index} == key;
          });
      if (queued != queue_.end()) {
        queue_.erase(queued);
        WithdrawLocked(key);
      }
      // Otherwise it is being built (OnBatchBuilt withdraws it) or its
      // header is out (it is sent whole).
    }
    return true;
  }

  // Keeps the trainer's report, or answers why it is ignored.
  bool HandleReport(const batchd::v1::TrainerReport& report) {
    if (plan_ == nullptr) {
      return FailStream(grpc::Status(
          grpc::StatusCode::FAILED_PRECONDITION,
          "a report came before the plan: send `open` with a Plan as the "
          "stream's first message"));
    }
    absl::MutexLock lock(&mu_);
    const absl::Status kept = service_->reports_->Record(
        report_id_, report, headers_sent_, absl::Now());
    if (!kept.ok()) {
      CountRejected(grpc::StatusCode::INVALID_ARGUMENT);
      StreamResponse response;
      response.mutable_report_rejected()->set_message(
          std::string(kept.message()));
      queue_.push_back(Outgoing{std::move(response)});
    }
    return true;
  }

  uint32_t Window() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return window_;
  }

  // Answers a cancelled batch and frees its window place.
  // REQUIRES: mu_ held; `key` outstanding and not in queue_.
  void WithdrawLocked(const Key& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    outstanding_.erase(key);
    // Its work is over (the pipeline gave it back, or it was queued whole).
    ReleaseSlotLocked(key);
    if (ServerMetrics* metrics = service_->options_.metrics) {
      metrics->batches_outstanding().Add(-1);
    }
    queue_.push_back(Outgoing{Rejected(key.first, key.second,
                                       grpc::StatusCode::CANCELLED,
                                       "cancelled at the client's request")});
  }

  // Runs on a pipeline thread. `batch` is null when its work was cancelled.
  void OnBatchBuilt(const Key& key, std::unique_ptr<BuiltBatch> batch) {
    {
      absl::MutexLock lock(&mu_);
      if (finished_ || finish_status_) return;
      auto it = outstanding_.find(key);
      if (it == outstanding_.end()) return;
      if (batch == nullptr || it->second->load()) {
        WithdrawLocked(key);
      } else {
        Outgoing out;
        out.batch = std::move(batch);
        queue_.push_back(std::move(out));
      }
    }
    Pump();
  }

  // Fills current_ with the next message to write. REQUIRES: mu_ held, no
  // write in flight.
  bool NextMessageLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (queue_.empty()) return false;
    Outgoing& front = queue_.front();
    if (front.message) {
      current_ = common::EncodeMessage(*front.message);
      queue_.pop_front();
      return true;
    }
    BuiltBatch& batch = *front.batch;
    if (!front.header_sent) {
      StreamResponse response;
      batchd::v1::BatchHeader* header = response.mutable_header();
      header->set_epoch(batch.epoch);
      header->set_batch_index(batch.batch_index);
      header->mutable_sample_indices()->Assign(batch.sample_indices.begin(),
                                               batch.sample_indices.end());
      header->mutable_labels()->Assign(batch.labels.begin(),
                                       batch.labels.end());
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
      ++headers_sent_;
      // In shared memory the pixels are already the client's: the header
      // completes the batch.
      if (batch.pixels.external()) CompleteFrontLocked();
      return true;
    }
    const uint64_t length =
        std::min(kMaxChunkBytes, batch.pixels.size() - front.offset);
    current_ = common::EncodeChunk(batch.epoch, batch.batch_index,
                                   front.offset,
                                   batch.pixels.data() + front.offset, length,
                                   front.batch);
    front.offset += length;
    if (front.offset == batch.pixels.size()) CompleteFrontLocked();
    return true;
  }

  // The front batch's last message is being written: it stops being
  // outstanding. REQUIRES: mu_ held; queue_.front() is a batch.
  void CompleteFrontLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const BuiltBatch& batch = *queue_.front().batch;
    const Key key{batch.epoch, batch.batch_index};
    written_batch_ =
        CompletedBatch{batch.sample_indices.size(), batch.pixels.size(),
                       batch.substitutions.size(), batch.finished};
    outstanding_.erase(key);
    ReleaseSlotLocked(key);
    queue_.pop_front();
    if (ServerMetrics* metrics = service_->options_.metrics) {
      metrics->batches_outstanding().Add(-1);
    }
  }

  void ReleaseBudgetLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (reserved_bytes_ > 0) {
      service_->budget_.Release(plan_->job, reserved_bytes_);
    }
    reserved_bytes_ = 0;
  }

  // Starts the next write, or finishes the stream, if either is due.
  // REQUIRES: mu_ not held (StartWrite and Finish may run reactions inline).
  void Pump() ABSL_LOCKS_EXCLUDED(mu_) {
    bool write = false;
    std::optional<grpc::Status> finish;
    {
      absl::MutexLock lock(&mu_);
      if (write_in_flight_ || finished_) return;
      if (!finish_status_ && NextMessageLocked()) {
        write_in_flight_ = true;
        write = true;
      } else if (finish_status_ ||
                 (reads_done_ && outstanding_.empty() && queue_.empty())) {
        finished_ = true;
        finish = finish_status_.value_or(grpc::Status::OK);
        // With nothing left to build or send, the stream's memory is free
        // now: give it back before the client sees the status, so that a
        // client that closes and reopens at once finds its budget.
        if (outstanding_.empty() && queue_.empty()) ReleaseBudgetLocked();
      } else if (outstanding_.empty() && queue_.empty() && service_->draining()) {
        // Everything accepted before the drain has been sent; anything more
        // must come from another daemon.
        finished_ = true;
        ReleaseBudgetLocked();
        CountRejected(grpc::StatusCode::UNAVAILABLE);
        finish = grpc::Status(
            grpc::StatusCode::UNAVAILABLE,
            absl::StrCat(service_->DrainMessage(),
                         ": every batch requested before the drain was sent; "
                         "request further batches from another daemon"));
      }
    }
    if (write) {
      HandToGrpc();
      StartWrite(&current_);
    } else if (finish) {
      HandToGrpc();
      Finish(*finish);
    }
  }

  // gRPC orders the stream's construction, its Start* calls and Finish
  // before the reactions they lead to, with synchronisation of its own
  // that ThreadSanitizer cannot see (common/tsan_handoff.h).
  void HandToGrpc() { common::TsanHandOff(this); }
  void TakeFromGrpc() { common::TsanTakeBack(this); }

  DataServiceImpl* const service_;
  // Who opened the stream (from its token), checked against the plan's job.
  const Caller caller_;
  const std::string peer_;
  const std::shared_ptr<std::atomic<bool>> cancelled_;
  std::atomic<int> refs_{1};  // gRPC's, until OnDone

  // Only touched by reactions, which gRPC runs one at a time for reads.
  grpc::ByteBuffer request_bytes_;
  StreamRequest request_;

  absl::Mutex mu_;
  // Set once by HandleOpen (a read reaction); read by later reactions and
  // pipeline callbacks only after it is set.
  std::shared_ptr<const ResolvedPlan> plan_;
  // The stream's id in the service's TrainerReports, set with plan_; 0
  // before.
  uint64_t report_id_ = 0;
  // The shared-memory ticket offered to the client, set by HandleOpen;
  // empty when none was.
  std::string ticket_;
  // Same-host shared memory, once attached (AttachSharedMemory): the
  // client's ring, its slot size, which slots are granted to a batch that
  // has not had its header sent (the daemon writes no others), and the slot
  // of each such batch.
  std::shared_ptr<common::SharedRegion> region_ ABSL_GUARDED_BY(mu_);
  uint64_t slot_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<bool> slot_granted_ ABSL_GUARDED_BY(mu_);
  std::map<Key, uint32_t> slot_of_ ABSL_GUARDED_BY(mu_);
  // BatchRequests received; shared memory attaches only before the first.
  uint64_t requested_ ABSL_GUARDED_BY(mu_) = 0;
  // Batch headers written, which bounds the batches a report may count.
  uint64_t headers_sent_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t window_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t batches_per_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t reserved_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // Accepted batches whose last chunk is not yet handed to a write, with
  // the flag that cancels each one's work.
  std::map<Key, std::shared_ptr<std::atomic<bool>>> outstanding_
      ABSL_GUARDED_BY(mu_);
  std::deque<Outgoing> queue_ ABSL_GUARDED_BY(mu_);
  // The serialized message being written; owned by the write in flight.
  grpc::ByteBuffer current_;
  std::optional<CompletedBatch> written_batch_ ABSL_GUARDED_BY(mu_);
  bool write_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<grpc::Status> finish_status_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;  // Finish called
};

DataServiceImpl::DataServiceImpl(DatasetMap datasets,
                                 DataServiceOptions options,
                                 Pipeline* pipeline, JobStats* stats,
                                 TrainerReports* reports)
    : datasets_(std::move(datasets)),
      options_(options),
      pipeline_(pipeline),
      stats_(stats),
      reports_(reports),
      budget_(options.max_buffer_bytes, options.max_job_buffer_bytes) {}

double DataServiceImpl::send_seconds() const {
  return send_nanos_.load() * 1e-9;
}

grpc::ServerUnaryReactor* DataServiceImpl::ListDatasets(
    grpc::CallbackServerContext* context,
    const batchd::v1::ListDatasetsRequest* /*request*/,
    batchd::v1::ListDatasetsResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (absl::StatusOr<Caller> caller = Authenticate(*context); !caller.ok()) {
    reactor->Finish(ToGrpc(caller.status()));
    return reactor;
  }
  for (const auto& [name, dataset] : datasets_) {
    batchd::v1::DatasetInfo* info = response->add_datasets();
    info->set_name(name);
    info->set_num_samples(dataset->size());
    for (const std::string& c : dataset->class_names()) {
      info->add_class_names(c);
    }
  }
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>*
DataServiceImpl::StreamBatches(grpc::CallbackServerContext* context) {
  return new BatchStream(this, Authenticate(*context), context->peer());
}

absl::StatusOr<Caller> DataServiceImpl::Authenticate(
    const grpc::CallbackServerContext& context) const {
  if (options_.authorizer == nullptr) return Caller{};
  return options_.authorizer->Authenticate(context);
}

grpc::Status DataServiceImpl::AddJobStream(const std::string& job) {
  absl::MutexLock lock(&mu_);
  uint32_t& open = job_streams_[job];
  if (open >= options_.max_streams_per_job) {
    return grpc::Status(
        grpc::StatusCode::RESOURCE_EXHAUSTED,
        absl::StrCat("job \"", job, "\" already has ", open,
                     " streams open, the most --max-streams-per-job allows; "
                     "close one or raise --max-streams-per-job"));
  }
  ++open;
  return grpc::Status::OK;
}

void DataServiceImpl::RemoveJobStream(const std::string& job) {
  absl::MutexLock lock(&mu_);
  auto it = job_streams_.find(job);
  if (it != job_streams_.end() && --it->second == 0) job_streams_.erase(it);
}

grpc::Status DataServiceImpl::AddStream(BatchStream* stream) {
  absl::MutexLock lock(&mu_);
  if (draining_.load()) return DrainingRefusalLocked();
  if (streams_.size() >= options_.max_open_streams) {
    return grpc::Status(
        grpc::StatusCode::RESOURCE_EXHAUSTED,
        absl::StrCat("batchd already has ", streams_.size(),
                     " StreamBatches calls open, its --max-open-streams "
                     "limit; close a stream, retry later or on another "
                     "daemon, or raise --max-open-streams"));
  }
  streams_.insert(stream);
  return grpc::Status::OK;
}

void DataServiceImpl::RemoveStream(BatchStream* stream) {
  absl::MutexLock lock(&mu_);
  streams_.erase(stream);
}

std::vector<DataServiceImpl::BatchStream*> DataServiceImpl::RefStreams() {
  absl::MutexLock lock(&mu_);
  std::vector<BatchStream*> streams;
  streams.reserve(streams_.size());
  for (BatchStream* stream : streams_) {
    // Registered streams are alive: OnDone unregisters before it drops
    // gRPC's reference.
    stream->AddRef();
    streams.push_back(stream);
  }
  return streams;
}

std::string DataServiceImpl::DrainMessage() const {
  absl::MutexLock lock(&mu_);
  return absl::StrCat("batchd is draining (", drain_reason_, ")");
}

grpc::Status DataServiceImpl::DrainingRefusal() const {
  absl::MutexLock lock(&mu_);
  return DrainingRefusalLocked();
}

grpc::Status DataServiceImpl::DrainingRefusalLocked() const {
  return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                      absl::StrCat("batchd is draining (", drain_reason_,
                                   "); connect to another daemon"));
}

void DataServiceImpl::BeginDrain(absl::string_view reason) {
  {
    absl::MutexLock lock(&mu_);
    if (draining_.load()) return;
    drain_reason_ = std::string(reason);
    draining_.store(true);
  }
  for (BatchStream* stream : RefStreams()) {
    stream->Wake();
    stream->Unref();
  }
}

size_t DataServiceImpl::open_streams() const {
  absl::MutexLock lock(&mu_);
  return streams_.size();
}

size_t DataServiceImpl::AwaitStreamsDone(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return streams_.empty();
  };
  mu_.AwaitWithDeadline(absl::Condition(&done), deadline);
  return streams_.size();
}

void DataServiceImpl::CancelStreams(const grpc::Status& status) {
  for (BatchStream* stream : RefStreams()) {
    stream->Cancel(status);
    stream->Unref();
  }
}

}  // namespace batchd::server
