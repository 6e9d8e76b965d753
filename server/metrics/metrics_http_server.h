// MetricsHttpServer: serves a MetricsRegistry's page at GET /metrics over
// plain HTTP (cpp-httplib), for Prometheus to scrape.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<MetricsHttpServer> http,
//                    MetricsHttpServer::Start(&registry, "0.0.0.0", 9090));
//   int port = http->port();   // the bound port, also when 0 was asked
//
// Owns one listener thread (httplib runs each connection on its own small
// thread pool). Thread-safe; the destructor stops and joins.
#ifndef BATCHD_SERVER_METRICS_METRICS_HTTP_SERVER_H_
#define BATCHD_SERVER_METRICS_METRICS_HTTP_SERVER_H_

#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "server/metrics/metrics.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace batchd::server {

class MetricsHttpServer {
 public:
  // Listens on `host`:`port` (0 picks a free port) and serves `registry`,
  // which is not owned and must outlive the server. UNAVAILABLE when the
  // address cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      MetricsRegistry* registry, const std::string& host, int port);
  ~MetricsHttpServer();

  int port() const { return port_; }
  // Stops listening and joins the listener thread. Idempotent.
  void Stop();

 private:
  MetricsHttpServer() = default;

  std::unique_ptr<httplib::Server> http_;
  std::thread listener_;
  int port_ = 0;
};

}  // namespace batchd::server

#endif  // BATCHD_SERVER_METRICS_METRICS_HTTP_SERVER_H_
