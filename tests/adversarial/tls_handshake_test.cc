// Adversarial: failed TLS handshakes cannot fill the daemon's log. Peers
// that connect to a TLS port and send plaintext each make gRPC log a
// "Handshake failed" line; the daemon counts every one in /metrics and
// writes only a few, and a client with the right CA is still served.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/daemon_process.h"
#include "testing/e2e_fixture.h"
#include "testing/e2e_helpers.h"
#include "testing/status_matchers.h"

namespace batchd::testing {
namespace {

using ::testing::HasSubstr;

constexpr int kBadPeers = 200;

class TlsHandshakeTest
    : public DatasetSuite</*images=*/8, /*classes=*/2, /*seed=*/59> {};

// Connects to 127.0.0.1:`port`, sends a plaintext HTTP/2 preface and waits
// for the daemon to close the connection.
void PlaintextPeer(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const char kPreface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
  (void)!send(fd, kPreface, sizeof(kPreface) - 1, MSG_NOSIGNAL);
  char buffer[256];
  timeval timeout{2, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  while (recv(fd, buffer, sizeof(buffer), 0) > 0) {
  }
  close(fd);
}

TEST_F(TlsHandshakeTest, FailedHandshakesAreCountedAndLoggedAFewTimes) {
  const std::string dir = MakeTempDir("adv-tls");
  const CommandResult made = RunCommand(
      {std::string(BATCHD_SOURCE_DIR) + "/scripts/make_test_certs.sh", dir});
  ASSERT_EQ(made.exit_code, 0) << made.output;
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<DaemonProcess> daemon,
      DaemonProcess::Start({"--dataset", "d=" + *dataset_, "--workers", "1",
                            "--tls-cert", dir + "/server.pem", "--tls-key",
                            dir + "/server.key", "--metrics-port", "0",
                            "--metrics-port-file", dir + "/metrics-port"}));
  const std::string port = ReadPortFile(dir + "/metrics-port");
  ASSERT_FALSE(port.empty()) << daemon->Log();
  for (int i = 0; i < kBadPeers; ++i) {
    ASSERT_NO_FATAL_FAILURE(PlaintextPeer(daemon->port()));
  }
  // Every failure counted (the last ones may still be in flight).
  double failures = 0;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (absl::Now() < deadline) {
    ASSERT_OK_AND_ASSIGN(
        Page page,
        ScrapeWithPrometheusParser("http://127.0.0.1:" + port + "/metrics"));
    failures = page["batchd_tls_handshake_failures_total{}"];
    if (failures >= kBadPeers) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_EQ(failures, kBadPeers);
  size_t lines = 0;
  for (absl::string_view line : absl::StrSplit(daemon->Log(), '\n')) {
    lines += absl::StrContains(line, "andshake");
  }
  std::fprintf(stderr, "%d failed handshakes: %zu log lines\n", kBadPeers,
               lines);
  EXPECT_LE(lines, 5u) << daemon->Log();
  EXPECT_GE(lines, 1u);
  // A client with the right CA is served.
  const CommandResult health = RunCommand(
      {BuiltBinary("tools/batchd-health"), "--endpoint", daemon->endpoint(),
       "--tls_ca", dir + "/ca.pem"});
  EXPECT_EQ(health.exit_code, 0) << health.output;
  EXPECT_THAT(health.output, HasSubstr("SERVING"));
}

}  // namespace
}  // namespace batchd::testing
