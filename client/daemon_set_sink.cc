// DaemonSet, part 2: the StreamSink. Each daemon's reader thread
// (client/daemon_stream.h) hands its stream's responses here: `opened`
// (with the shared-memory attach), headers, chunks into their slots,
// rejections, and the stream's end (failover and reconnect backoff).
#include <algorithm>
#include <cstdio>
#include <limits>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/daemon_set.h"
#include "client/grpc_status.h"

namespace batchd::client {

using ::batchd::v1::BatchHeader;
using ::batchd::v1::PlanOpened;
using ::batchd::v1::RequestRejected;
using ::batchd::v1::StreamResponse;

namespace {

// How long the shared-memory side channel may take to answer.
constexpr absl::Duration kAttachTimeout = absl::Seconds(5);
// A chunk is at most 4 MiB (the protocol); discarded copies are read into a
// scratch buffer of this size at most.
constexpr size_t kMaxChunkBytes = size_t{4} << 20;

std::string BatchName(uint64_t epoch, uint64_t index) {
  return absl::StrCat("batch ", index, " of epoch ", epoch);
}

// Whether a stream that ended with `code` may be tried again: the daemon
// went away or dropped the connection. Other codes are the daemon's verdict
// on the plan or the client (INVALID_ARGUMENT, RESOURCE_EXHAUSTED, ...).
bool IsRetryable(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::CANCELLED:
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
    case grpc::StatusCode::ABORTED:
    case grpc::StatusCode::INTERNAL:
    case grpc::StatusCode::UNKNOWN:
      return true;
    default:
      return false;
  }
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
      "protocol error from batchd at ", daemons_[daemon].endpoint, ": ",
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
  daemons_[daemon].last_message = now;
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
      absl::StartsWith(daemons_[0].endpoint, "unix:") ? "unix" : "tcp";
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
        "batchd at ", d.endpoint, " answers the plan with ",
        opened.batches_per_epoch(), " batches of ", opened.max_batch_bytes(),
        " bytes per epoch, the first daemon with ", opened_.batches_per_epoch(),
        " of ", opened_.max_batch_bytes(),
        ": the daemons do not serve the same dataset"));
  }
  d.opened = true;
  d.state = DaemonState::kUp;
  // Reports count only this stream's batches.
  d.consumed_since_report = 0;
  scheduler_.DaemonUp(daemon, opened.window());
  if (!d.in_dns) scheduler_.DaemonDraining(daemon);
  // A daemon that failed before counts as back only once it delivers a
  // batch, or is up with nothing asked of it (MarkRecoveredLocked): one
  // that accepts every stream and then fails it must not keep the loader
  // waiting forever, nor reconnecting without backoff.
  if (d.failures == 0) MarkRecoveredLocked(daemon);
  kick_ = true;  // the supervisor hands it work
  return absl::OkStatus();
}

// ---- A batch: header, chunks, or rejection ----

