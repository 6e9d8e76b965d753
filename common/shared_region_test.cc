#include "common/shared_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace batchd::common {
namespace {

using ::batchd::testing::StatusIs;
using ::testing::HasSubstr;

constexpr size_t kBytes = 3 * 4096 + 100;

// A connected pair of Unix stream sockets.
struct SocketPair {
  SocketPair() {
    int fds[2];
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
    a = UniqueFd(fds[0]);
    b = UniqueFd(fds[1]);
  }
  UniqueFd a, b;
};

TEST(SharedRegionTest, TheDaemonSeesWhatTheClientWrites) {
  absl::StatusOr<SharedRegion> client = SharedRegion::Create(kBytes);
  ASSERT_OK(client);
  ASSERT_EQ(client->size(), kBytes);
  SocketPair pair;
  ASSERT_OK(SendDescriptor(pair.a.get(), client->fd(), "stream 7"));
  absl::StatusOr<ReceivedDescriptor> got = ReceiveDescriptor(pair.b.get());
  ASSERT_OK(got);
  EXPECT_EQ(got->message, "stream 7");
  absl::StatusOr<SharedRegion> daemon =
      SharedRegion::MapSealed(std::move(got->fd), kBytes);
  ASSERT_OK(daemon);
  // Different mappings of the same pages, both ways.
  EXPECT_NE(daemon->data(), client->data());
  daemon->data()[kBytes - 1] = 42;
  EXPECT_EQ(client->data()[kBytes - 1], 42);
  client->data()[0] = 7;
  EXPECT_EQ(daemon->data()[0], 7);
}

TEST(SharedRegionTest, ASealedRegionCannotBeTruncatedOrGrown) {
  absl::StatusOr<SharedRegion> region = SharedRegion::Create(kBytes);
  ASSERT_OK(region);
  EXPECT_NE(ftruncate(region->fd(), 0), 0);
  EXPECT_EQ(errno, EPERM);
  EXPECT_NE(ftruncate(region->fd(), 2 * kBytes), 0);
  // And the seals cannot be removed or changed.
  EXPECT_NE(fcntl(region->fd(), F_ADD_SEALS, F_SEAL_WRITE), 0);
}

TEST(SharedRegionTest, RefusesAnUnsealedMemfd) {
  UniqueFd fd(memfd_create("unsealed", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  ASSERT_GE(fd.get(), 0);
  ASSERT_EQ(ftruncate(fd.get(), kBytes), 0);
  EXPECT_THAT(SharedRegion::MapSealed(std::move(fd), kBytes),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("not sealed against shrinking and growing")));
  // Sealed against shrinking only: still refused.
  UniqueFd half(memfd_create("half", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  ASSERT_EQ(ftruncate(half.get(), kBytes), 0);
  ASSERT_EQ(fcntl(half.get(), F_ADD_SEALS, F_SEAL_SHRINK), 0);
  EXPECT_THAT(SharedRegion::MapSealed(std::move(half), kBytes),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("not sealed")));
}

TEST(SharedRegionTest, RefusesAFileThatIsNotAMemfd) {
  FILE* file = std::tmpfile();
  ASSERT_NE(file, nullptr);
  UniqueFd fd(dup(fileno(file)));
  std::fclose(file);
  ASSERT_EQ(ftruncate(fd.get(), kBytes), 0);
  EXPECT_THAT(SharedRegion::MapSealed(std::move(fd), kBytes),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("not a sealable memfd")));
}

TEST(SharedRegionTest, RefusesAWrongSize) {
  absl::StatusOr<SharedRegion> region = SharedRegion::Create(kBytes);
  ASSERT_OK(region);
  EXPECT_THAT(
      SharedRegion::MapSealed(UniqueFd(dup(region->fd())), kBytes + 1),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("has 12388 bytes; the plan's slots need exactly "
                         "12389")));
  EXPECT_THAT(SharedRegion::Create(0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("0 bytes")));
}

// A sealed memfd of `bytes` whose pages were never touched, with `extra`
// seals added.
UniqueFd UntouchedMemfd(size_t bytes, int extra_seals = 0) {
  UniqueFd fd(memfd_create("untouched", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  EXPECT_GE(fd.get(), 0);
  EXPECT_EQ(ftruncate(fd.get(), static_cast<off_t>(bytes)), 0);
  EXPECT_EQ(fcntl(fd.get(), F_ADD_SEALS,
                  F_SEAL_SHRINK | F_SEAL_GROW | extra_seals),
            0);
  return fd;
}

TEST(SharedRegionTest, MappingTouchesNoPageOfTheClientsRegion) {
  constexpr size_t kPages = 256;
  absl::StatusOr<SharedRegion> daemon =
      SharedRegion::MapSealed(UntouchedMemfd(kPages * 4096), kPages * 4096);
  ASSERT_OK(daemon);
  std::vector<unsigned char> resident(kPages);
  ASSERT_EQ(mincore(daemon->data(), daemon->size(), resident.data()), 0);
  size_t touched = 0;
  for (unsigned char page : resident) touched += page & 1;
  EXPECT_EQ(touched, 0u) << "pages faulted in by mapping alone";
  daemon->data()[5 * 4096] = 1;  // a worker writes one page
  ASSERT_EQ(mincore(daemon->data(), daemon->size(), resident.data()), 0);
  touched = 0;
  for (unsigned char page : resident) touched += page & 1;
  EXPECT_EQ(touched, 1u);
}

TEST(SharedRegionTest, RefusesAWriteSealedMemfdWithTheReason) {
  EXPECT_THAT(
      SharedRegion::MapSealed(UntouchedMemfd(kBytes, F_SEAL_WRITE), kBytes),
      StatusIs(absl::StatusCode::kFailedPrecondition,
               HasSubstr("sealed against writing")));
}

TEST(SharedRegionTest, RefusesAReadOnlyDescriptorWithTheReason) {
  UniqueFd writable = UntouchedMemfd(kBytes);
  const std::string path = "/proc/self/fd/" + std::to_string(writable.get());
  UniqueFd read_only(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_GE(read_only.get(), 0) << std::strerror(errno);
  EXPECT_THAT(SharedRegion::MapSealed(std::move(read_only), kBytes),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("open read-only")));
}

TEST(SharedRegionTest, AMessageNeedsExactlyOneDescriptor) {
  {
    SocketPair pair;
    ASSERT_EQ(write(pair.a.get(), "no fd", 5), 5);
    EXPECT_THAT(ReceiveDescriptor(pair.b.get()),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("carries 0 descriptors")));
  }
  {
    // Two descriptors in one message: refused, and both are closed.
    SocketPair pair;
    absl::StatusOr<SharedRegion> region = SharedRegion::Create(4096);
    ASSERT_OK(region);
    int fds[2] = {region->fd(), region->fd()};
    char text[] = "two";
    iovec iov{text, 3};
    alignas(cmsghdr) char control[CMSG_SPACE(2 * sizeof(int))] = {};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(2 * sizeof(int));
    std::memcpy(CMSG_DATA(cmsg), fds, sizeof(fds));
    ASSERT_EQ(sendmsg(pair.a.get(), &msg, 0), 3);
    EXPECT_THAT(ReceiveDescriptor(pair.b.get()),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("carries 2 descriptors")));
  }
  {
    SocketPair pair;
    pair.a = UniqueFd();  // the client went away
    EXPECT_THAT(ReceiveDescriptor(pair.b.get()),
                StatusIs(absl::StatusCode::kUnavailable, HasSubstr("closed")));
  }
  SocketPair pair;
  EXPECT_THAT(SendDescriptor(pair.a.get(), 0, std::string(300, 'x')),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("1..256 bytes")));
}

TEST(SharedRegionTest, ChecksThePeersUid) {
  SocketPair pair;
  EXPECT_OK(CheckPeerUid(pair.b.get(), {getuid()}));
  EXPECT_THAT(CheckPeerUid(pair.b.get(), {getuid() + 1}),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       HasSubstr("may not share memory with this daemon")));
}

}  // namespace
}  // namespace batchd::common
