// BatchdServer: owns a running daemon: its datasets, pipeline, services and
// the grpc::Server. Used by main.cc and by in-process tests.
//
//   ServerOptions options;
//   options.listen_address = "localhost:0";
//   options.datasets = {{"train", dataset}};
//   ASSIGN_OR_RETURN(auto server, BatchdServer::Start(options));
//   int port = server->port();
//   ...
//   server->Stop();
//
// Thread-safe: Stop may be called from any thread, more than once.
#ifndef BATCHD_SERVER_SERVER_LIB_H_
#define BATCHD_SERVER_SERVER_LIB_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/server.h"
#include "server/admin_service.h"
#include "server/data_service.h"
#include "server/job_stats.h"
#include "server/metrics/metrics_http_server.h"
#include "server/pipeline.h"
#include "server/server_metrics.h"

namespace batchd::server {

struct ServerOptions {
  // "host:port"; port 0 picks a free port (see port()).
  std::string listen_address = "0.0.0.0:7070";
  DatasetMap datasets;
  PipelineOptions pipeline;
  DataServiceOptions service;
  int max_workers = 256;
  // Prometheus endpoint (GET /metrics) on `metrics_host`:`metrics_port`;
  // 0 picks a free port (see metrics_port()), -1 serves no HTTP. The
  // pipeline and service record metrics either way (see metrics()).
  std::string metrics_host = "0.0.0.0";
  int metrics_port = -1;
};

class BatchdServer {
 public:
  static absl::StatusOr<std::unique_ptr<BatchdServer>> Start(
      ServerOptions options);
  ~BatchdServer();

  // The bound port.
  int port() const { return port_; }
  // Stops accepting calls, cancels open streams after `grace`, and waits for
  // them to end.
  void Stop(absl::Duration grace = absl::Seconds(2));
  // Blocks until the server is stopped.
  void Wait();

  AdminServiceImpl& admin() { return *admin_; }
  // The bound metrics port, or -1 when no metrics endpoint was asked for.
  int metrics_port() const { return http_ == nullptr ? -1 : http_->port(); }
  ServerMetrics& metrics() { return *metrics_; }

 private:
  BatchdServer() = default;

  // Destroyed in reverse: the HTTP endpoint and the gRPC server first, then
  // services, then the pipeline, then the metrics they record into.
  std::unique_ptr<ServerMetrics> metrics_;
  JobStats stats_;
  std::unique_ptr<Pipeline> pipeline_;
  std::unique_ptr<DataServiceImpl> data_;
  std::unique_ptr<AdminServiceImpl> admin_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<MetricsHttpServer> http_;
  int port_ = 0;
  absl::Mutex stop_mu_;
  bool stopped_ ABSL_GUARDED_BY(stop_mu_) = false;
};

}  // namespace batchd::server

#endif  // BATCHD_SERVER_SERVER_LIB_H_
