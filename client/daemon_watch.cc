#include "client/daemon_watch.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/grpc_status.h"

namespace batchd::client {
namespace {

// Whether a stream that ended with `code` may be tried again: the daemon
// went away or dropped the connection. Other codes are the daemon's verdict
// on the plan or the client (INVALID_ARGUMENT, PERMISSION_DENIED, ...),
// except RESOURCE_EXHAUSTED, which says "back off" (JudgeStreamEnd).
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

}  // namespace

StreamEndVerdict JudgeStreamEnd(absl::string_view endpoint,
                                const grpc::Status& status,
                                const absl::Status& protocol_error,
                                bool stalled, uint32_t owed, bool in_dns,
                                absl::Duration stall_timeout,
                                const ChannelSecurity& security,
                                bool opened) {
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
  } else if (status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED &&
             !opened) {
    // The open was refused: the daemon is full, or its caller holds its
    // share of it. Places free up as streams end, so it is asked again
    // after the backoff, and its message is what the loader says if it
    // never makes room.
    verdict.error = absl::ResourceExhaustedError(absl::StrCat(
        where, " refused the stream: ", status.error_message()));
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

DaemonWatch::DaemonWatch(Options options, absl::Time unavailable_since)
    : options_(options), unavailable_since_(unavailable_since) {}

int DaemonWatch::Add() {
  daemons_.emplace_back();
  return static_cast<int>(daemons_.size()) - 1;
}

void DaemonWatch::Connecting(int daemon, absl::Time now) {
  Daemon& d = daemons_[daemon];
  d.stalled = false;
  d.stall_error = absl::OkStatus();
  d.last_message = now;
}

absl::Time DaemonWatch::Pace(int daemon, absl::Time now, uint64_t bytes,
                             uint64_t bytes_per_second) {
  absl::Time& link_free = daemons_[daemon].link_free;
  link_free = std::max(link_free, now) +
              absl::Seconds(static_cast<double>(bytes) / bytes_per_second);
  return link_free;
}

bool DaemonWatch::ShouldCancel(int daemon, absl::string_view endpoint,
                               absl::Time now, const Facts& facts) {
  Daemon& d = daemons_[daemon];
  if (!facts.streaming || d.stalled) return false;
  // Silence with batches owed: give them to the others.
  if (facts.owed > 0 && now - d.last_message > options_.stall_timeout) {
    d.stalled = true;
    return true;
  }
  // A batch frozen mid-send: nothing else comes on its stream until it
  // ends, so the stream goes and its batches go to the others. Only where
  // another daemon can take the batch: a single daemon is left to the
  // stall timeout. Time the reader thread spent pacing itself is not the
  // daemon's.
  const absl::Duration timeout = options_.progress_timeout;
  if (!facts.receiving || timeout <= absl::ZeroDuration() ||
      facts.others_accepting < 1 ||
      now - std::max(d.last_message, d.link_free) <= timeout) {
    return false;
  }
  d.stalled = true;
  d.stall_error = absl::UnavailableError(absl::StrCat(
      "batchd at ", endpoint, " sent nothing of batch ", facts.batch_index,
      " of epoch ", facts.epoch, " for ", absl::FormatDuration(timeout), " (",
      facts.received, " of ", facts.total,
      " bytes received); asked the other daemons"));
  ++progress_cancels_;
  return true;
}

StreamEndVerdict DaemonWatch::JudgeEnd(
    int daemon, absl::string_view endpoint, const grpc::Status& status,
    const absl::Status& protocol_error, uint32_t owed, bool in_dns,
    const ChannelSecurity& security, bool opened) const {
  const Daemon& d = daemons_[daemon];
  StreamEndVerdict verdict =
      JudgeStreamEnd(endpoint, status, protocol_error, d.stalled, owed, in_dns,
                     options_.stall_timeout, security, opened);
  if (!d.stall_error.ok()) verdict.error = d.stall_error;
  return verdict;
}

void DaemonWatch::NoteAccepting(int accepting, absl::Time now) {
  // No daemon takes requests (each is down, draining, failed or gone): a
  // daemon that drains but never ends its stream must not hold Next()
  // forever either.
  if (accepting == 0 && unavailable_since_ == absl::InfiniteFuture()) {
    unavailable_since_ = now;
  }
}

bool DaemonWatch::Unavailable(absl::Time now) const {
  return unavailable_since_ != absl::InfiniteFuture() &&
         now - unavailable_since_ > options_.unavailable_timeout;
}

}  // namespace batchd::client
