// MetricsHttpServer: the daemon's plain-HTTP endpoint (cpp-httplib): the
// MetricsRegistry's page at GET /metrics for Prometheus, plus the GET routes
// its owner adds (the live page, /api/timeline).
//
//   MetricsHttpOptions options;
//   options.routes.push_back({"/api/timeline", "application/json",
//                             [&](const HttpParams& params) {
//                               return snapshots.Answer(params);
//                             }});
//   ASSIGN_OR_RETURN(std::unique_ptr<MetricsHttpServer> http,
//                    MetricsHttpServer::Start(&registry, "0.0.0.0", 9090,
//                                             options));
//   int port = http->port();   // the bound port, also when 0 was asked
//
// Bounded against slow or many peers (docs/security.md): each connection
// has a thread of its own, up to `max_connections` (more are answered 503
// and closed at once, counted in batchd_metrics_http_connections_rejected_
// total); a request must arrive and its answer leave within
// `request_deadline` however slowly its bytes trickle in; an idle
// keep-alive connection is closed after `idle_timeout`. With `authorize`,
// every route needs an accepted `Authorization` header.
//
// Owns one listener thread and the connection threads (started as
// connections need them, at most `max_connections`, then kept for the next
// connections until Stop). Thread-safe; the destructor stops and joins.
#ifndef BATCHD_SERVER_METRICS_METRICS_HTTP_SERVER_H_
#define BATCHD_SERVER_METRICS_METRICS_HTTP_SERVER_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "server/metrics/metrics.h"

namespace batchd::server {

class BoundedHttpServer;

// A request's query parameters, decoded, in the order given.
using HttpParams = std::multimap<std::string, std::string>;

struct MetricsHttpOptions {
  // A GET route: `path` answers `content_type` with what `body` returns
  // for the request's query parameters; an error is answered 400
  // (INVALID_ARGUMENT), 429 (RESOURCE_EXHAUSTED) or 500 with its message
  // as plain text.
  struct Route {
    std::string path;
    std::string content_type;
    std::function<absl::StatusOr<std::string>(const HttpParams& params)> body;
  };
  std::vector<Route> routes;
  // Connections served at once (--metrics-max-connections); a connection
  // beyond them is answered 503 and closed without being read.
  int max_connections = 128;
  // From the first byte awaited to the last byte of the answer sent
  // (--metrics-request-deadline): a peer that sends its request slowly, or
  // reads the answer slowly, is cut off after this long.
  absl::Duration request_deadline = absl::Seconds(5);
  // How long a keep-alive connection may sit idle between requests.
  absl::Duration idle_timeout = absl::Seconds(5);
  // Requests served on one connection before it is closed.
  int max_requests_per_connection = 100;
  // When set, a request is served only if this returns true for its
  // `Authorization` header value ("" when absent); otherwise 401. Called on
  // connection threads, concurrently.
  std::function<bool(absl::string_view authorization)> authorize;
};

class MetricsHttpServer {
 public:
  // Listens on `host`:`port` (0 picks a free port) and serves `registry`,
  // which is not owned and must outlive the server, and `options.routes`.
  // Registers the endpoint's own metrics in `registry`. UNAVAILABLE when
  // the address cannot be bound; INVALID_ARGUMENT for options out of range.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      MetricsRegistry* registry, const std::string& host, int port,
      MetricsHttpOptions options = {});
  ~MetricsHttpServer();

  int port() const { return port_; }
  // Stops listening, closes the connections (each within ~0.1 s) and joins
  // the threads. Idempotent.
  void Stop();

 private:
  MetricsHttpServer() = default;

  std::unique_ptr<BoundedHttpServer> http_;
  std::thread listener_;
  int port_ = 0;
};

}  // namespace batchd::server

#endif  // BATCHD_SERVER_METRICS_METRICS_HTTP_SERVER_H_
