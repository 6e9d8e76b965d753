#include "client/shared_ring.h"

#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/buffer.h"
#include "common/shared_region.h"
#include "testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace batchd::client {
namespace {

using ::batchd::testing::StatusIs;
using ::testing::HasSubstr;

// A side channel that answers each of `connections` connections with
// `answer` and closes it: as soon as it accepts it, reading nothing (what
// the daemon does for a peer whose uid it refuses), or once it has read
// the client's descriptor message (`read_request`).
class AnsweringBroker {
 public:
  AnsweringBroker(std::string answer, int connections,
                  bool read_request = false)
      : address_(absl::StrCat("@batchd-shared-ring-test-", getpid(), "-",
                              reinterpret_cast<uintptr_t>(this))) {
    absl::StatusOr<common::UniqueFd> listener = common::ListenUnix(address_);
    EXPECT_TRUE(listener.ok()) << listener.status();
    if (!listener.ok()) return;
    listener_ = *std::move(listener);
    thread_ = std::thread([this, answer = std::move(answer), connections,
                           read_request] {
      for (int i = 0; i < connections; ++i) {
        common::UniqueFd connection(accept(listener_.get(), nullptr, nullptr));
        if (connection.get() < 0) return;
        if (read_request) {
          EXPECT_TRUE(common::ReceiveDescriptor(connection.get()).ok());
        }
        (void)!send(connection.get(), answer.data(), answer.size(),
                    MSG_NOSIGNAL);
      }
    });
  }
  ~AnsweringBroker() {
    if (thread_.joinable()) thread_.join();
  }

  batchd::v1::SharedMemoryInvite Invite() const {
    batchd::v1::SharedMemoryInvite invite;
    invite.set_socket(address_);
    invite.set_ticket("t");
    invite.set_slot_bytes(4096);
    return invite;
  }

 private:
  const std::string address_;
  common::UniqueFd listener_;
  std::thread thread_;
};

TEST(SharedRingTest, AttachesWhenTheDaemonSaysSo) {
  AnsweringBroker broker("0 attached\n", 1, /*read_request=*/true);
  std::unique_ptr<BufferAllocator> allocator = NewHeapAllocator();
  absl::StatusOr<std::shared_ptr<SharedRing>> ring = AttachSharedRing(
      broker.Invite(), 3, allocator.get(), absl::Seconds(5));
  ASSERT_OK(ring);
  EXPECT_EQ((*ring)->slots, 3u);
  EXPECT_EQ((*ring)->region.size(), 3u * 4096);
  EXPECT_EQ((*ring)->slot(2), (*ring)->region.data() + 2 * 4096);
}

TEST(SharedRingTest, ARefusalBeforeTheDescriptorIsReadIsReportedAsSuch) {
  // The daemon may answer and close before the client has sent its
  // descriptor, whose send then fails with a broken pipe: the client must
  // still report the daemon's reason. Repeated, because which side wins
  // that race varies from one attempt to the next.
  constexpr int kAttempts = 100;
  AnsweringBroker broker("7 uid 4242 may not share memory\n", kAttempts);
  std::unique_ptr<BufferAllocator> allocator = NewHeapAllocator();
  for (int i = 0; i < kAttempts; ++i) {
    EXPECT_THAT(
        AttachSharedRing(broker.Invite(), 2, allocator.get(),
                         absl::Seconds(5))
            .status(),
        StatusIs(absl::StatusCode::kPermissionDenied,
                 HasSubstr("the daemon refused the ring: uid 4242 may not "
                           "share memory")))
        << "attempt " << i;
  }
}

TEST(SharedRingTest, ASideChannelThatSaysNothingOrNonsenseIsUnavailable) {
  std::unique_ptr<BufferAllocator> allocator = NewHeapAllocator();
  {
    AnsweringBroker silent("", 1, /*read_request=*/true);
    EXPECT_THAT(AttachSharedRing(silent.Invite(), 2, allocator.get(),
                                 absl::Seconds(5))
                    .status(),
                StatusIs(absl::StatusCode::kUnavailable,
                         HasSubstr("did not answer")));
  }
  AnsweringBroker nonsense("attached, probably\n", 1, /*read_request=*/true);
  EXPECT_THAT(AttachSharedRing(nonsense.Invite(), 2, allocator.get(),
                               absl::Seconds(5))
                  .status(),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("answered \"attached, probably\"")));
}

TEST(SharedRingTest, AnIncompleteInvitationIsRefusedBeforeAnyMemory) {
  std::unique_ptr<BufferAllocator> allocator = NewHeapAllocator();
  batchd::v1::SharedMemoryInvite invite;
  EXPECT_THAT(
      AttachSharedRing(invite, 2, allocator.get(), absl::Seconds(1)).status(),
      StatusIs(absl::StatusCode::kInternal, HasSubstr("incomplete")));
}

}  // namespace
}  // namespace batchd::client
