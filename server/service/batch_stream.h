// BatchStream: the reactor of one StreamBatches call. It parses requests,
// asks its StreamLedger what to accept, starts the pipeline's work, and
// writes what is due: one write in flight, reactions never block. The
// bookkeeping (window, outstanding batches, slots, budget) is the ledger's;
// what the stream needs of its service comes through a BatchStreamContext.
//
// The stream is raw bytes both ways: requests are parsed here, and a batch's
// chunks are written as slices of the batch buffer itself
// (common/chunk_codec.h), so pixels are never copied in user space on the
// way out.
//
// Lifetime: reference-counted; gRPC holds one reference until OnDone, each
// batch being built holds one, and the service holds one while it wakes or
// cancels its streams (drain), so neither a pipeline callback nor the
// service touches a deleted stream.
//
// Lock order: a stream's mu_ may be held while taking the registry's lock,
// never the other way round.
#ifndef BATCHD_SERVER_SERVICE_BATCH_STREAM_H_
#define BATCHD_SERVER_SERVICE_BATCH_STREAM_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "batchd/v1/data.pb.h"
#include "common/shared_region.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/server_callback.h"
#include "grpcpp/support/status.h"
#include "server/observe/job_stats.h"
#include "server/observe/trainer_reports.h"
#include "server/pipeline/pipeline.h"
#include "server/plan/resolved_plan.h"
#include "server/metrics/server_metrics.h"
#include "server/pipeline/shared_batches.h"
#include "server/service/auth.h"
#include "server/stream/buffer_budget.h"
#include "server/stream/shared_memory_broker.h"
#include "server/stream/stream_ledger.h"

namespace batchd::server {

// `status` as a gRPC status, with the same code and message.
grpc::Status ToGrpc(const absl::Status& status);

// Largest `data` of one BatchChunk, bytes: keeps every message within 4 MiB,
// which gRPC moves an order of magnitude faster than larger ones.
inline constexpr uint64_t kMaxChunkBytes = (uint64_t{4} << 20) - 1024;

// Most small messages (rejections, report answers) a stream queues for a
// client before it stops reading that client's requests: a client that
// sends and never reads meets HTTP/2 flow control instead of growing the
// daemon. One request adds at most a window's worth, so the queue holds at
// most kMaxQueuedMessages + max window messages.
inline constexpr uint32_t kMaxQueuedMessages = 64;

class BatchStream;

// The service's side of its open streams: admission, per-job counts and
// the drain. Implemented by DataServiceImpl; thread-safe.
class StreamRegistry {
 public:
  virtual ~StreamRegistry() = default;
  // Registers a new stream from `peer_host`, waiting for its plan, or
  // returns why it is refused (draining, --max-open-streams or
  // --max-planless-streams-per-peer reached).
  virtual grpc::Status AddStream(BatchStream* stream,
                                 const std::string& peer_host) = 0;
  // The stream's first `open` arrived: it no longer waits for its plan.
  // Idempotent.
  virtual void PlanArrived(BatchStream* stream) = 0;
  virtual void RemoveStream(BatchStream* stream) = 0;
  // Counts a stream of `job` that opened its plan, or returns why it is
  // refused (--max-streams-per-job reached); RemoveJobStream uncounts it.
  virtual grpc::Status AddJobStream(const std::string& job) = 0;
  virtual void RemoveJobStream(const std::string& job) = 0;
  virtual bool draining() const = 0;
  // "batchd is draining (SIGTERM)". REQUIRES: draining().
  virtual std::string DrainMessage() const = 0;
  // The status a stream gets that is refused because of the drain.
  virtual grpc::Status DrainingRefusal() const = 0;
  // Adds `send` (a batch finished to its last chunk written) to the send
  // stage time.
  virtual void AddSendTime(absl::Duration send) = 0;
};

// Everything a BatchStream uses of its service, constant for the service's
// life. Not owned; every pointer outlives the streams. `metrics` and
// `shared_memory` may be null (nothing recorded; shared memory declined).
struct BatchStreamContext {
  const DatasetMap* datasets = nullptr;
  PlanLimits limits;
  // Window granted when the client asks for 0, and the most granted.
  uint32_t default_window = 0;
  uint32_t max_window = 0;
  batchd::v1::DaemonInfo daemon_info;
  ServerMetrics* metrics = nullptr;
  SharedMemoryBroker* shared_memory = nullptr;
  Pipeline* pipeline = nullptr;
  // Batches shared between streams of identical plans; nullptr builds each
  // stream's own (--share-batches=false).
  SharedBatches* shared_batches = nullptr;
  JobStats* stats = nullptr;
  TrainerReports* reports = nullptr;
  BufferBudget* budget = nullptr;
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
  void Wake() ABSL_LOCKS_EXCLUDED(mu_) { Pump(); }

