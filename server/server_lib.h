// BatchdServer: owns a running daemon: its datasets, pipeline, services and
// the grpc::Server, with the standard health service (grpc.health.v1) and,
// unless turned off, server reflection. Used by main.cc and by in-process
// tests.
//
//   ServerOptions options;
//   options.listen_address = "localhost:0";
//   options.datasets = {{"train", dataset}};
//   ASSIGN_OR_RETURN(auto server, BatchdServer::Start(options));
//   int port = server->port();
//   ...                                  // SIGTERM arrives
//   server->Drain(options.drain_deadline, "SIGTERM");
//   server->Stop();
//
// Health: "" (the whole daemon) and "batchd.v1.DataService" are SERVING from
// Start, which returns once the datasets are loaded, until Drain.
//
// Thread-safe: Drain and Stop may be called from any thread, more than once;
// only the first call drains.
#ifndef BATCHD_SERVER_SERVER_LIB_H_
#define BATCHD_SERVER_SERVER_LIB_H_

#include <signal.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/server.h"
#include "server/control/autoscaler.h"
#include "server/metrics/metrics_http_server.h"
#include "server/metrics/server_metrics.h"
#include "server/observe/job_stats.h"
#include "server/observe/timeline_snapshot.h"
#include "server/observe/trainer_reports.h"
#include "server/options/server_options.h"
#include "server/pipeline/pipeline.h"
#include "server/pipeline/shared_batches.h"
#include "server/service/admin_service.h"
#include "server/service/auth.h"
#include "server/service/data_service.h"
#include "server/service/grpc_log_filter.h"
#include "server/stream/shared_memory_broker.h"

namespace batchd::server {

// How long, once Stop begins, calls other than StreamBatches (a
// health Watch, a reflection stream, a unary call in progress) and writes to
// stalled clients get to end before gRPC cancels them.
inline constexpr absl::Duration kShutdownGrace = absl::Seconds(1);

// The largest message the daemon accepts, bytes. Requests are small (a plan,
// or an epoch and a few batch indices); batches go out in chunks of at most
// 4 MiB.
inline constexpr int kMaxInboundMessageBytes = 1 << 20;

// The daemon's release, "MAJOR.MINOR.PATCH" (the CMake project version).
const char* DaemonVersion();

class BatchdServer {
 public:
  // Starts the services and listens. Errors: a TLS or token file that
  // cannot be read, plaintext off the loopback without `insecure`, an
  // address that cannot be bound.
  // REQUIRES: `options` in range, as MakeServerOptions makes them from
  // options that ValidateDaemonOptions accepted (server/options/).
  static absl::StatusOr<std::unique_ptr<BatchdServer>> Start(
      ServerOptions options);
  ~BatchdServer();

  // The bound TCP port; 0 with no TCP listener.
  int port() const { return port_; }
  // The shared-memory side channel's address; "" with --shm=false.
  std::string shared_memory_socket() const {
    return shared_memory_ == nullptr ? "" : shared_memory_->socket();
  }

  // Reads --auth-token-file again (SIGHUP): new calls are checked against
  // the new tokens, streams already open continue. On error the old tokens
  // stay and the status says why.
  absl::Status ReloadTokens() { return authorizer_->Reload(); }
  // TLS, tokens and --insecure as PlanOpened.daemon.security reports them.
  const batchd::v1::DaemonSecurity& security() const {
    return data_->daemon_info().security();
  }

  // Drains the data service:
  // 1. new StreamBatches calls are refused with UNAVAILABLE, new batch
  //    requests on open streams are rejected in-band with UNAVAILABLE, and
  //    each stream ends with UNAVAILABLE once the batches it had in flight
  //    are sent (see DataServiceImpl);
  // 2. health goes NOT_SERVING for every service, at once;
  // 3. at `deadline` after the call, streams still open are ended with
  //    UNAVAILABLE and their remaining batches abandoned.
  // The server keeps answering other calls; Stop() ends it. `reason` (e.g.
  // "SIGTERM") appears in the messages clients get. Blocks until no stream
  // is open or until `deadline`. Returns OK when every stream ended in time,
  // DEADLINE_EXCEEDED naming how many did not. Later calls return OK at
  // once (after waiting for the first to finish).
  absl::Status Drain(absl::Duration deadline, absl::string_view reason)
      ABSL_LOCKS_EXCLUDED(stop_mu_);
  // Drains with no deadline unless Drain ran, then shuts the gRPC server
  // down: calls still running get kShutdownGrace, then gRPC cancels them.
  // gRPC may then wait a while longer for connections to be torn down
  // (usually it does not; main.cc bounds it for the daemon). Idempotent.
  void Stop() ABSL_LOCKS_EXCLUDED(stop_mu_);
  // Blocks until the server is stopped.
  void Wait();

