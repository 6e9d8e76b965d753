// DaemonSet, part 4: the StreamSink. Each daemon's reader thread
// (client/daemon_stream.h) hands its stream's responses here: `opened`
// (with the shared-memory attach), headers, chunks into their slots,
// rejections, and the stream's end (failover and reconnect backoff).
#include <algorithm>
#include <cstdio>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/daemon_set.h"

namespace batchd::client {

using ::batchd::v1::BatchHeader;
using ::batchd::v1::PlanOpened;
using ::batchd::v1::RequestRejected;
using ::batchd::v1::StreamResponse;

namespace {

// How long the shared-memory side channel may take to answer.
constexpr absl::Duration kAttachTimeout = absl::Seconds(5);

std::string BatchName(uint64_t epoch, uint64_t index) {
  return absl::StrCat("batch ", index, " of epoch ", epoch);
}

// Same shape, sizes and counts: the daemons serve the same plan.
bool SamePlan(const PlanOpened& a, const PlanOpened& b) {
  return a.batches_per_epoch() == b.batches_per_epoch() &&
         a.resumed_epoch_batches() == b.resumed_epoch_batches() &&
         a.samples_per_epoch() == b.samples_per_epoch() &&
         a.max_batch_bytes() == b.max_batch_bytes() &&
         std::equal(a.shape().begin(), a.shape().end(), b.shape().begin(),
                    b.shape().end());
}

}  // namespace

absl::Status DaemonSet::ProtocolError(int daemon,
                                      absl::string_view what) const {
  return absl::InternalError(absl::StrCat(
      "protocol error from batchd at ", roster_.endpoint(daemon), ": ",
      what));
}

absl::Status DaemonSet::OnResponse(int daemon, StreamResponse& response) {
  std::shared_ptr<SharedRing> ring;
  absl::Status why_bytes;
  if (response.kind_case() == StreamResponse::kOpened) {
    ring = AttachRing(response.opened(), &why_bytes);
  }
  absl::MutexLock lock(&mu_);
  const absl::Time now = absl::Now();
  watch_.OnMessage(daemon, now);
  scheduler_.OnProgress(daemon, now);
  switch (response.kind_case()) {
    case StreamResponse::kOpened:
      return HandleOpened(daemon, response.opened(), std::move(ring),
                          why_bytes);
    case StreamResponse::kHeader:
      return HandleHeader(daemon, *response.mutable_header());
    case StreamResponse::kChunk:
      break;  // decoded by the stream; never reaches here
    case StreamResponse::kRejected:
      return HandleRejected(daemon, response.rejected());
    case StreamResponse::kReportRejected:
      // Only the daemon's view of this trainer suffers; batches go on.
      ++reports_rejected_;
      return absl::OkStatus();
    case StreamResponse::KIND_NOT_SET:
      break;
  }
  return ProtocolError(daemon, "an empty or unknown response message");
}

// ---- `opened` ----

std::shared_ptr<SharedRing> DaemonSet::AttachRing(const PlanOpened& opened,
                                                  absl::Status* why) {
  if (!offer_shared_memory_) {
    *why = absl::FailedPreconditionError(
        !options_.shared_memory
            ? "LoaderOptions.shared_memory is off"
            : spec_.addresses.size() != 1
                  ? "shared memory needs a single daemon endpoint"
                  : "the endpoint is not a unix: or loopback address");
    return nullptr;
  }
  const batchd::v1::SharedMemoryInvite& invite = opened.shared_memory();
  if (!opened.has_shared_memory()) {
    *why = absl::FailedPreconditionError(
        "the daemon does not offer shared memory (an older batchd)");
    return nullptr;
  }
  if (!invite.declined().empty()) {
    *why = absl::FailedPreconditionError(
        absl::StrCat("the daemon declined: ", invite.declined()));
    return nullptr;
  }
  uint32_t slots = 0;
  {
    absl::MutexLock lock(&mu_);
    if (ring_slots_ == 0) {
      ring_slots_ = static_cast<uint32_t>(std::max<uint64_t>(
          1, SizeRing(options_.prefetch, options_.auto_prefetch,
                      options_.auto_prefetch_max_bytes, opened,
                      /*daemons=*/1)
                 .most));
    }
    slots = ring_slots_;
  }
  absl::StatusOr<std::shared_ptr<SharedRing>> ring =
      AttachSharedRing(invite, slots, allocator_, kAttachTimeout);
  if (!ring.ok()) {
    *why = ring.status();
    return nullptr;
  }
  return *std::move(ring);
}

void DaemonSet::NoteTransportLocked(const absl::Status& why) {
  bool shared = false;
  for (const Daemon& d : daemons_) shared |= d.ring != nullptr;
  if (shared) {
    transport_ = "shared-memory";
    transport_note_.clear();
    return;
  }
  transport_ =
      absl::StartsWith(roster_.endpoint(0), "unix:") ? "unix" : "tcp";
  transport_note_ = std::string(why.message());
  // Said once per reason; switching it off on purpose needs no line.
  if (options_.shared_memory && !why.ok() &&
      transport_note_ != logged_transport_note_) {
    logged_transport_note_ = transport_note_;
    std::fprintf(stderr,
                 "batchd: shared memory off for %s: %s; batches come as "
                 "bytes\n",
                 options_.endpoint.c_str(), logged_transport_note_.c_str());
  }
}

absl::Status DaemonSet::HandleOpened(int daemon, const PlanOpened& opened,
                                     std::shared_ptr<SharedRing> ring,
                                     const absl::Status& why) {
  Daemon& d = daemons_[daemon];
  if (d.opened) return ProtocolError(daemon, "a second `opened` message");
  d.ring = std::move(ring);
  NoteTransportLocked(why);
  if (opened.window() == 0) {
    return ProtocolError(daemon, "the granted window is 0");
  }
  if (!opened_received_) {
    opened_ = opened;
    opened_received_ = true;
  } else if (!SamePlan(opened_, opened)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "batchd at ", roster_.endpoint(daemon), " answers the plan with ",
        opened.batches_per_epoch(), " batches of ", opened.max_batch_bytes(),
        " bytes per epoch, the first daemon with ", opened_.batches_per_epoch(),
        " of ", opened_.max_batch_bytes(),
        ": the daemons do not serve the same dataset"));
  }
  d.opened = true;
  // Reports count only this stream's batches.
  d.consumed_since_report = 0;
  scheduler_.DaemonUp(daemon, opened.window());
  if (!roster_.in_dns(daemon)) scheduler_.DaemonDraining(daemon);
  // A daemon that failed before counts as back only once it delivers a
  // batch, or is up with nothing asked of it (MarkRecoveredLocked): one
  // that accepts every stream and then fails it must not keep the loader
  // waiting forever, nor reconnecting without backoff.
  if (roster_.Up(daemon)) watch_.Recovered();
  kick_ = true;  // the supervisor hands it work
  return absl::OkStatus();
}

