// DataServiceImpl: the gRPC adapter for batchd.v1.DataService. It admits
// StreamBatches calls (a BatchStream reactor per call, over a StreamSession
// that validates requests, asks for batches and streams them in chunks)
// and runs the drain. Batch content is decided entirely by the Pipeline and
// the plan; this layer only admits, counts and converts statuses.
//
// One BatchStream reactor per StreamBatches call (callback API): reactions
// never block, and exactly one write is in flight per stream.
//
// Drain (BeginDrain, then AwaitStreamsDone, then CancelStreams): new streams
// are refused with UNAVAILABLE, batches already accepted are still sent,
// later requests are rejected in-band with UNAVAILABLE, and each stream ends
// with UNAVAILABLE once it has nothing outstanding. The exact contract is
// in proto/batchd/v1/data.proto (StreamBatches).
//
// Thread-safe. Must outlive the grpc::Server it is registered with.
#ifndef BATCHD_SERVER_SERVICE_DATA_SERVICE_H_
#define BATCHD_SERVER_SERVICE_DATA_SERVICE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "batchd/v1/data.grpc.pb.h"
#include "server/observe/job_stats.h"
#include "server/observe/trainer_reports.h"
#include "server/pipeline/batch_source.h"
#include "server/pipeline/pipeline.h"
#include "server/pipeline/shared_batches.h"
#include "server/plan/resolved_plan.h"
#include "server/metrics/server_metrics.h"
#include "server/service/auth.h"
#include "server/service/batch_stream.h"
#include "server/stream/admission_table.h"
#include "server/stream/buffer_budget.h"
#include "server/stream/shared_memory_broker.h"