absl::Status DaemonSet::HandleHeader(int daemon, BatchHeader& header) {
  const Key key{header.epoch(), header.batch_index()};
  Daemon& d = daemons_[daemon];
  if (!d.opened) return ProtocolError(daemon, "a header before `opened`");
  if (d.receipt.active) {
    return ProtocolError(daemon, absl::StrCat(
        "header of ", BatchName(key.first, key.second), " while ",
        BatchName(d.receipt.key.first, d.receipt.key.second),
        " is incomplete"));
  }
  if (!scheduler_.HasRequest(daemon, key)) {
    return ProtocolError(daemon, absl::StrCat("header of ",
                                              BatchName(key.first, key.second),
                                              ", which is not awaited"));
  }
  if (header.total_bytes() > opened_.max_batch_bytes()) {
    return ProtocolError(daemon, absl::StrCat(
        BatchName(key.first, key.second), " has ", header.total_bytes(),
        " bytes, more than max_batch_bytes ", opened_.max_batch_bytes()));
  }
  const bool in_shared_memory = header.in_shared_memory();
  if (in_shared_memory != (d.ring != nullptr)) {
    return ProtocolError(
        daemon, absl::StrCat(BatchName(key.first, key.second),
                             in_shared_memory
                                 ? " is in shared memory, which this stream "
                                   "has not attached"
                                 : " comes as bytes on a stream with shared "
                                   "memory attached"));
  }
  if (header.shape_size() > 0) {
    uint64_t elements = 1;
    for (uint64_t dim : header.shape()) {
      if (dim != 0 && elements > std::numeric_limits<uint64_t>::max() / dim) {
        return ProtocolError(daemon, "shape overflows");
      }
      elements *= dim;
    }
    if (elements != header.total_bytes()) {
      return ProtocolError(daemon, absl::StrCat(
          BatchName(key.first, key.second), " has shape with ", elements,
          " elements but ", header.total_bytes(), " bytes"));
    }
  }
  Receipt& receipt = d.receipt;
  receipt = Receipt{};
  receipt.active = true;
  receipt.key = key;
  receipt.total = header.total_bytes();
  const int index = ring_.Find(key);
  const RequestScheduler::Claim claim = scheduler_.OnHeader(daemon, key);
  // The losing copies elsewhere are withdrawn at once.
  if (scheduler_.has_cancels()) kick_ = true;
  if (claim == RequestScheduler::Claim::kAccept && index >= 0 &&
      ring_.Receive(index, daemon, std::move(header))) {
    receipt.slot = index;
  }
  if (in_shared_memory) {
    // The daemon's workers wrote the pixels into the granted slot; the
    // header completes the batch.
    receipt.received = receipt.total;
    received_bytes_ += receipt.total;
  }
  if (receipt.received == receipt.total) FinishReceiptLocked(daemon);
  return absl::OkStatus();
}

absl::StatusOr<uint8_t*> DaemonSet::ChunkDestination(
    int daemon, const common::ChunkInfo& chunk) {
  const Key key{chunk.epoch, chunk.batch_index};
  absl::MutexLock lock(&mu_);
  Daemon& d = daemons_[daemon];
  d.last_message = absl::Now();
  scheduler_.OnProgress(daemon, d.last_message);
  Receipt& receipt = d.receipt;
  if (!receipt.active || receipt.key != key) {
    return ProtocolError(daemon, absl::StrCat(
        "chunk of ", BatchName(key.first, key.second),
        ", which is not the batch being received"));
  }
  if (chunk.offset != receipt.received) {
    return ProtocolError(daemon, absl::StrCat(
        "chunk of ", BatchName(key.first, key.second), " at offset ",
        chunk.offset, "; expected offset ", receipt.received));
  }
  if (chunk.length > receipt.total - receipt.received) {
    return ProtocolError(daemon, absl::StrCat(
        "chunk of ", BatchName(key.first, key.second), " at offset ",
        chunk.offset, " with ", chunk.length, " bytes overflows the batch's ",
        receipt.total, " bytes"));
  }
  if (receipt.slot < 0) {
    // A losing copy: read past it.
    if (chunk.length > kMaxChunkBytes) {
      return ProtocolError(daemon, absl::StrCat("a chunk of ", chunk.length,
                                                " bytes, over the 4 MiB limit"));
    }
    if (d.scratch.size() < chunk.length) d.scratch.resize(chunk.length);
    return d.scratch.data();
  }
  // The slot's bytes belong to this reader thread while it is kReceiving.
  return ring_.data(receipt.slot) + receipt.received;
}

absl::Status DaemonSet::OnChunk(int daemon, const common::ChunkInfo& chunk,
                                absl::Duration copy) {
  {
    absl::MutexLock lock(&mu_);
    Receipt& receipt = daemons_[daemon].receipt;
    receipt.received += chunk.length;
    received_bytes_ += chunk.length;
    if (receipt.slot >= 0) {
      ring_.AddCopy(receipt.slot, copy);
      copy_ += copy;
    }
    if (receipt.received == receipt.total) FinishReceiptLocked(daemon);
  }
  if (chunk.length > 0) Pace(daemon, chunk.length);
  return absl::OkStatus();
}