// ---- A batch: header, chunks, or rejection ----

absl::Status DaemonSet::HandleHeader(int daemon, BatchHeader& header) {
  const Key key{header.epoch(), header.batch_index()};
  Daemon& d = daemons_[daemon];
  if (!d.opened) return ProtocolError(daemon, "a header before `opened`");
  const bool in_shared_memory = header.in_shared_memory();
  const absl::Status valid = receipts_.CheckHeader(
      daemon, header, scheduler_.HasRequest(daemon, key),
      opened_.max_batch_bytes(), /*shared_memory=*/d.ring != nullptr);
  if (!valid.ok()) return ProtocolError(daemon, valid.message());
  int slot = -1;
  const int index = ring_.Find(key);
  const uint64_t total = header.total_bytes();
  const RequestScheduler::Claim claim = scheduler_.OnHeader(daemon, key);
  // The losing copies elsewhere are withdrawn at once.
  if (scheduler_.has_cancels()) kick_ = true;
  if (claim == RequestScheduler::Claim::kAccept && index >= 0 &&
      ring_.Receive(index, daemon, std::move(header))) {
    slot = index;
  }
  if (receipts_.Begin(daemon, key, total, slot, in_shared_memory)) {
    FinishReceiptLocked(daemon);
  }
  return absl::OkStatus();
}

absl::StatusOr<uint8_t*> DaemonSet::ChunkDestination(
    int daemon, const common::ChunkInfo& chunk) {
  const Key key{chunk.epoch, chunk.batch_index};
  absl::MutexLock lock(&mu_);
  const absl::Time now = absl::Now();
  watch_.OnMessage(daemon, now);
  scheduler_.OnProgress(daemon, now);
  absl::StatusOr<BatchReceipts::Destination> place =
      receipts_.Place(daemon, chunk);
  if (!place.ok()) return ProtocolError(daemon, place.status().message());
  // A losing copy is read past. The slot's bytes belong to this reader
  // thread while it is kReceiving.
  if (place->slot < 0) return place->scratch;
  return ring_.data(place->slot) + place->offset;
}