  // Stops building this stream's batches and ends it with `status` once no
  // write is in flight.
  void Cancel(const grpc::Status& status) ABSL_LOCKS_EXCLUDED(mu_);
  // Cancel, unless the stream's plan has arrived (the open deadline's
  // race with a late `open`).
  void CancelIfNoPlan(const grpc::Status& status) ABSL_LOCKS_EXCLUDED(mu_);

  void OnReadDone(bool ok) override ABSL_LOCKS_EXCLUDED(mu_);
  void OnWriteDone(bool ok) override ABSL_LOCKS_EXCLUDED(mu_);
  void OnCancel() override ABSL_LOCKS_EXCLUDED(mu_);
  void OnDone() override ABSL_LOCKS_EXCLUDED(mu_);

 private:
  using Key = StreamLedger::Key;

  // Pixel counts of a batch whose last chunk is being written.
  struct CompletedBatch {
    uint64_t images = 0;
    uint64_t bytes = 0;
    uint64_t substitutions = 0;
    absl::Time finished;
  };

  // A message to send, or a finished batch to send as header + chunks.
  struct Outgoing {
    std::optional<batchd::v1::StreamResponse> message;
    // Shared with the chunks' slices, which gRPC may hold after the write,
    // and with other streams of the same plan (SharedBatches).
    std::shared_ptr<const BuiltBatch> batch;
    bool header_sent = false;
    uint64_t offset = 0;
  };

  // Releases the stream's reference when the pipeline or the broker is done
  // with it, whether or not its callback ran.
  struct Ref {
    explicit Ref(BatchStream* stream) : stream(stream) { stream->AddRef(); }
    ~Ref() { stream->Unref(); }
    BatchStream* stream;
  };

  ~BatchStream() override = default;

  // Records a stream error; the stream finishes with it once no write is in
  // flight. Returns false (stop reading).
  bool FailStream(grpc::Status status) ABSL_LOCKS_EXCLUDED(mu_);