void DaemonSet::FinishReceiptLocked(int daemon) {
  Receipt& receipt = daemons_[daemon].receipt;
  scheduler_.OnComplete(daemon, receipt.key, absl::Now());
  MarkRecoveredLocked(daemon);
  if (receipt.slot >= 0) ring_.Complete(receipt.slot);
  receipt = Receipt{};
  kick_ = true;  // a window place came free
}

absl::Status DaemonSet::HandleRejected(int daemon,
                                       const RequestRejected& rejected) {
  const Key key{rejected.epoch(), rejected.batch_index()};
  Daemon& d = daemons_[daemon];
  if (!scheduler_.HasRequest(daemon, key) ||
      (d.receipt.active && d.receipt.key == key)) {
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
  absl::Time& link_free = daemons_[daemon].link_free;
  link_free = std::max(link_free, absl::Now()) +
              absl::Seconds(static_cast<double>(bytes) /
                            options_.max_receive_bytes_per_second);
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
  d.receipt = Receipt{};
  kick_ = true;
  if (shutdown_ || cancelled_) {
    d.state = DaemonState::kDown;
    return;
  }
  StreamEndVerdict verdict =
      JudgeStreamEnd(d.endpoint, status, protocol_error, d.stalled, owed,
                     d.in_dns, options_.stall_timeout, security_);
  d.last_error = d.stall_error.ok() ? std::move(verdict.error) : d.stall_error;
  switch (verdict.next) {
    case StreamEndVerdict::Next::kRemove:
      d.state = DaemonState::kRemoved;
      break;
    case StreamEndVerdict::Next::kReconnect: {
      d.state = DaemonState::kDown;
      ++d.failures;
      const absl::Duration backoff =
          ReconnectBackoff(d.failures, options_.reconnect_backoff_min,
                           options_.reconnect_backoff_max);
      // +-20 %, so that many clients do not retry in step.
      std::uniform_real_distribution<double> spread(0.8, 1.2);
      d.retry_at = absl::Now() + backoff * spread(jitter_);
      break;
    }
    case StreamEndVerdict::Next::kFail:
      d.state = DaemonState::kFailed;
      break;
  }
  StartUnavailableClockLocked(absl::Now());
  CheckAllFailedLocked();
}

StreamEndVerdict JudgeStreamEnd(absl::string_view endpoint,
                                const grpc::Status& status,
                                const absl::Status& protocol_error,
                                bool stalled, uint32_t owed, bool in_dns,
                                absl::Duration stall_timeout,
                                const ChannelSecurity& security) {
  using Next = StreamEndVerdict::Next;
  const std::string where = absl::StrCat("batchd at ", endpoint);
  StreamEndVerdict verdict;
  bool retry = true;
  if (!protocol_error.ok()) {
    // A daemon that breaks the protocol (or serves another dataset) is not
    // asked again.
    verdict.error = protocol_error;
    retry = false;
  } else if (stalled) {
    verdict.error = absl::UnavailableError(absl::StrCat(
        where, " sent nothing for ", absl::FormatDuration(stall_timeout),
        " with ", owed, " batches outstanding"));
  } else if (status.ok()) {
    if (owed > 0) {
      verdict.error = absl::UnavailableError(absl::StrCat(
          where, " ended the stream with ", owed,
          " requested batches not delivered"));
      retry = false;
    } else {
      verdict.error =
          absl::UnavailableError(absl::StrCat(where, " ended the stream"));
    }
  } else if (IsRetryable(status.error_code())) {
    verdict.error = absl::UnavailableError(
        absl::StrCat("lost the stream to ", where, ": ",
                     WithConnectionHint(status.error_message(), security)));
  } else {
    // The daemon's own verdict; its message says what to fix.
    verdict.error = FromGrpc(status);
    retry = false;
  }
  if (!in_dns && status.ok() && owed == 0) {
    verdict.next = Next::kRemove;
  } else {
    verdict.next = retry ? Next::kReconnect : Next::kFail;
  }
  return verdict;
}

absl::Duration ReconnectBackoff(int failures, absl::Duration min,
                                absl::Duration max) {
  absl::Duration backoff = min;
  for (int i = 1; i < failures && backoff < max; ++i) backoff *= 2;
  return std::min(backoff, max);
}

}  // namespace batchd::client
