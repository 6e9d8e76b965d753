// End-to-end: Loader::Create against a daemon that is not listening yet.
// A refused connection is not a verdict: Create retries (with the
// reconnect backoff) until LoaderOptions::connect_timeout, then fails with
// UNAVAILABLE naming the address and the timeout.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/loader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/daemon_process.h"
#include "testing/e2e_fixture.h"
#include "testing/e2e_helpers.h"

namespace batchd::testing {
namespace {

using batchd::client::Loader;
using batchd::client::LoaderOptions;
using ::testing::AllOf;
using ::testing::HasSubstr;

// A localhost port nobody listens on (bound, read, closed).
int UnusedPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    close(fd);
    return 0;
  }
  socklen_t length = sizeof(address);
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  close(fd);
  return ntohs(address.sin_port);
}

class ConnectRetryTest
    : public DatasetSuite</*images=*/32, /*classes=*/4, /*seed=*/41> {
 protected:
  static LoaderOptions Options(int port, absl::Duration connect_timeout) {
    LoaderOptions options;
    options.endpoint = absl::StrCat("127.0.0.1:", port);
    options.plan = TrainPlan("d", /*batch_size=*/8, /*size=*/32, /*seed=*/3);
    options.connect_timeout = connect_timeout;
    options.shared_memory = false;
    return options;
  }
};

TEST_F(ConnectRetryTest, LoaderStartedBeforeTheDaemonConnectsWhenItComes) {
  const int port = UnusedPort();
  ASSERT_GT(port, 0);
  std::unique_ptr<DaemonProcess> daemon;
  absl::Status started;
  absl::Duration serving;  // when the daemon was up, from `begin`
  const absl::Time begin = absl::Now();
  std::thread late([&] {
    absl::SleepFor(absl::Milliseconds(1500));
    absl::StatusOr<std::unique_ptr<DaemonProcess>> d = DaemonProcess::Start(
        {"--dataset", "d=" + *dataset_, "--workers", "1", "--port",
         std::to_string(port)});
    started = d.status();
    serving = absl::Now() - begin;
    if (d.ok()) daemon = *std::move(d);
  });
  absl::StatusOr<std::unique_ptr<Loader>> loader =
      Loader::Create(Options(port, absl::Seconds(15)));
  const absl::Duration took = absl::Now() - begin;
  late.join();
  std::printf("Create with the daemon up after %.2f s: %s after %.2f s\n",
              absl::ToDoubleSeconds(serving),
              loader.ok() ? "OK" : loader.status().ToString().c_str(),
              absl::ToDoubleSeconds(took));
  ASSERT_TRUE(started.ok()) << started;
  ASSERT_TRUE(loader.ok()) << loader.status();
  EXPECT_GE(took, absl::Milliseconds(1500));
  // Found soon after it came up, not at the end of gRPC's own backoff.
  EXPECT_LT(took, serving + absl::Seconds(2));
  // The loader works: a whole epoch, every batch once, in order.
  ASSERT_TRUE((*loader)->StartEpoch(0).ok());
  absl::StatusOr<std::vector<BatchRecord>> records = ReadFrom(**loader);
  ASSERT_TRUE(records.ok()) << records.status();
  ASSERT_EQ(records->size(), 4u);
  for (size_t i = 0; i < records->size(); ++i) {
    EXPECT_EQ((*records)[i].batch_index, i);
  }
}

TEST_F(ConnectRetryTest, NoDaemonFailsAfterTheConnectTimeoutNamingIt) {
  const int port = UnusedPort();
  ASSERT_GT(port, 0);
  const absl::Duration timeout = absl::Seconds(2);
  const absl::Time begin = absl::Now();
  absl::StatusOr<std::unique_ptr<Loader>> loader =
      Loader::Create(Options(port, timeout));
  const absl::Duration took = absl::Now() - begin;
  std::printf("Create with no daemon: %s after %.2f s\n",
              loader.status().ToString().c_str(),
              absl::ToDoubleSeconds(took));
  ASSERT_FALSE(loader.ok());
  EXPECT_EQ(loader.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(loader.status().message()),
              AllOf(HasSubstr(absl::StrCat("127.0.0.1:", port)),
                    HasSubstr("within 2s")));
  // It kept trying for the whole timeout, and not much longer.
  EXPECT_GE(took, timeout - absl::Milliseconds(50));
  EXPECT_LT(took, timeout + absl::Seconds(2));
}

}  // namespace
}  // namespace batchd::testing
