#include "server/metrics/metrics_http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "httplib.h"

namespace batchd::server {
namespace {

// The content type Prometheus expects for the text format.
constexpr char kTextFormat[] = "text/plain; version=0.0.4; charset=utf-8";
// Longest single wait on a socket: how soon a connection thread notices
// Stop().
constexpr absl::Duration kPollSlice = absl::Milliseconds(100);

// Set on the listener thread while it turns away a connection over the
// cap: process_and_close_socket then answers 503 instead of serving.
thread_local bool t_reject_connection = false;

// Waits until `fd` is ready for `events`, `deadline` passes or `stopping`
// is set. True when ready.
bool WaitFor(int fd, short events, absl::Time deadline,
             const std::atomic<bool>& stopping) {
  for (;;) {
    if (stopping.load(std::memory_order_relaxed)) return false;
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return false;
    pollfd p{fd, events, 0};
    const int ms = static_cast<int>(
        absl::ToInt64Milliseconds(std::min(left, kPollSlice)) + 1);
    const int n = poll(&p, 1, ms);
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return false;
  }
}

std::pair<std::string, int> Address(const sockaddr_storage& addr) {
  char text[INET6_ADDRSTRLEN] = "";
  int port = 0;
  if (addr.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&addr);
    inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text));
    port = ntohs(in->sin_port);
  } else if (addr.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&addr);
    inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof(text));
    port = ntohs(in6->sin6_port);
  }
  return {text, port};
}

// One request's view of its socket: every read and write ends by
// `deadline`, whatever pace the peer keeps.
class DeadlineStream final : public httplib::Stream {
 public:
  DeadlineStream(int fd, absl::Time deadline,
                 const std::atomic<bool>& stopping)
      : fd_(fd), deadline_(deadline), stopping_(stopping) {}

  bool timed_out() const { return timed_out_; }

  bool is_readable() const override { return Wait(POLLIN); }
  bool is_writable() const override { return Wait(POLLOUT); }
  ssize_t read(char* ptr, size_t size) override {
    if (!Wait(POLLIN)) return -1;
    ssize_t n;
    do {
      n = recv(fd_, ptr, size, 0);
    } while (n < 0 && errno == EINTR);
    return n;
  }
  ssize_t write(const char* ptr, size_t size) override {
    size_t sent = 0;
    while (sent < size) {
      if (!Wait(POLLOUT)) return -1;
      const ssize_t n =
          send(fd_, ptr + sent, size - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) return -1;
      sent += static_cast<size_t>(n);
    }
    return static_cast<ssize_t>(size);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    if (getpeername(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      std::tie(ip, port) = Address(addr);
    }
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    if (getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      std::tie(ip, port) = Address(addr);
    }
  }
  int socket() const override { return fd_; }

 private:
  bool Wait(short events) const {
    if (WaitFor(fd_, events, deadline_, stopping_)) return true;
    if (!stopping_.load(std::memory_order_relaxed)) timed_out_ = true;
    return false;
  }

  const int fd_;
  const absl::Time deadline_;
  const std::atomic<bool>& stopping_;
  mutable bool timed_out_ = false;
};

// httplib's task queue, replaced: a thread per connection, started on
// demand and reused, at most `max_connections` of them; a connection
// beyond that is handed back to the listener thread with
// t_reject_connection set.
class ConnectionQueue final : public httplib::TaskQueue {
 public:
  ConnectionQueue(int max_connections, Counter* rejected, Gauge* open)
      : max_connections_(max_connections), rejected_(rejected), open_(open) {}

  void enqueue(std::function<void()> fn) override {
    {
      absl::MutexLock lock(&mu_);
      if (active_ < max_connections_) {
        ++active_;
        open_->Set(active_);
        jobs_.push_back(std::move(fn));
        if (idle_ == 0) {
          threads_.emplace_back([this] { Run(); });
        } else {
          --idle_;
        }
        return;
      }
    }
    rejected_->Increment();
    t_reject_connection = true;
    fn();
    t_reject_connection = false;
  }

  void shutdown() override {
    std::vector<std::thread> threads;
    {
      absl::MutexLock lock(&mu_);
      shutdown_ = true;
      threads.swap(threads_);
    }
    for (std::thread& thread : threads) thread.join();
  }

 private:
  void Run() {
    pthread_setname_np(pthread_self(), "batchd-http");
    for (;;) {
      std::function<void()> job;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(
            +[](ConnectionQueue* q) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu_) {
              return !q->jobs_.empty() || q->shutdown_;
            },
            this));
        if (jobs_.empty()) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();
      absl::MutexLock lock(&mu_);
      --active_;
      ++idle_;
      open_->Set(active_);
    }
  }

  const int max_connections_;
  Counter* const rejected_;
  Gauge* const open_;
  absl::Mutex mu_;
  // Connections accepted and not yet closed; <= max_connections_.
  int active_ ABSL_GUARDED_BY(mu_) = 0;
  // Threads waiting for a job; each job pushed either wakes one or starts
  // one, so threads_.size() <= max_connections_.
  int idle_ ABSL_GUARDED_BY(mu_) = 0;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<std::function<void()>> jobs_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

// httplib::Server with its connection loop replaced by one that bounds
// each request's time (DeadlineStream) and turns away connections over the
// cap.
class BoundedHttpServer final : public httplib::Server {
 public:
  BoundedHttpServer(const MetricsHttpOptions& options, Counter* timed_out)
      : request_deadline_(options.request_deadline),
        idle_timeout_(options.idle_timeout),
        max_requests_(options.max_requests_per_connection),
        timed_out_(timed_out) {}