namespace batchd::server {

struct DataServiceOptions {
  PlanLimits limits;
  // Window granted when the client asks for 0, and the most granted.
  uint32_t default_window = 4;
  uint32_t max_window = 64;
  // Bound on batch buffer memory over all streams: a stream reserves
  // window * max_batch_bytes when it opens.
  uint64_t max_buffer_bytes = uint64_t{2} << 30;
  // Bound on what the streams of one job may reserve together, bytes, so
  // that one job cannot take the whole budget (--max-job-buffer-share).
  uint64_t max_job_buffer_bytes = uint64_t{1} << 30;
  // The same for one identity (a token, else a peer host), bytes
  // (--max-identity-buffer-share).
  uint64_t max_identity_buffer_bytes = uint64_t{1} << 30;
  // What every stream is charged of the budget at least, bytes, whatever
  // its plan asks: max_buffer_bytes / max_open_streams by default, so that
  // a stream of a 1x1 plan costs budget as it costs a place.
  uint64_t min_stream_buffer_bytes = (uint64_t{2} << 30) / 1024;
  // Most StreamBatches calls one job may have open at once.
  uint32_t max_streams_per_job = 256;
  // Most StreamBatches calls open at once over all clients; more are refused
  // with RESOURCE_EXHAUSTED. The buffer budget already bounds pixel memory;
  // this bounds the per-stream state a client that leaks streams can pin.
  uint32_t max_open_streams = 1024;
  // Most StreamBatches calls one identity (a token, else a peer host) may
  // have open; and, when the daemon is full, its fair share of
  // max_open_streams (server/stream/admission_table.h).
  uint32_t max_streams_per_identity = 512;
  // A stream must send its plan (`open`) within this, or it ends with
  // DEADLINE_EXCEEDED: a call that never sends one would hold a
  // max_open_streams place for good.
  absl::Duration open_timeout = absl::Seconds(10);
  // Most streams one connection (gRPC's peer string: address and port) may
  // have open that have not sent their plan yet; at the cap its oldest
  // such stream ends with RESOURCE_EXHAUSTED.
  uint32_t max_planless_streams_per_connection = 64;
  // The version and limits sent in every PlanOpened.daemon.
  batchd::v1::DaemonInfo daemon_info;
  // Who may call; nullptr: anyone. Not owned; must outlive the service.
  const Authorizer* authorizer = nullptr;
  // Where send times, outstanding batches and rejections are recorded;
  // nullptr records nothing. Not owned; must outlive the service.
  ServerMetrics* metrics = nullptr;
  // The side channel for same-host shared memory; nullptr declines every
  // offer (--shm=false). Not owned; must outlive the service.
  SharedMemoryBroker* shared_memory = nullptr;
  // Batches shared between streams of identical plans; nullptr: none
  // (--share-batches=false). Not owned; must outlive the service.
  SharedBatches* shared_batches = nullptr;
};

// Both methods are served raw (ByteBuffer in and out): StreamBatches so that
// batch chunks go out as slices of the batch buffer, ListDatasets so that a
// body that does not parse gets a clear status (raw_unary.h). The bytes are
// the messages of the proto.
class DataServiceImpl final
    : public batchd::v1::DataService::WithRawCallbackMethod_ListDatasets<
          batchd::v1::DataService::WithRawCallbackMethod_StreamBatches<
              batchd::v1::DataService::Service>>,
      private StreamRegistry {
 public:
  // `pipeline`, `stats` and `reports` are not owned and must outlive this.
  DataServiceImpl(DatasetMap datasets, DataServiceOptions options,
                  Pipeline* pipeline, JobStats* stats,
                  TrainerReports* reports);
  ~DataServiceImpl() override;

  grpc::ServerUnaryReactor* ListDatasets(grpc::CallbackServerContext* context,
                                         const grpc::ByteBuffer* request,
                                         grpc::ByteBuffer* response) override;

  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* StreamBatches(
      grpc::CallbackServerContext* context) override;

  // Starts the drain: from now on new streams are refused with UNAVAILABLE
  // and new batch requests rejected in-band with UNAVAILABLE; streams with
  // nothing outstanding end at once. `reason` says why, e.g. "SIGTERM", and
  // appears in every message. Returns at once; later calls do nothing.
  void BeginDrain(absl::string_view reason) ABSL_LOCKS_EXCLUDED(mu_);
  bool draining() const override { return draining_.load(); }
  // "batchd is draining (SIGTERM)". REQUIRES: draining().
  std::string DrainMessage() const override ABSL_LOCKS_EXCLUDED(mu_);
  // StreamBatches calls open now.
  size_t open_streams() const ABSL_LOCKS_EXCLUDED(mu_);
  // Blocks until no StreamBatches call is open, or until `deadline`.
  // Returns the number of calls still open.
  size_t AwaitStreamsDone(absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu_);
  // Ends every open stream with `status` (as soon as its write in flight, if
  // any, completes) and stops building its batches.
  void CancelStreams(const absl::Status& status) ABSL_LOCKS_EXCLUDED(mu_);

  const batchd::v1::DaemonInfo& daemon_info() const {
    return options_.daemon_info;
  }
  const BufferBudget& budget() const { return budget_; }
  // Who a call's token says is calling: any job when no authorizer was
  // given, UNAUTHENTICATED when the token is missing or wrong. The
  // AdminService checks its calls with it too.
  absl::StatusOr<Caller> Authenticate(
      const grpc::CallbackServerContext& context) const;
  // Send stage time summed over batches: from a batch finished to its last
  // chunk written, seconds.
  double send_seconds() const;

 private:
  // StreamRegistry, for the BatchStreams.
  absl::Status AddStream(BatchStream* stream, const std::string& identity,
                         const std::string& peer) override
      ABSL_LOCKS_EXCLUDED(mu_);
  void PlanArrived(BatchStream* stream) override ABSL_LOCKS_EXCLUDED(mu_);
  void RemoveStream(BatchStream* stream) override ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status AddJobStream(const std::string& job) override
      ABSL_LOCKS_EXCLUDED(mu_);
  void RemoveJobStream(const std::string& job) override
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status DrainingRefusal() const override ABSL_LOCKS_EXCLUDED(mu_);
  void AddSendTime(absl::Duration send) override;

  // The open streams, each with a reference the caller must drop (Unref).
  std::vector<BatchStream*> RefStreams() ABSL_LOCKS_EXCLUDED(mu_);
  // A stream the admission table chose to end, with a reference.
  struct ToEnd {
    BatchStream* stream;
    AdmissionTable::Ended how;
  };
  // Ends each of `streams` as the table said and drops its reference; a
  // plan-less one whose plan came first goes on and counts again.
  void EndStreams(std::vector<ToEnd> streams) ABSL_LOCKS_EXCLUDED(mu_);
  // The open-deadline reaper's loop: ends streams that sent no plan within
  // options_.open_timeout, until the service is destroyed.
  void ReapPlanlessStreams() ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status DrainingRefusalLocked() const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const DatasetMap datasets_;
  const DataServiceOptions options_;
  BufferBudget budget_;
  // Where streams get their batches without --share-batches: each its own.
  PipelineBatches own_batches_;
  // What every BatchStream is given; points at the fields above.
  const BatchStreamContext stream_context_;

  std::atomic<uint64_t> send_nanos_{0};

  mutable absl::Mutex mu_;
  // Every StreamBatches call between its reactor's construction and OnDone.
  absl::flat_hash_set<BatchStream*> streams_ ABSL_GUARDED_BY(mu_);
  // The places the registered streams hold, and which to end for a new
  // one; streams_ are the ones it knows.
  AdmissionTable admission_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;  // the reaper exits
  // Streams with an open plan, by job; jobs with none are absent.
  absl::flat_hash_map<std::string, uint32_t> job_streams_ ABSL_GUARDED_BY(mu_);
  std::string drain_reason_ ABSL_GUARDED_BY(mu_);
  // Set once, under mu_, by BeginDrain; read without it on the hot path.
  std::atomic<bool> draining_{false};
  // Runs ReapPlanlessStreams; joined by the destructor.
  std::thread reaper_;
};

}  // namespace batchd::server

#endif  // BATCHD_SERVER_SERVICE_DATA_SERVICE_H_