  // One handler per StreamRequest kind; each returns whether to keep
  // reading.
  bool HandleOpen(const batchd::v1::OpenPlan& open) ABSL_LOCKS_EXCLUDED(mu_);
  bool HandleRequest(const batchd::v1::BatchRequest& request)
      ABSL_LOCKS_EXCLUDED(mu_);
  bool HandleCancel(const batchd::v1::CancelBatches& cancel)
      ABSL_LOCKS_EXCLUDED(mu_);
  bool HandleReport(const batchd::v1::TrainerReport& report)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Answers an offer of shared memory: a ticket for the broker, or why not.
  // The ring may have at most `window` slots.
  void InviteSharedMemory(uint64_t max_batch_bytes, uint32_t window,
                          batchd::v1::SharedMemoryInvite* invite);
  // Runs on the broker's thread once the client's region is mapped.
  absl::Status AttachSharedMemory(std::shared_ptr<common::SharedRegion> region,
                                  uint32_t slots, uint64_t slot_bytes)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Runs on a pipeline thread (or inline, for a batch SharedBatches
  // retained). `batch` is null when its work was cancelled.
  void OnBatchBuilt(const Key& key, std::shared_ptr<const BuiltBatch> batch)
      ABSL_LOCKS_EXCLUDED(mu_);

  void CountRejected(grpc::StatusCode code);
  // Queues a message other than a batch (counted for the read-side bound).
  void QueueMessageLocked(batchd::v1::StreamResponse response)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Called instead of the next StartRead: with kMaxQueuedMessages queued,
  // marks reading paused (Pump resumes it) and returns true.
  bool PauseReadingIfBacklogged() ABSL_LOCKS_EXCLUDED(mu_);
  // Queues the in-band rejection of batch `key` with `status`.
  void QueueRejectionLocked(const Key& key, const absl::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Answers a batch the ledger withdrew and frees its window place.
  void AnswerWithdrawnLocked(const Key& key)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fills current_ with the next message to write. REQUIRES: mu_ held, no
  // write in flight.
  bool NextMessageLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The front batch's last message is being written: it stops being
  // outstanding. REQUIRES: queue_.front() is a batch.
  void CompleteFrontLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Gives the stream's budget reservation back, if it holds one.
  void ReleaseBudgetLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Starts the next write, or finishes the stream, if either is due.
  // REQUIRES: mu_ not held (StartWrite and Finish may run reactions inline).
  void Pump() ABSL_LOCKS_EXCLUDED(mu_);

  // Starts reading the next request unless the stream is finishing: reads
  // resume from reactions and from Pump on any thread, and none may start
  // once Finish was called.
  void StartNextRead() ABSL_LOCKS_EXCLUDED(mu_, grpc_ops_mu_);

  // gRPC orders the stream's construction, its Start* calls and Finish
  // before the reactions they lead to, with synchronisation of its own
  // that ThreadSanitizer cannot see (common/tsan_handoff.h).
  void HandToGrpc();
  void TakeFromGrpc();

  const BatchStreamContext& context_;
  // Who opened the stream (from its token), checked against the plan's job.
  const Caller caller_;
  const std::string peer_;
  const std::shared_ptr<std::atomic<bool>> cancelled_;
  std::atomic<int> refs_{1};  // gRPC's, until OnDone

  // Only touched by reactions, which gRPC runs one at a time for reads.
  grpc::ByteBuffer request_bytes_;
  batchd::v1::StreamRequest request_;

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
  // Whether an `open` has arrived (whatever became of it).
  bool plan_arrived_ ABSL_GUARDED_BY(mu_) = false;
  StreamLedger ledger_ ABSL_GUARDED_BY(mu_);
  // Same-host shared memory, once attached (AttachSharedMemory): the
  // client's ring and its slot size.
  std::shared_ptr<common::SharedRegion> region_ ABSL_GUARDED_BY(mu_);
  uint64_t slot_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<Outgoing> queue_ ABSL_GUARDED_BY(mu_);
  // Messages in queue_ (not batches), and whether reading waits for them
  // to drain (no read in flight while it does).
  uint32_t queued_messages_ ABSL_GUARDED_BY(mu_) = 0;
  bool read_paused_ ABSL_GUARDED_BY(mu_) = false;
  // The serialized message being written; owned by the write in flight.
  grpc::ByteBuffer current_;
  std::optional<CompletedBatch> written_batch_ ABSL_GUARDED_BY(mu_);
  bool write_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<grpc::Status> finish_status_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;  // Finish is due
  // Orders StartRead before Finish: held around StartRead, and set just
  // before Finish is called (not under mu_: Finish may run reactions).
  absl::Mutex grpc_ops_mu_ ABSL_ACQUIRED_AFTER(mu_);
  bool finish_called_ ABSL_GUARDED_BY(grpc_ops_mu_) = false;
};

}  // namespace batchd::server

#endif  // BATCHD_SERVER_SERVICE_BATCH_STREAM_H_
