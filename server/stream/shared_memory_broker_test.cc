#include "server/stream/shared_memory_broker.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/metrics/server_metrics.h"
#include "testing/status_matchers.h"

namespace batchd::server {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr uint64_t kSlotBytes = 4096;

// A broker on a fresh abstract socket whose invitations count attaches.
class BrokerTest : public ::testing::Test {
 protected:
  void Start(SharedMemoryBrokerOptions options) {
    options.metrics = &metrics_;
    absl::StatusOr<std::unique_ptr<SharedMemoryBroker>> broker =
        SharedMemoryBroker::Start(std::move(options));
    ASSERT_OK(broker);
    broker_ = *std::move(broker);
  }

  std::string Invite(uint32_t window) {
    return broker_->Invite(
        kSlotBytes, window,
        [this](std::shared_ptr<common::SharedRegion>, uint32_t) {
          ++attached_;
          return absl::OkStatus();
        });
  }

  // A connection that says nothing.
  common::UniqueFd Idle() {
    absl::StatusOr<common::UniqueFd> fd =
        common::ConnectUnix(broker_->socket(), absl::Seconds(5));
    EXPECT_OK(fd);
    return fd.ok() ? *std::move(fd) : common::UniqueFd();
  }

  // Sends "<ticket> <slots>" with `memfd` on a new connection and returns
  // the broker's answer line ("" when none came within 5 s).
  std::string Handshake(const std::string& ticket, uint32_t slots, int memfd) {
    absl::StatusOr<common::UniqueFd> fd =
        common::ConnectUnix(broker_->socket(), absl::Seconds(5));
    if (!fd.ok()) return std::string(fd.status().message());
    (void)common::SendDescriptor(fd->get(), memfd,
                                 absl::StrCat(ticket, " ", slots));
    return ReadLine(fd->get());
  }

  static std::string ReadLine(int fd) {
    std::string line;
    char c;
    while (line.size() < 1024 && recv(fd, &c, 1, 0) == 1 && c != '\n') {
      line.push_back(c);
    }
    return line;
  }

  // Whether the broker answered (or closed) `fd` already.
  static bool Answered(int fd) {
    char c;
    const ssize_t got = recv(fd, &c, 1, MSG_DONTWAIT | MSG_PEEK);
    return !(got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
  }

  uint64_t Count(const std::string& result) {
    const std::string page = metrics_.registry().Render();
    const std::string key = absl::StrCat(
        "batchd_shared_memory_attach_total{result=\"", result, "\"} ");
    const size_t at = page.find(key);
    if (at == std::string::npos) return 0;
    return std::stoull(page.substr(at + key.size()));
  }

  ServerMetrics metrics_;
  std::atomic<int> attached_{0};
  std::unique_ptr<SharedMemoryBroker> broker_;
};

common::SharedRegion Ring(uint32_t slots) {
  absl::StatusOr<common::SharedRegion> region =
      common::SharedRegion::Create(slots * kSlotBytes);
  EXPECT_OK(region);
  return *std::move(region);
}

TEST_F(BrokerTest, IdleConnectionsDelayNoHandshake) {
  SharedMemoryBrokerOptions options;
  options.handshake_timeout = absl::Seconds(20);  // none expires here
  options.max_handshakes_per_uid = 64;
  Start(options);
  std::vector<common::UniqueFd> idle;
  for (int i = 0; i < 40; ++i) idle.push_back(Idle());
  const common::SharedRegion ring = Ring(2);
  const absl::Time start = absl::Now();
  EXPECT_EQ(Handshake(Invite(/*window=*/2), 2, ring.fd()), "0 attached");
  const absl::Duration waited = absl::Now() - start;
  EXPECT_EQ(attached_.load(), 1);
  // Served while every idle connection still holds its place, not after
  // they gave up: one handshake at a time would have waited 20 s each.
  EXPECT_LT(waited, absl::Seconds(2)) << waited;
  for (const common::UniqueFd& fd : idle) EXPECT_FALSE(Answered(fd.get()));
}

TEST_F(BrokerTest, ASilentConnectionIsAnsweredAtItsDeadline) {
  SharedMemoryBrokerOptions options;
  options.handshake_timeout = absl::Milliseconds(100);
  Start(options);
  common::UniqueFd idle = Idle();
  EXPECT_THAT(ReadLine(idle.get()),
              StartsWith("4 no descriptor message within 100ms of "
                         "connecting"));
  EXPECT_EQ(Count("DEADLINE_EXCEEDED"), 1u);
}

TEST_F(BrokerTest, OneUidHoldsAtMostItsLimitOfWaitingConnections) {
  SharedMemoryBrokerOptions options;
  options.handshake_timeout = absl::Seconds(20);
  options.max_handshakes_per_uid = 4;
  Start(options);
  std::vector<common::UniqueFd> idle;
  for (int i = 0; i < 10; ++i) idle.push_back(Idle());
  // The oldest six gave way, oldest first; the newest four wait.
  for (int i = 0; i < 6; ++i) {
    EXPECT_THAT(ReadLine(idle[i].get()),
                StartsWith("8 too many shared-memory handshakes waiting"))
        << i;
  }
  // A well-behaved client of the same uid is still served. Its descriptor
  // usually comes with the connection; when the broker accepts first, its
  // connection waits too and takes the oldest idle one's place.
  const common::SharedRegion ring = Ring(1);
  EXPECT_EQ(Handshake(Invite(/*window=*/1), 1, ring.fd()), "0 attached");
  int answered = 0;
  for (int i = 6; i < 10; ++i) answered += Answered(idle[i].get());
  EXPECT_LE(answered, 1);
  EXPECT_FALSE(Answered(idle[9].get()));
  EXPECT_EQ(Count("RESOURCE_EXHAUSTED"), 6u + answered);
  EXPECT_EQ(Count("attached"), 1u);
}

TEST_F(BrokerTest, ARingOfMoreSlotsThanTheWindowIsRefusedUnmapped) {
  Start({});
  const common::SharedRegion ring = Ring(64);
  EXPECT_EQ(Handshake(Invite(/*window=*/1), 64, ring.fd()),
            "3 a ring of 64 slots, but this stream's granted window "
            "(PlanOpened.window) is 1; create a ring of 1..1 slots");
  EXPECT_EQ(attached_.load(), 0);
}

TEST_F(BrokerTest, AWriteSealedRingIsAFailedPrecondition) {
  Start({});
  common::UniqueFd fd(memfd_create("sealed", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  ASSERT_EQ(ftruncate(fd.get(), kSlotBytes), 0);
  ASSERT_EQ(fcntl(fd.get(), F_ADD_SEALS,
                  F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE),
            0);
  EXPECT_THAT(Handshake(Invite(/*window=*/1), 1, fd.get()),
              StartsWith("9 the shared-memory region is sealed against "
                         "writing"));
  EXPECT_EQ(attached_.load(), 0);
}

TEST_F(BrokerTest, RefusalsAreLoggedAFewLinesAtATime) {
  Start({});
  const common::SharedRegion ring = Ring(1);
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 50; ++i) {
    EXPECT_THAT(Handshake("no-such-ticket", 1, ring.fd()), StartsWith("5 "));
  }
  const std::string log = ::testing::internal::GetCapturedStderr();
  size_t lines = 0;
  for (char c : log) lines += c == '\n';
  EXPECT_EQ(Count("NOT_FOUND"), 50u);
  EXPECT_LE(lines, 5u) << log;
  EXPECT_GE(lines, 1u);
}

}  // namespace
}  // namespace batchd::server
