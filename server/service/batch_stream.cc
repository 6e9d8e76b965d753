#include "server/service/batch_stream.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/chunk_codec.h"
#include "common/local_address.h"
#include "common/tsan_handoff.h"
#include "grpcpp/support/status.h"
#include "server/service/parse_request.h"

namespace batchd::server {

namespace {

// `status` as the call's gRPC status, with the same code and message: the
// one place a stream's absl::Status becomes a grpc::Status.
grpc::Status ToGrpc(const absl::Status& status) {
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

}  // namespace

namespace {

// Who a stream counts against: its token when tokens are required, else
// its peer host (the Unix socket's peers are one host, "unix").
std::string IdentityOf(const absl::StatusOr<Caller>& caller,
                       absl::string_view peer) {
  if (caller.ok() && !caller->identity.empty()) return caller->identity;
  return absl::StrCat("peer host ", common::PeerHost(peer));
}

}  // namespace

BatchStream::BatchStream(const BatchStreamContext* context,
                         absl::StatusOr<Caller> caller, std::string peer)
    : context_(*context),
      identity_(IdentityOf(caller, peer)),
      session_(
          &context->session, peer, identity_,
          /*may_stream=*/
          [caller = caller.ok() ? *caller : Caller{}](absl::string_view job) {
            return CheckJob(caller, job);
          },
          /*wake=*/[this] { Pump(); }) {
  // Read first: once registered, a drain may finish the stream from another
  // thread, and a read must not be started after Finish.
  HandToGrpc();
  StartRead(&request_bytes_);
  const absl::Status refused =
      caller.ok()
          ? context_.registry->AddStream(this, identity_, peer)
          : caller.status();
  if (!refused.ok()) {
    session_.Fail(refused).IgnoreError();  // it ends the stream: Pump
    Pump();
  }
  HandToGrpc();
}

void BatchStream::Cancel(absl::Status status) {
  session_.End(std::move(status));
  Pump();
}

bool BatchStream::CancelIfNoPlan(absl::Status status) {
  if (!session_.EndIfNoPlan(std::move(status))) return false;
  Pump();
  return true;
}

void BatchStream::OnReadDone(bool ok) {
  TakeFromGrpc();
  if (session_.ReadDone(ok)) {
    absl::Status handled;
    if (absl::Status parsed = ParseRequest(request_bytes_, &request_);
        !parsed.ok()) {
      request_.Clear();
      handled = session_.Fail(std::move(parsed));
    } else {
      handled = session_.Handle(request_, std::make_shared<Ref>(this),
                                absl::Now());
    }
    // Whatever became of it, the plan arrived, or the stream is ending
    // (a request it could not handle): either way it no longer waits for
    // a plan, so the open deadline and its connection's count of planless
    // streams no longer apply. (Until OnDone, which may come late on a
    // loaded daemon, a refused stream would otherwise hold its host's
    // place.)
    if (!handled.ok() || request_.has_open()) {
      context_.registry->PlanArrived(this);
    }
    if (handled.ok() && !session_.PauseReading()) StartNextRead();
  }
  Pump();
  HandToGrpc();
}

void BatchStream::OnWriteDone(bool ok) {
  TakeFromGrpc();
  session_.WriteDone(ok, absl::Now());
  Pump();
  HandToGrpc();
}

void BatchStream::OnCancel() {
  TakeFromGrpc();
  session_.End(absl::CancelledError("stream cancelled"));
  Pump();
  HandToGrpc();
}

void BatchStream::OnDone() {
  TakeFromGrpc();
  session_.Close();
  context_.registry->RemoveStream(this);
  Unref();
}

void BatchStream::Pump() {
  StreamSession::Action next = session_.Next();
  if (next.resume_reading) StartNextRead();
  if (next.write) {
    const StreamSession::Message& message = *next.write;
    if (message.batch == nullptr) {
      current_ = common::EncodeMessage(message.response);
    } else {
      const BuiltBatch& batch = *message.batch;
      current_ = common::EncodeChunk(
          batch.epoch, batch.batch_index, message.offset,
          batch.pixels.data() + message.offset, message.length,
          message.batch);
    }
    HandToGrpc();
    StartWrite(&current_);
  } else if (next.finish) {
    {
      absl::MutexLock lock(&grpc_ops_mu_);
      finish_called_ = true;
    }
    HandToGrpc();
    Finish(ToGrpc(*next.finish));
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
