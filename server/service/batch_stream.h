// BatchStream: the gRPC reactor of one StreamBatches call. It reads and
// parses the client's requests, hands them to its StreamSession (the
// stream's logic: server/stream/stream_session.h), and does what the
// session says is next: write one message (one write in flight), resume
// reading, or finish the call, converting the session's absl::Status into
// the call's grpc::Status. Reactions never block.
//
// The stream is raw bytes both ways: requests are parsed here, and a batch's
// chunks are written as slices of the batch buffer itself
// (common/chunk_codec.h), so pixels are never copied in user space on the
// way out.
//
// Lifetime: reference-counted; gRPC holds one reference until OnDone, every
// callback the session hands a batch source or the broker holds one, and
// the service holds one while it wakes or cancels its streams (drain), so
// neither a pipeline callback nor the service touches a deleted stream.
//
// Thread-safe. Lock order: the session's lock may be held while taking the
// registry's, never the other way round.
#ifndef BATCHD_SERVER_SERVICE_BATCH_STREAM_H_
#define BATCHD_SERVER_SERVICE_BATCH_STREAM_H_

#include <atomic>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "batchd/v1/data.pb.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/server_callback.h"
#include "server/service/auth.h"
#include "server/stream/stream_session.h"

namespace batchd::server {

class BatchStream;

// The service's side of its open streams: admission (StreamAdmission:
// per-job counts and the drain) and the streams themselves. Implemented by
// DataServiceImpl; thread-safe.
class StreamRegistry : public StreamAdmission {
 public:
  // Registers a new stream of `identity` over the connection `peer` (gRPC's
  // peer string), waiting for its plan, or returns why it is refused
  // (draining, --max-streams-per-identity or --max-open-streams reached;
  // server/stream/admission_table.h). Admitting it may end other streams
  // that have not sent their plan, or one of an identity above its fair
  // share.
  virtual absl::Status AddStream(BatchStream* stream,
                                 const std::string& identity,
                                 const std::string& peer) = 0;
  // The stream's first `open` arrived, or a request ended the stream: it
  // no longer waits for its plan. Idempotent.
  virtual void PlanArrived(BatchStream* stream) = 0;
  virtual void RemoveStream(BatchStream* stream) = 0;
};

// Everything a BatchStream uses of its service, constant for the service's
// life. Not owned; `session.admission` is `registry`.
struct BatchStreamContext {
  StreamSessionContext session;
  StreamRegistry* registry = nullptr;
};

class BatchStream final
    : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  // `caller` is who the call's token says; its error refuses the stream.
  // `peer` is gRPC's name for the client's address. `context` must outlive
  // the stream. Deletes itself when the last reference goes.
  BatchStream(const BatchStreamContext* context,
              absl::StatusOr<Caller> caller, std::string peer);

  void AddRef() { refs_.fetch_add(1, std::memory_order_relaxed); }
  void Unref() {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

  // Re-examines the stream after the service began draining: one with
  // nothing outstanding ends now.
  void Wake() { Pump(); }

  // Stops building this stream's batches and ends it with `status` once no
  // write is in flight.
  void Cancel(absl::Status status);
  // Cancel, unless the stream's plan has arrived (the open deadline's
  // race with a late `open`). Returns whether it cancelled.
  bool CancelIfNoPlan(absl::Status status);

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  // Holds a reference to the stream while a callback the session handed
  // out (to the batch source or the broker) exists.
  struct Ref {
    explicit Ref(BatchStream* stream) : stream(stream) { stream->AddRef(); }
    ~Ref() { stream->Unref(); }
    BatchStream* stream;
  };

  ~BatchStream() override = default;

  // Does what the session says is next: start a read, a write, or Finish.
  // REQUIRES: no lock held (StartWrite and Finish may run reactions
  // inline).
  void Pump() ABSL_LOCKS_EXCLUDED(grpc_ops_mu_);

  // Starts reading the next request unless the stream is finishing: reads
  // resume from reactions and from Pump on any thread, and none may start
  // once Finish was called.
  void StartNextRead() ABSL_LOCKS_EXCLUDED(grpc_ops_mu_);

  // gRPC orders the stream's construction, its Start* calls and Finish
  // before the reactions they lead to, with synchronisation of its own
  // that ThreadSanitizer cannot see (common/tsan_handoff.h).
  void HandToGrpc();
  void TakeFromGrpc();

  const BatchStreamContext& context_;
  // Who the stream counts against (AdmissionTable, BufferBudget): the
  // caller's token, else "peer host <address>".
  const std::string identity_;
  std::atomic<int> refs_{1};  // gRPC's, until OnDone

  // Only touched by reactions, which gRPC runs one at a time for reads.
  grpc::ByteBuffer request_bytes_;
  batchd::v1::StreamRequest request_;
  // The serialized message being written; owned by the write in flight
  // (the session hands out one write at a time).
  grpc::ByteBuffer current_;

  StreamSession session_;

  // Orders StartRead before Finish: held around StartRead, and set just
  // before Finish is called (not under a lock: Finish may run reactions).
  absl::Mutex grpc_ops_mu_;
  bool finish_called_ ABSL_GUARDED_BY(grpc_ops_mu_) = false;
};

}  // namespace batchd::server

#endif  // BATCHD_SERVER_SERVICE_BATCH_STREAM_H_