absl::Status DaemonSet::OnChunk(int daemon, const common::ChunkInfo& chunk,
                                absl::Duration copy) {
  {
    absl::MutexLock lock(&mu_);
    const int slot = receipts_.receipt(daemon).slot;
    if (slot >= 0) ring_.AddCopy(slot, copy);
    if (receipts_.Advance(daemon, chunk.length, copy)) {
      FinishReceiptLocked(daemon);
    }
  }
  if (chunk.length > 0) Pace(daemon, chunk.length);
  return absl::OkStatus();
}

void DaemonSet::FinishReceiptLocked(int daemon) {
  const BatchReceipts::Receipt& receipt = receipts_.receipt(daemon);
  scheduler_.OnComplete(daemon, receipt.key, absl::Now());
  MarkRecoveredLocked(daemon);
  if (receipt.slot >= 0) ring_.Complete(receipt.slot);
  receipts_.Reset(daemon);
  kick_ = true;  // a window place came free
}

absl::Status DaemonSet::HandleRejected(int daemon,
                                       const RequestRejected& rejected) {
  const Key key{rejected.epoch(), rejected.batch_index()};
  const BatchReceipts::Receipt& receipt = receipts_.receipt(daemon);
  if (!scheduler_.HasRequest(daemon, key) ||
      (receipt.active && receipt.key == key)) {
    return ProtocolError(daemon, absl::StrCat(
        "rejection of ", BatchName(key.first, key.second),
        ", which is not awaited"));
  }
  const RequestScheduler::RejectionOutcome outcome =
      scheduler_.OnRejected(daemon, key, rejected.code());
  kick_ = true;
  if (outcome != RequestScheduler::RejectionOutcome::kFail) {
    return absl::OkStatus();
  }
  const int index = ring_.Find(key);
  if (index < 0) return absl::OkStatus();
  absl::StatusCode code = static_cast<absl::StatusCode>(rejected.code());
  if (rejected.code() <= 0 || rejected.code() > 16) {
    code = absl::StatusCode::kUnknown;
  }
  absl::Status error(
      code, absl::StrCat("batchd rejected ", BatchName(key.first, key.second),
                         ": ", rejected.message()));
  // An orphan nobody waits for: its slot is ours again.
  if (!ring_.Reject(index, std::move(error))) scheduler_.Unwant(key);
  return absl::OkStatus();
}

void DaemonSet::Pace(int daemon, uint64_t bytes) {
  if (options_.max_receive_bytes_per_second == 0) return;
  absl::MutexLock lock(&mu_);
  const absl::Time link_free = watch_.Pace(
      daemon, absl::Now(), bytes, options_.max_receive_bytes_per_second);
  auto stopped = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return shutdown_ || cancelled_;
  };
  mu_.AwaitWithDeadline(absl::Condition(&stopped), link_free);
}

// ---- The stream's end: failover ----

void DaemonSet::OnStreamEnd(int daemon, const grpc::Status& status,
                            const absl::Status& protocol_error) {
  absl::MutexLock lock(&mu_);
  Daemon& d = daemons_[daemon];
  const uint32_t owed = scheduler_.outstanding(daemon);
  // The batches whose bytes it was writing start over, from whichever
  // daemon answers next.
  for (const Key& key : scheduler_.DaemonDown(daemon)) ring_.Restart(key);
  if (d.ring != nullptr) {
    // Unwanted batches it was to write: their slots are free, and will be
    // bound to fresh memory when next granted (its workers may still
    // write the old ring for a while).
    for (const Key& key : ring_.DropOrphanGrants(d.ring.get())) {
      scheduler_.Unwant(key);
    }
    d.ring.reset();
  }
  receipts_.Reset(daemon);
  kick_ = true;
  if (shutdown_ || cancelled_) {
    roster_.Stopped(daemon);
    return;
  }
  StreamEndVerdict verdict =
      watch_.JudgeEnd(daemon, roster_.endpoint(daemon), status, protocol_error,
                      owed, roster_.in_dns(daemon), security_, d.opened);
  roster_.Ended(daemon, verdict.next, std::move(verdict.error), absl::Now());
  StartUnavailableClockLocked(absl::Now());
  CheckAllFailedLocked();
}

}  // namespace batchd::client
