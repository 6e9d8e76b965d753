// The metrics HTTP endpoint against slow, many and unauthenticated peers:
// a slowloris does not hold a scrape, connections over the cap are closed
// at once and counted, and with --metrics-auth every route needs a token.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/metrics/metrics.h"
#include "server/metrics/metrics_http_server.h"
#include "server/service/auth.h"
#include "testing/loopback_socket.h"

namespace batchd::server {
namespace {

// Slow peers, and the pace at which each sends one more header line:
// faster than any per-read timeout would catch.
constexpr int kSlowPeers = 64;
constexpr absl::Duration kSlowLineEvery = absl::Milliseconds(300);
// The bound a well-behaved scrape must meet while they hold on.
constexpr absl::Duration kScrapeBound = absl::Seconds(1);

bool SendAll(int fd, const std::string& text) {
  return send(fd, text.data(), text.size(), MSG_NOSIGNAL) ==
         static_cast<ssize_t>(text.size());
}

// Everything the server sends on `fd` until it closes it or `timeout`
// passes; `closed` says which.
std::string ReadUntilClosed(int fd, absl::Duration timeout, bool* closed) {
  std::string got;
  const absl::Time deadline = absl::Now() + timeout;
  *closed = false;
  while (absl::Now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    const int ms = static_cast<int>(
        absl::ToInt64Milliseconds(deadline - absl::Now()) + 1);
    if (poll(&p, 1, ms) <= 0) continue;
    char buf[4096];
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) {
      *closed = true;
      break;
    }
    got.append(buf, static_cast<size_t>(n));
  }
  return got;
}

// One GET with `headers` (each ending in \r\n); the whole answer.
std::string Get(int port, const std::string& path,
                const std::string& headers = "") {
  const int fd = batchd::testing::ConnectLoopback(port);
  if (fd < 0) return "";
  SendAll(fd, absl::StrCat("GET ", path, " HTTP/1.1\r\nHost: x\r\n", headers,
                           "Connection: close\r\n\r\n"));
  bool closed = false;
  std::string answer = ReadUntilClosed(fd, absl::Seconds(5), &closed);
  close(fd);
  return answer;
}

// The value of the unlabelled sample `name` on `page`; -1 when absent.
double Sample(const std::string& page, const std::string& name) {
  for (absl::string_view line : absl::StrSplit(page, '\n')) {
    if (absl::StartsWith(line, absl::StrCat(name, " "))) {
      double value = 0;
      if (absl::SimpleAtod(line.substr(name.size() + 1), &value)) {
        return value;
      }
    }
  }
  return -1;
}

TEST(MetricsHttpAdversarialTest, SlowlorisDoesNotHoldAScrape) {
  MetricsRegistry registry;
  MetricsHttpOptions options;
  options.request_deadline = absl::Seconds(2);
  auto http = MetricsHttpServer::Start(&registry, "127.0.0.1", 0, options);
  ASSERT_TRUE(http.ok()) << http.status();
  const int port = (*http)->port();

  // Each slow peer starts a request and adds a header line every
  // kSlowLineEvery, never ending it.
  std::vector<int> slow;
  for (int i = 0; i < kSlowPeers; ++i) {
    const int fd = batchd::testing::ConnectLoopback(port);
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(SendAll(fd, "GET /metrics HTTP/1.1\r\nHost: x\r\n"));
    slow.push_back(fd);
  }
  std::atomic<bool> stop{false};
  std::thread trickle([&] {
    int line = 0;
    while (!stop.load()) {
      for (int fd : slow) SendAll(fd, absl::StrCat("X-Slow-", line, ": 1\r\n"));
      ++line;
      std::this_thread::sleep_for(std::chrono::milliseconds(
          absl::ToInt64Milliseconds(kSlowLineEvery)));
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));

  for (int i = 0; i < 3; ++i) {
    const absl::Time start = absl::Now();
    const std::string answer = Get(port, "/metrics");
    const absl::Duration took = absl::Now() - start;
    EXPECT_TRUE(absl::StartsWith(answer, "HTTP/1.1 200")) << answer;
    EXPECT_LT(took, kScrapeBound) << "scrape " << i << " took " << took;
  }

  // The request deadline, not the pace of the bytes, ends each slow
  // request: all are answered or closed within it (plus slack).
  int held = 0;
  for (int fd : slow) {
    bool closed = false;
    const std::string got = ReadUntilClosed(fd, absl::Seconds(4), &closed);
    if (!closed && got.empty()) ++held;
  }
  stop.store(true);
  trickle.join();
  for (int fd : slow) close(fd);
  EXPECT_EQ(held, 0);
  EXPECT_EQ(Sample(registry.Render(),
                   "batchd_metrics_http_requests_timed_out_total"),
            kSlowPeers);
}

TEST(MetricsHttpAdversarialTest, ConnectionsOverTheCapAreClosedAndCounted) {
  constexpr int kCap = 4;
  MetricsRegistry registry;
  MetricsHttpOptions options;
  options.max_connections = kCap;
  options.idle_timeout = absl::Seconds(30);
  auto http = MetricsHttpServer::Start(&registry, "127.0.0.1", 0, options);
  ASSERT_TRUE(http.ok()) << http.status();
  const int port = (*http)->port();

  // kCap idle connections hold every slot.
  std::vector<int> idle;
  for (int i = 0; i < kCap; ++i) {
    idle.push_back(batchd::testing::ConnectLoopback(port));
    ASSERT_GE(idle.back(), 0);
  }
  // Until the server has taken all of them (it counts them open).
  for (int i = 0; i < 100 && Sample(registry.Render(),
                                    "batchd_metrics_http_connections") < kCap;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(Sample(registry.Render(), "batchd_metrics_http_connections"),
            kCap);
  for (int extra = 0; extra < 3; ++extra) {
    const int fd = batchd::testing::ConnectLoopback(port);
    ASSERT_GE(fd, 0);
    bool closed = false;
    const std::string got = ReadUntilClosed(fd, absl::Seconds(1), &closed);
    close(fd);
    EXPECT_TRUE(closed) << "connection " << extra << " was kept open";
    EXPECT_TRUE(got.empty() || absl::StartsWith(got, "HTTP/1.1 503")) << got;
  }
  for (int fd : idle) close(fd);
  // Their slots free up as the server sees them close.
  for (int i = 0; i < 100 && Sample(registry.Render(),
                                    "batchd_metrics_http_connections") > 0;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const std::string page = Get(port, "/metrics");
  ASSERT_TRUE(absl::StartsWith(page, "HTTP/1.1 200")) << page;
  EXPECT_EQ(Sample(page, "batchd_metrics_http_connections_rejected_total"), 3);
}

TEST(MetricsHttpAdversarialTest, WithAuthEveryRouteNeedsAToken) {
  constexpr char kToken[] = "metrics-token-0123456789";
  const std::string token_file = ::testing::TempDir() + "/metrics_tokens";
  std::ofstream(token_file) << kToken << "\n";
  auto authorizer = Authorizer::Create(token_file);
  ASSERT_TRUE(authorizer.ok()) << authorizer.status();

  MetricsRegistry registry;
  MetricsHttpOptions options;
  options.routes.push_back({"/", "text/html", [](const HttpParams&) {
                              return std::string("<p>page</p>");
                            }});
  options.routes.push_back({"/api/timeline", "application/json",
                            [](const HttpParams&) { return std::string("{}"); }});
  options.authorize = [a = authorizer->get()](absl::string_view header) {
    return a->AuthenticateHttp(header).ok();
  };
  auto http = MetricsHttpServer::Start(&registry, "127.0.0.1", 0, options);
  ASSERT_TRUE(http.ok()) << http.status();
  const int port = (*http)->port();

  const std::string basic = absl::StrCat(
      "Authorization: Basic ",
      absl::Base64Escape(absl::StrCat("anyone:", kToken)), "\r\n");
  for (const std::string path : {"/", "/api/timeline", "/metrics"}) {
    for (const std::string bad :
         {std::string(), std::string("Authorization: Bearer wrong\r\n"),
          absl::StrCat("Authorization: ", kToken, "\r\n")}) {
      const std::string answer = Get(port, path, bad);
      EXPECT_TRUE(absl::StartsWith(answer, "HTTP/1.1 401")) << path << answer;
      EXPECT_TRUE(absl::StrContains(answer, "WWW-Authenticate: Basic"));
      EXPECT_FALSE(absl::StrContains(answer, "page")) << path;
    }
    EXPECT_TRUE(absl::StartsWith(
        Get(port, path, absl::StrCat("Authorization: Bearer ", kToken, "\r\n")),
        "HTTP/1.1 200"))
        << path;
    EXPECT_TRUE(absl::StartsWith(Get(port, path, basic), "HTTP/1.1 200"))
        << path;
  }
  EXPECT_EQ(Sample(registry.Render(), "batchd_metrics_http_unauthorized_total"),
            9);
}

}  // namespace
}  // namespace batchd::server
