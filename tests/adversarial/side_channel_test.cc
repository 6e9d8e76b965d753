// Adversarial: the shared-memory side channel under idle connections. Many
// connections of the trainer's own uid that never send a descriptor do not
// delay a well-behaved trainer's attach (handshakes are served at once, the
// idle ones are bounded per uid and time out), every refusal is counted in
// /metrics, and the daemon logs a few lines, not one per refusal.
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "client/loader.h"
#include "common/shared_region.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/daemon_process.h"
#include "testing/e2e_fixture.h"
#include "testing/e2e_helpers.h"
#include "testing/status_matchers.h"

namespace batchd::testing {
namespace {

constexpr int kImages = 16;
constexpr int kIdleConnections = 60;

class SideChannelTest
    : public DatasetSuite</*images=*/kImages, /*classes=*/2, /*seed=*/53> {};

size_t CountLines(const std::string& log, const std::string& needle) {
  size_t n = 0;
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    n += absl::StrContains(line, needle);
  }
  return n;
}

TEST_F(SideChannelTest, IdleConnectionsDoNotDelayATrainersAttach) {
  const std::string dir = MakeTempDir("adv-side");
  const std::string shm_socket = absl::StrCat("@batchd-adv-", getpid());
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<DaemonProcess> daemon,
      DaemonProcess::Start({"--dataset", "d=" + *dataset_, "--workers", "2",
                            "--unix-socket", dir + "/batchd.sock",
                            "--shm-socket", shm_socket, "--metrics-port",
                            "0", "--metrics-port-file",
                            dir + "/metrics-port"}));
  const std::string port = ReadPortFile(dir + "/metrics-port");
  ASSERT_FALSE(port.empty()) << daemon->Log();

  // Connections of this uid that never say anything, opened as fast as
  // they go.
  std::vector<common::UniqueFd> idle;
  for (int i = 0; i < kIdleConnections; ++i) {
    absl::StatusOr<common::UniqueFd> fd =
        common::ConnectUnix(shm_socket, absl::Seconds(1));
    ASSERT_TRUE(fd.ok()) << "connection " << i << ": " << fd.status();
    idle.push_back(*std::move(fd));
  }

  // A trainer attaches while they are held.
  client::LoaderOptions options;
  options.endpoint = "unix:" + dir + "/batchd.sock";
  options.plan = TrainPlan("d", /*batch_size=*/4, /*size=*/32, /*seed=*/1);
  options.prefetch = 2;
  options.shared_memory = true;
  options.last_epoch = 0;
  const absl::Time start = absl::Now();
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<client::Loader> loader,
                       client::Loader::Create(std::move(options)));
  ASSERT_OK(loader->StartEpoch(0));
  ASSERT_OK_AND_ASSIGN(client::Batch first, loader->Next());
  const absl::Duration waited = absl::Now() - start;
  EXPECT_EQ(loader->stats().transport, "shared-memory")
      << loader->stats().transport_note;
  // The client's attach deadline is 5 s; one handshake at a time behind
  // the idle connections made it wait all of it and fall back to bytes.
  EXPECT_LT(waited, absl::Seconds(1)) << waited;
  std::fprintf(stderr, "first batch over shared memory after %s with %d "
               "idle connections\n",
               absl::FormatDuration(waited).c_str(), kIdleConnections);
  loader.reset();

  // Every idle connection is answered: RESOURCE_EXHAUSTED for those beyond
  // the per-uid limit, DEADLINE_EXCEEDED for the rest at their deadline.
  const absl::Time answered_by = absl::Now() + absl::Seconds(3);
  for (const common::UniqueFd& fd : idle) {
    char line[256] = {};
    ASSERT_GT(recv(fd.get(), line, sizeof(line) - 1, 0), 0);
    EXPECT_TRUE(line[0] == '8' || line[0] == '4') << line;
  }
  EXPECT_LT(absl::Now(), answered_by);
  ASSERT_OK_AND_ASSIGN(
      Page page,
      ScrapeWithPrometheusParser("http://127.0.0.1:" + port + "/metrics"));
  const double exhausted = page[
      "batchd_shared_memory_attach_total{result=\"RESOURCE_EXHAUSTED\"}"];
  const double deadline = page[
      "batchd_shared_memory_attach_total{result=\"DEADLINE_EXCEEDED\"}"];
  EXPECT_EQ(exhausted + deadline, kIdleConnections);
  // At most the per-uid limit waited for its deadline (one fewer when the
  // trainer's own connection had to wait for its descriptor and took the
  // oldest one's place).
  EXPECT_LE(deadline, 8);
  EXPECT_GE(deadline, 7);
  EXPECT_EQ(page["batchd_shared_memory_attach_total{result=\"attached\"}"],
            1);
  // A few lines, not one per refusal.
  EXPECT_LE(CountLines(daemon->Log(), "shared memory refused"), 5u)
      << daemon->Log();
}

TEST_F(SideChannelTest, FlagsSetTheLimitAndTheDeadline) {
  const std::string shm_socket = absl::StrCat("@batchd-adv-flags-", getpid());
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<DaemonProcess> daemon,
      DaemonProcess::Start({"--dataset", "d=" + *dataset_, "--workers", "1",
                            "--shm-socket", shm_socket,
                            "--shm-max-handshakes-per-uid", "2",
                            "--shm-handshake-timeout-ms", "300"}));
  std::vector<common::UniqueFd> idle;
  const absl::Time start = absl::Now();
  for (int i = 0; i < 10; ++i) {
    absl::StatusOr<common::UniqueFd> fd =
        common::ConnectUnix(shm_socket, absl::Seconds(3));
    ASSERT_TRUE(fd.ok()) << fd.status();
    idle.push_back(*std::move(fd));
  }
  int exhausted = 0, deadline = 0;
  for (const common::UniqueFd& fd : idle) {
    char line[256] = {};
    ASSERT_GT(recv(fd.get(), line, sizeof(line) - 1, 0), 0);
    exhausted += line[0] == '8';
    deadline += line[0] == '4';
  }
  EXPECT_EQ(exhausted, 8);
  EXPECT_EQ(deadline, 2);
  // The last two waited for their 300 ms deadline, not the default 500 ms
  // nor longer.
  const absl::Duration took = absl::Now() - start;
  EXPECT_GE(took, absl::Milliseconds(300));
  EXPECT_LT(took, absl::Seconds(2)) << took;
}

}  // namespace
}  // namespace batchd::testing
