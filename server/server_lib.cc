#include "server/server_lib.h"

#include "absl/strings/str_cat.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"

namespace batchd::server {

absl::StatusOr<std::unique_ptr<BatchdServer>> BatchdServer::Start(
    ServerOptions options) {
  if (options.pipeline.workers < 1 ||
      options.pipeline.workers > options.max_workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("--workers is ", options.pipeline.workers,
                     "; it must be 1..", options.max_workers,
                     " (--max-workers)"));
  }
  if (options.datasets.empty()) {
    return absl::InvalidArgumentError(
        "no datasets: register one with --dataset name=path or --config");
  }
  std::unique_ptr<BatchdServer> server(new BatchdServer());
  server->metrics_ = std::make_unique<ServerMetrics>();
  options.pipeline.metrics = server->metrics_.get();
  options.service.metrics = server->metrics_.get();
  server->pipeline_ = std::make_unique<Pipeline>(options.pipeline);
  server->data_ = std::make_unique<DataServiceImpl>(
      options.datasets, options.service, server->pipeline_.get(),
      &server->stats_);
  server->admin_ = std::make_unique<AdminServiceImpl>(
      server->pipeline_.get(), server->data_.get(), &server->stats_,
      options.max_workers);

  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen_address,
                           grpc::InsecureServerCredentials(), &server->port_);
  builder.RegisterService(server->data_.get());
  builder.RegisterService(server->admin_.get());
  // Requests are small; batches go out in chunks of at most 4 MiB.
  builder.SetMaxReceiveMessageSize(1 << 20);
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options.listen_address,
                     ": the address is invalid or in use"));
  }
  // Figures other objects keep are read when Prometheus scrapes.
  server->metrics_->registry().AddCollector(
      [admin = server->admin_.get(),
       pipeline = server->pipeline_.get()](MetricWriter& writer) {
        ServerMetrics::WriteStatus(admin->Status(), pipeline->read_queued(),
                                   writer);
      });
  if (options.metrics_port >= 0) {
    absl::StatusOr<std::unique_ptr<MetricsHttpServer>> http =
        MetricsHttpServer::Start(&server->metrics_->registry(),
                                 options.metrics_host, options.metrics_port);
    if (!http.ok()) return http.status();
    server->http_ = *std::move(http);
  }
  return server;
}

BatchdServer::~BatchdServer() { Stop(); }

void BatchdServer::Stop(absl::Duration grace) {
  {
    absl::MutexLock lock(&stop_mu_);
    if (stopped_) return;
    stopped_ = true;
  }
  if (server_ != nullptr) {
    server_->Shutdown(absl::ToChronoTime(absl::Now() + grace));
  }
  if (http_ != nullptr) http_->Stop();
}

void BatchdServer::Wait() {
  if (server_ != nullptr) server_->Wait();
}

}  // namespace batchd::server
