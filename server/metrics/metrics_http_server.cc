#include "server/metrics/metrics_http_server.h"

#include <pthread.h>
#include <sys/socket.h>

#include <chrono>

#include "absl/strings/str_cat.h"
#include "httplib.h"

namespace batchd::server {

// The content type Prometheus expects for the text format.
constexpr char kTextFormat[] = "text/plain; version=0.0.4; charset=utf-8";

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    MetricsRegistry* registry, const std::string& host, int port) {
  std::unique_ptr<MetricsHttpServer> server(new MetricsHttpServer());
  server->http_ = std::make_unique<httplib::Server>();
  httplib::Server& http = *server->http_;
  // httplib's default also sets SO_REUSEPORT, which would let a second
  // daemon silently share a busy port; keep only SO_REUSEADDR.
  http.set_socket_options([](int sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  http.Get("/metrics",
           [registry](const httplib::Request&, httplib::Response& response) {
             response.set_content(registry->Render(), kTextFormat);
           });
  http.Get("/", [](const httplib::Request&, httplib::Response& response) {
    response.set_content("batchd metrics: see /metrics\n", "text/plain");
  });
  if (port == 0) {
    server->port_ = http.bind_to_any_port(host);
  } else if (http.bind_to_port(host, port)) {
    server->port_ = port;
  }
  if (server->port_ <= 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot listen for metrics on ", host, ":", port,
        ": the address is invalid or in use (--metrics-port)"));
  }
  server->listener_ = std::thread([&http] {
    pthread_setname_np(pthread_self(), "batchd-metrics");
    http.listen_after_bind();
  });
  // stop() only ends a listener that is running: wait for it to start, so
  // that a Stop() right after Start() cannot miss it.
  for (int i = 0; i < 5000 && !http.is_running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return server;
}

MetricsHttpServer::~MetricsHttpServer() { Stop(); }

void MetricsHttpServer::Stop() {
  if (http_ != nullptr) http_->stop();
  if (listener_.joinable()) listener_.join();
}

}  // namespace batchd::server
