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
#include "server/pipeline.h"

namespace batchd::server {

struct ServerOptions {
  // "host:port"; port 0 picks a free port (see port()).
  std::string listen_address = "0.0.0.0:7070";
  DatasetMap datasets;
  PipelineOptions pipeline;
  DataServiceOptions service;
  int max_workers = 256;
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

 private:
  BatchdServer() = default;

  // Destroyed in reverse: server first, then services, then the pipeline.
  JobStats stats_;
  std::unique_ptr<Pipeline> pipeline_;
  std::unique_ptr<DataServiceImpl> data_;
  std::unique_ptr<AdminServiceImpl> admin_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  absl::Mutex stop_mu_;
  bool stopped_ ABSL_GUARDED_BY(stop_mu_) = false;
};

}  // namespace batchd::server

#endif  // BATCHD_SERVER_SERVER_LIB_H_
