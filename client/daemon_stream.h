// DaemonStream: the connection to one batchd daemon and its StreamBatches
// stream, for a client that may use several daemons at once.
//
// It owns a channel, the stream and a reader thread. The reader thread
// opens the stream, sends the plan, then hands every response to a
// StreamSink until the stream ends, and finally reports how it ended.
// Requests are written from any thread with Send().
//
// The stream is a generic call (grpc::GenericStub, public gRPC API) on the
// asynchronous API: responses arrive as raw grpc::ByteBuffers, so chunk
// data is copied once, from gRPC's buffers to where the sink says
// (common/chunk_codec.h), and no custom serializer is needed. The reader
// thread owns the call and its completion queue: it starts every operation
// and handles every completion, one write in flight; Send() and
// WritesDone() queue and wake it with a grpc::Alarm.
//
// Thread-safety: Send(), WritesDone() and Cancel() may be called from any
// thread. The destructor cancels the stream and joins the reader thread; it
// must not run on the reader thread.
#ifndef BATCHD_CLIENT_DAEMON_STREAM_H_
#define BATCHD_CLIENT_DAEMON_STREAM_H_

#include <cstdint>
#include <deque>
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
#include "grpcpp/alarm.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "grpcpp/completion_queue.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/support/byte_buffer.h"

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

  // Queues `request` to be written, in order; blocks while
  // kMaxQueuedWrites requests wait. False when the stream is closed for
  // writes (not open yet, ended, or WritesDone() was called); the sink then
  // hears why.
  bool Send(const batchd::v1::StreamRequest& request) ABSL_LOCKS_EXCLUDED(mu_);
  // Half-closes: the daemon finishes the stream once its batches are sent.
  void WritesDone() ABSL_LOCKS_EXCLUDED(mu_);
  // Cancels the stream; the reader thread ends soon after. Idempotent.
  void Cancel();
  // Whether the reader thread has ended (OnStreamEnd was called).
  bool done() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // At most this many requests wait to be written; Send() blocks beyond.
  static constexpr size_t kMaxQueuedWrites = 64;

  void ReaderLoop(batchd::v1::StreamRequest open);
  // Reader thread: starts the next queued write, or the half-close, when
  // nothing is in flight.
  void PumpWrites() ABSL_LOCKS_EXCLUDED(mu_);
  // Wakes the reader thread for PumpWrites.
  void WakeLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int daemon_;
  const std::shared_ptr<grpc::Channel> channel_;
  StreamSink* const sink_;
  grpc::ClientContext context_;  // TryCancel() is thread-safe
  grpc::CompletionQueue cq_;     // polled by the reader thread only
  grpc::Alarm wake_;             // set by Send() and WritesDone()

  // Reader thread only.
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call_;
  bool started_ = false;           // the call's start completed
  bool write_in_flight_ = false;   // a Write or WritesDone is in flight
  bool writes_done_sent_ = false;
  grpc::ByteBuffer writing_;       // the Write in flight

  mutable absl::Mutex mu_;
  // The call exists; Send() may queue.
  bool prepared_ ABSL_GUARDED_BY(mu_) = false;
  // Requests to write, oldest first.
  std::deque<grpc::ByteBuffer> writes_ ABSL_GUARDED_BY(mu_);
  bool writes_closed_ ABSL_GUARDED_BY(mu_) = false;
  // WritesDone() was called: half-close once the queue is written.
  bool half_close_ ABSL_GUARDED_BY(mu_) = false;
  // The alarm is set and its tag not yet handled.
  bool wake_pending_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;

  std::thread reader_;  // last: starts after everything above exists
};

}  // namespace batchd::client

#endif  // BATCHD_CLIENT_DAEMON_STREAM_H_