  void BeginStop() { stopping_.store(true); }
  // Debian's library listens with a backlog of 5: a burst of connects
  // would then wait for SYN retransmits (1 s, 3 s, ...) before the cap
  // could even see them. Listening again on the bound socket widens it.
  void WidenBacklog(int backlog) { ::listen(svr_sock_, backlog); }

 private:
  bool process_and_close_socket(int sock) override {
    if (t_reject_connection) {
      static constexpr char kBusy[] =
          "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n"
          "Content-Length: 21\r\nConnection: close\r\n\r\n"
          "too many connections\n";
      (void)!send(sock, kBusy, sizeof(kBusy) - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      shutdown(sock, SHUT_RDWR);
      close(sock);
      return false;
    }
    bool ok = true;
    for (int served = 0; served < max_requests_; ++served) {
      if (!WaitFor(sock, POLLIN, absl::Now() + idle_timeout_, stopping_)) {
        break;
      }
      DeadlineStream stream(sock, absl::Now() + request_deadline_, stopping_);
      bool closed = false;
      ok = process_request(
          stream, /*close_connection=*/served + 1 == max_requests_ ||
                      stopping_.load(),
          closed, [&stream](httplib::Request& request) {
            stream.get_remote_ip_and_port(request.remote_addr,
                                          request.remote_port);
          });
      if (stream.timed_out()) {
        // httplib may have answered 400 to the part it got; the rest of
        // the connection cannot be trusted to be in step.
        timed_out_->Increment();
        break;
      }
      if (!ok || closed) break;
    }
    shutdown(sock, SHUT_RDWR);
    close(sock);
    return ok;
  }

  const absl::Duration request_deadline_;
  const absl::Duration idle_timeout_;
  const int max_requests_;
  Counter* const timed_out_;
  std::atomic<bool> stopping_{false};
};

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    MetricsRegistry* registry, const std::string& host, int port,
    MetricsHttpOptions options) {
  if (options.max_connections < 1 ||
      options.request_deadline <= absl::ZeroDuration() ||
      options.idle_timeout <= absl::ZeroDuration() ||
      options.max_requests_per_connection < 1) {
    return absl::InvalidArgumentError(
        "the metrics endpoint needs at least 1 connection, 1 request per "
        "connection and positive deadlines (--metrics-max-connections, "
        "--metrics-request-deadline)");
  }
  Counter* rejected =
      &registry
           ->AddCounter("batchd_metrics_http_connections_rejected_total",
                        "Connections to the metrics port closed at once "
                        "because --metrics-max-connections were open.")
           .With({});
  Counter* timed_out =
      &registry
           ->AddCounter("batchd_metrics_http_requests_timed_out_total",
                        "Requests on the metrics port cut off by "
                        "--metrics-request-deadline.")
           .With({});
  Counter* unauthorized =
      &registry
           ->AddCounter("batchd_metrics_http_unauthorized_total",
                        "Requests on the metrics port refused with 401 "
                        "(--metrics-auth).")
           .With({});
  Gauge* open = &registry
                     ->AddGauge("batchd_metrics_http_connections",
                                "Connections to the metrics port open now.")
                     .With({});

  std::unique_ptr<MetricsHttpServer> server(new MetricsHttpServer());
  server->http_ = std::make_unique<BoundedHttpServer>(options, timed_out);
  BoundedHttpServer& http = *server->http_;
  const int max_connections = options.max_connections;
  http.new_task_queue = [max_connections, rejected, open] {
    return new ConnectionQueue(max_connections, rejected, open);
  };
  // httplib's default also sets SO_REUSEPORT, which would let a second
  // daemon silently share a busy port; keep only SO_REUSEADDR.
  http.set_socket_options([](int sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  if (options.authorize) {
    http.set_pre_routing_handler(
        [authorize = options.authorize, unauthorized](
            const httplib::Request& request, httplib::Response& response) {
          if (authorize(request.get_header_value("Authorization"))) {
            return httplib::Server::HandlerResponse::Unhandled;
          }
          unauthorized->Increment();
          response.status = 401;
          // Basic lets a browser ask for the token (as the password).
          response.set_header("WWW-Authenticate",
                              "Basic realm=\"batchd\", charset=\"UTF-8\"");
          response.set_content(
              "a token is required: Authorization: Bearer <token> "
              "(--metrics-auth)\n",
              "text/plain");
          return httplib::Server::HandlerResponse::Handled;
        });
  }
  http.Get("/metrics",
           [registry](const httplib::Request&, httplib::Response& response) {
             response.set_content(registry->Render(), kTextFormat);
           });
  bool has_root = false;
  for (MetricsHttpOptions::Route& route : options.routes) {
    has_root = has_root || route.path == "/";
    http.Get(route.path, [route](const httplib::Request& request,
                                 httplib::Response& response) {
      const HttpParams params(request.params.begin(), request.params.end());
      absl::StatusOr<std::string> body = route.body(params);
      if (body.ok()) {
        response.set_content(*std::move(body), route.content_type.c_str());
        return;
      }
      switch (body.status().code()) {
        case absl::StatusCode::kInvalidArgument: response.status = 400; break;
        case absl::StatusCode::kResourceExhausted: response.status = 429; break;
        default: response.status = 500;
      }
      response.set_content(std::string(body.status().message()) + "\n",
                           "text/plain");
    });
  }
  if (!has_root) {
    http.Get("/", [](const httplib::Request&, httplib::Response& response) {
      response.set_content("batchd metrics: see /metrics\n", "text/plain");
    });
  }
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
  http.WidenBacklog(std::max(options.max_connections, 128));
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
  if (http_ != nullptr) {
    http_->BeginStop();
    http_->stop();
  }
  if (listener_.joinable()) listener_.join();
}

}  // namespace batchd::server
