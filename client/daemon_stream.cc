#include "client/daemon_stream.h"

#include <time.h>

#include <utility>

#include "batchd/v1/data.grpc.pb.h"
#include "grpcpp/impl/codegen/rpc_method.h"

namespace batchd::client {

using ::batchd::v1::StreamRequest;
using ::batchd::v1::StreamResponse;

namespace {
// CPU time used by the calling thread so far. CPU, not wall time: on a busy
// host the reader can be descheduled mid-copy, and that wait is not the
// copy's cost.
absl::Duration ThreadCpuTime() {
  timespec now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return absl::DurationFromTimespec(now);
}
}  // namespace

DaemonStream::DaemonStream(int daemon, std::shared_ptr<grpc::Channel> channel,
                           StreamRequest open, StreamSink* sink)
    : daemon_(daemon), channel_(std::move(channel)), sink_(sink) {
  reader_ = std::thread([this, open = std::move(open)]() mutable {
    ReaderLoop(std::move(open));
  });
}

DaemonStream::~DaemonStream() {
  Cancel();
  reader_.join();
}

bool DaemonStream::Send(const StreamRequest& request) {
  absl::MutexLock lock(&mu_);
  if (stream_ == nullptr || writes_closed_) return false;
  // A failed write means the stream has ended; the reader reports why.
  if (!stream_->Write(request)) writes_closed_ = true;
  return !writes_closed_;
}

void DaemonStream::WritesDone() {
  absl::MutexLock lock(&mu_);
  if (stream_ == nullptr || writes_closed_) return;
  writes_closed_ = true;
  stream_->WritesDone();
}

void DaemonStream::Cancel() { context_.TryCancel(); }

bool DaemonStream::done() const {
  absl::MutexLock lock(&mu_);
  return done_;
}

void DaemonStream::ReaderLoop(StreamRequest open) {
  // Responses are read as raw bytes so that chunk data goes straight from
  // gRPC's buffers to its destination.
  const grpc::internal::RpcMethod method(
      "/batchd.v1.DataService/StreamBatches",
      grpc::internal::RpcMethod::BIDI_STREAMING, channel_);
  auto* raw_stream = grpc::internal::ClientReaderWriterFactory<
      StreamRequest, common::RawMessage>::Create(channel_.get(), method,
                                                 &context_);
  {
    absl::MutexLock lock(&mu_);
    stream_.reset(raw_stream);
    if (!stream_->Write(open)) writes_closed_ = true;
  }
  absl::Status error;
  common::RawMessage raw;
  StreamResponse response;
  while (raw_stream->Read(&raw)) {
    const absl::Duration start = ThreadCpuTime();
    common::ChunkInfo chunk;
    absl::StatusOr<StreamResponse::KindCase> kind = common::DecodeResponse(
        raw.buffer, &response,
        [this](const common::ChunkInfo& info) {
          return sink_->ChunkDestination(daemon_, info);
        },
        &chunk);
    raw.buffer.Clear();
    error = kind.status();
    if (kind.ok() && *kind == StreamResponse::kChunk) {
      error = sink_->OnChunk(daemon_, chunk, ThreadCpuTime() - start);
    } else if (kind.ok()) {
      error = sink_->OnResponse(daemon_, response);
    }
    if (!error.ok()) {
      context_.TryCancel();
      while (raw_stream->Read(&raw)) {
      }
      break;
    }
  }
  grpc::Status end;
  {
    absl::MutexLock lock(&mu_);
    writes_closed_ = true;
    end = stream_->Finish();
  }
  sink_->OnStreamEnd(daemon_, end, error);
  absl::MutexLock lock(&mu_);
  done_ = true;
}

}  // namespace batchd::client
