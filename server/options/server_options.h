// ServerOptions: everything BatchdServer::Start (server/server_lib.h) needs
// to run a daemon: listeners, security, the datasets, the pipeline, the
// service's limits and the transport's. A plain struct; main.cc makes one
// from the command line with MakeServerOptions (daemon_options.h), and
// in-process users fill one in directly.
#ifndef BATCHD_SERVER_OPTIONS_SERVER_OPTIONS_H_
#define BATCHD_SERVER_OPTIONS_SERVER_OPTIONS_H_

#include <cstddef>
#include <string>

#include "absl/time/time.h"
#include "server/control/autoscaler.h"
#include "server/metrics/metrics_http_server.h"
#include "server/observe/job_stats.h"
#include "server/observe/timeline_snapshot.h"
#include "server/pipeline/pipeline.h"
#include "server/pipeline/shared_batches.h"
#include "server/plan/resolved_plan.h"
#include "server/service/data_service.h"
#include "server/service/transport_security.h"
#include "server/stream/shared_memory_broker.h"

namespace batchd::server {

struct ServerOptions {
  // "host:port"; port 0 picks a free port (see BatchdServer::port()).
  // Empty: no TCP listener (then `unix_socket` must be set).
  std::string listen_address = "127.0.0.1:7070";
  // A Unix socket to listen on as well, for trainers on this host: a path,
  // plaintext (the socket file's permissions decide who may connect).
  // Empty: none.
  std::string unix_socket;
  // TLS on the TCP listener; none when tls.enabled() is false.
  TlsFiles tls;
  // Plaintext is served only on local addresses (loopback, Unix sockets)
  // unless this is set (--insecure); see CheckPlaintextAllowed.
  bool insecure = false;
  // Accepted bearer tokens (server/service/auth.h); empty: no token is required.
  // With tokens, reflection is not served: gRPC's reflection service cannot
  // check them.
  std::string auth_token_file;
  DatasetMap datasets;
  // Same-host shared memory (--shm, --shm-socket, --shm-allowed-uids):
  // offered to clients on a Unix socket or the loopback; false declines
  // every offer. `shared_memory.max_slots` follows service.max_window.
  bool shm = true;
  SharedMemoryBrokerOptions shared_memory;
  PipelineOptions pipeline;
  DataServiceOptions service;
  // Bound on SetWorkers, and on the pool under --workers auto.
  int max_workers = 256;
  // Requests in flight at once to each remote dataset's ObjectStore
  // (server/storage/object_store.h, MakeObjectStore's `connections`);
  // --remote-connections.
  int remote_connections = 32;
  // The worker-pool controller; enabled by --workers auto (its bounds are
  // then autoscale.policy.min_workers and max_workers above).
  AutoscalerOptions autoscale;
  // Prometheus endpoint (GET /metrics) on `metrics_host`:`metrics_port`;
  // 0 picks a free port (see BatchdServer::metrics_port()), -1 serves no
  // HTTP. The pipeline and service record metrics either way (see
  // BatchdServer::metrics()).
  std::string metrics_host = "127.0.0.1";
  int metrics_port = -1;
  // Bounds of the metrics endpoint (connections, request deadline); its
  // routes and `authorize` are set by Start.
  MetricsHttpOptions metrics_http;
  // Job series in /api/timeline and the live page: the busiest, the rest
  // summed into "_other" (--timeline-max-jobs).
  int timeline_max_jobs = kDefaultTimelineMaxJobs;
  // Every request on the metrics endpoint needs a token from
  // `auth_token_file` (--metrics-auth), as GetStatus does.
  bool metrics_auth = false;
  // Serve grpc.reflection.v1alpha.ServerReflection, so that tools such as
  // grpcurl can list and call the API without the .proto files.
  bool reflection = true;
  // How long Drain (SIGTERM) waits for batches already requested; reported
  // to clients in PlanOpened.daemon.drain_deadline_ms.
  absl::Duration drain_deadline = absl::Seconds(10);

  // Transport limits. The values are the daemon's flags' defaults; why each
  // was chosen is in docs/protocol.md ("Deadlines and keepalive").
  //
  // The daemon pings a connection after `keepalive_time` without traffic and
  // closes it when no answer comes within `keepalive_timeout`: a trainer
  // host that vanished (power loss, partition) without closing its socket
  // would otherwise hold its streams' buffer budget until TCP gives up
  // (about 15 minutes on Linux).
  absl::Duration keepalive_time = absl::Seconds(30);
  absl::Duration keepalive_timeout = absl::Seconds(10);
  // Client pings closer together than this, with no data in flight, are
  // strikes; after `max_ping_strikes` of them the daemon closes the
  // connection (GOAWAY too_many_pings). Client pings are allowed without
  // calls, since a multi-daemon client keeps idle connections warm.
  absl::Duration min_ping_interval = absl::Seconds(5);
  int max_ping_strikes = 2;
  // HTTP/2 streams (calls) open at once on one connection; further calls
  // wait on the client side. 0 leaves gRPC's default (unlimited).
  int max_concurrent_streams = 100;
  // A connection must finish its handshake (TLS, then the HTTP/2 preface
  // and SETTINGS) within this, or it is closed: gRPC's default, 120 s,
  // lets a peer that opens connections and sends nothing hold each for two
  // minutes.
  absl::Duration handshake_timeout = absl::Seconds(10);
  // A connection with no call open for this long is closed with a GOAWAY
  // (GRPC_ARG_MAX_CONNECTION_IDLE_MS); clients reconnect when they next
  // call. Bounds connections that sent a preface and nothing since.
  absl::Duration max_connection_idle = absl::Minutes(5);
  // Jobs with no stream open kept in GetStatus and /metrics, most recently
  // active first; older ones are summed under "_other" (JobStats).
  size_t max_idle_jobs = JobStats::kDefaultMaxIdleJobs;
  // Streams of identical plans share their batches (server/pipeline/shared_batches.h),
  // keeping finished ones in `shared_batches.retention_bytes`.
  bool share_batches = true;
  SharedBatchesOptions shared_batches;
};

}  // namespace batchd::server

#endif  // BATCHD_SERVER_OPTIONS_SERVER_OPTIONS_H_