  // Whether Drain has begun.
  bool draining() const { return data_->draining(); }

  AdminServiceImpl& admin() { return *admin_; }
  // The bound metrics port, or -1 when no metrics endpoint was asked for.
  int metrics_port() const { return http_ == nullptr ? -1 : http_->port(); }
  ServerMetrics& metrics() { return *metrics_; }

 private:
  BatchdServer() = default;

  // Destroyed in reverse: the HTTP endpoint and the gRPC server first, then
  // services, then the pipeline, then the metrics they record into.
  std::unique_ptr<ServerMetrics> metrics_;
  // Remote datasets' cache and store counters, shared with whoever made
  // them: their observers record into metrics_ and are cleared first.
  std::shared_ptr<ShardCache> shard_cache_;
  std::shared_ptr<ObjectStoreCounters> store_counters_;
  std::unique_ptr<Authorizer> authorizer_;
  std::unique_ptr<JobStats> stats_;
  TrainerReports reports_;
  // Outlives the pipeline, whose tasks call it back, and the data service.
  std::unique_ptr<SharedBatches> shared_batches_;
  std::unique_ptr<Pipeline> pipeline_;
  std::unique_ptr<Autoscaler> autoscaler_;
  // Outlives the data service: streams withdraw their tickets as they end.
  std::unique_ptr<SharedMemoryBroker> shared_memory_;
  std::unique_ptr<DataServiceImpl> data_;
  std::unique_ptr<AdminServiceImpl> admin_;
  std::unique_ptr<grpc::Server> server_;
  // Renders admin_'s timeline for http_, which goes first.
  std::unique_ptr<TimelineSnapshots> timeline_snapshots_;
  std::unique_ptr<MetricsHttpServer> http_;
  int port_ = 0;
  std::string unix_socket_;  // removed by Stop
  absl::Status DrainLocked(absl::Duration deadline, absl::string_view reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(stop_mu_);
  absl::Mutex stop_mu_;
  bool drained_ ABSL_GUARDED_BY(stop_mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(stop_mu_) = false;
};

// StartupSignals: honours SIGINT and SIGTERM while the daemon starts, before
// it serves (listing and indexing remote datasets can take minutes). The
// first such signal sets the shared cancellation flag, which aborts every
// remote transfer of the start-up (ObjectStoreOptions::cancelled), and the
// process exits at `deadline` (--drain-deadline) after it if the start-up
// has not returned by then. A SIGHUP meanwhile is dropped: the token file
// is read when the server starts.
//
// REQUIRES: the signals in `signals` are blocked in every thread (main
// blocks them before any thread starts); a thread of this object waits
// for them with sigtimedwait.
//
//   auto cancelled = std::make_shared<std::atomic<bool>>(false);
//   StartupSignals startup(stop_signals, drain_deadline, cancelled);
//   remote.cancelled = cancelled;
//   ... load the datasets ...
//   if (startup.Finish() != 0) return 0;  // stopped before serving
//
// Thread-safe; the destructor calls Finish.
class StartupSignals {
 public:
  StartupSignals(const sigset_t& signals, absl::Duration deadline,
                 std::shared_ptr<std::atomic<bool>> cancelled);
  ~StartupSignals();
  StartupSignals(const StartupSignals&) = delete;
  StartupSignals& operator=(const StartupSignals&) = delete;

  // Stops watching (within 100 ms) and returns the signal received, SIGINT
  // or SIGTERM, or 0 for none. Signals that arrive later stay pending for
  // the caller's sigwait.
  int Finish();

 private:
  void Run();

  // Constant after construction.
  const sigset_t signals_;
  const absl::Duration deadline_;
  const std::shared_ptr<std::atomic<bool>> cancelled_;

  std::atomic<bool> done_{false};
  std::atomic<int> signal_{0};  // written by thread_ only
  std::thread thread_;
};

}  // namespace batchd::server

#endif  // BATCHD_SERVER_SERVER_LIB_H_
