#include "common/local_address.h"

#include "gtest/gtest.h"

namespace batchd::common {
namespace {

TEST(LocalAddressTest, LoopbackAndUnixSocketsAreLocal) {
  for (const char* local :
       {"127.0.0.1:7070", "127.1.2.3:0", "localhost:7070", "[::1]:7070",
        "::1", "unix:/run/batchd.sock", "unix-abstract:batchd"}) {
    EXPECT_TRUE(IsLocalAddress(local)) << local;
  }
  for (const char* remote :
       {"0.0.0.0:7070", "[::]:7070", "10.0.0.1:7070", "batchd.example:7070",
        "128.0.0.1:7070", "[::2]:7070", "localhost.example:7070"}) {
    EXPECT_FALSE(IsLocalAddress(remote)) << remote;
  }
}

TEST(LocalAddressTest, PeersOnThisHost) {
  for (const char* local :
       {"ipv4:127.0.0.1:50123", "ipv6:[::1]:50123", "ipv6:[::ffff:127.0.0.1]:9",
        "unix:/tmp/batchd.sock", "unix:", "unix-abstract:batchd"}) {
    EXPECT_TRUE(IsLocalPeer(local)) << local;
  }
  for (const char* remote :
       {"ipv4:10.1.2.3:50123", "ipv6:[2001:db8::1]:50123",
        "ipv6:[::ffff:10.1.2.3]:9", "127.0.0.1:50123", ""}) {
    EXPECT_FALSE(IsLocalPeer(remote)) << remote;
  }
}

TEST(LocalAddressTest, PeerHostDropsThePort) {
  EXPECT_EQ(PeerHost("ipv4:10.1.2.3:50123"), "10.1.2.3");
  EXPECT_EQ(PeerHost("ipv4:10.1.2.3:50124"), "10.1.2.3");
  EXPECT_EQ(PeerHost("ipv6:[2001:db8::1]:50123"), "2001:db8::1");
  EXPECT_EQ(PeerHost("unix:/tmp/batchd.sock"), "unix");
  EXPECT_EQ(PeerHost("unix:"), "unix");
  EXPECT_EQ(PeerHost("unix-abstract:batchd"), "unix");
  EXPECT_EQ(PeerHost("something-else"), "something-else");
}

}  // namespace
}  // namespace batchd::common
