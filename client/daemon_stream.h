// DaemonStream: the connection to one batchd daemon and its StreamBatches
// stream, for a client that may use several daemons at once.
//
// It owns a channel, the stream and a reader thread. The reader thread
// opens the stream (which may block while connecting), sends the plan, then
// hands every response to a StreamSink until the stream ends, and finally
// reports how it ended. Requests are written from any thread with Send().
// Chunk data is copied once, from gRPC's buffers to where the sink says
// (common/chunk_codec.h).
//
// Thread-safety: Send(), WritesDone() and Cancel() may be called from any
// thread. The destructor cancels the stream and joins the reader thread; it
// must not run on the reader thread.
#ifndef BATCHD_CLIENT_DAEMON_STREAM_H_
#define BATCHD_CLIENT_DAEMON_STREAM_H_

#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "batchd/v1/data.pb.h"
#include "common/chunk_codec.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/sync_stream.h"

namespace batchd::client {

// Receives one daemon stream's events, on that stream's reader thread.
// Returning an error from any method ends the stream (a protocol violation);
// the error is passed to OnStreamEnd.
class StreamSink {
 public:
  virtual ~StreamSink() = default;
  // Any response but a chunk.
  virtual absl::Status OnResponse(int daemon,
                                  batchd::v1::StreamResponse& response) = 0;
  // Where a chunk's `info.length` bytes go.
  virtual absl::StatusOr<uint8_t*> ChunkDestination(
      int daemon, const common::ChunkInfo& info) = 0;
  // After a chunk's bytes were copied; `copy` is the CPU time it took.
  virtual absl::Status OnChunk(int daemon, const common::ChunkInfo& info,
                               absl::Duration copy) = 0;
  // The last call: how the stream ended. `protocol_error` is set when a
  // sink method failed; `status` is gRPC's final status otherwise.
  virtual void OnStreamEnd(int daemon, const grpc::Status& status,
                           const absl::Status& protocol_error) = 0;
};

class DaemonStream {
 public:
  // Starts the reader thread, which opens the stream to `channel` and sends
  // `open`. `daemon` is the id passed to every sink call. `sink` must
  // outlive this object.
  DaemonStream(int daemon, std::shared_ptr<grpc::Channel> channel,
               batchd::v1::StreamRequest open, StreamSink* sink);
  ~DaemonStream();
  DaemonStream(const DaemonStream&) = delete;
  DaemonStream& operator=(const DaemonStream&) = delete;

  // Writes `request`. False when the stream is closed for writes (it has
  // ended, or WritesDone() was called); the sink then hears why.
  bool Send(const batchd::v1::StreamRequest& request) ABSL_LOCKS_EXCLUDED(mu_);
  // Half-closes: the daemon finishes the stream once its batches are sent.
  void WritesDone() ABSL_LOCKS_EXCLUDED(mu_);
  // Cancels the stream; the reader thread ends soon after. Idempotent.
  void Cancel();
  // Whether the reader thread has ended (OnStreamEnd was called).
  bool done() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void ReaderLoop(batchd::v1::StreamRequest open);

  const int daemon_;
  const std::shared_ptr<grpc::Channel> channel_;
  StreamSink* const sink_;
  grpc::ClientContext context_;  // TryCancel() is thread-safe

  mutable absl::Mutex mu_;
  // Set by the reader thread once the stream exists; writes go through it.
  std::unique_ptr<grpc::ClientReaderWriter<batchd::v1::StreamRequest,
                                           common::RawMessage>>
      stream_ ABSL_GUARDED_BY(mu_);
  bool writes_closed_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;

  std::thread reader_;  // last: starts after everything above exists
};

}  // namespace batchd::client

#endif  // BATCHD_CLIENT_DAEMON_STREAM_H_
