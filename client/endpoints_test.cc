#include "client/endpoints.h"

#include "testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace batchd::client {
namespace {

using ::batchd::testing::StatusIs;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(EndpointsTest, ParsesOneAddressAndAList) {
  absl::StatusOr<EndpointSpec> one = ParseEndpoints("localhost:7070");
  ASSERT_OK(one);
  EXPECT_THAT(one->addresses, ElementsAre("localhost:7070"));
  EXPECT_FALSE(one->uses_dns());
  absl::StatusOr<EndpointSpec> list =
      ParseEndpoints("a:1, b:2,unix:/tmp/batchd.sock");
  ASSERT_OK(list);
  EXPECT_THAT(list->addresses, ElementsAre("a:1", "b:2", "unix:/tmp/batchd.sock"));
}

TEST(EndpointsTest, ParsesADnsName) {
  absl::StatusOr<EndpointSpec> spec = ParseEndpoints("dns:///batchd.ml.svc:7070");
  ASSERT_OK(spec);
  EXPECT_TRUE(spec->uses_dns());
  EXPECT_EQ(spec->dns_host, "batchd.ml.svc");
  EXPECT_EQ(spec->dns_port, "7070");
  absl::StatusOr<EndpointSpec> v6 = ParseEndpoints("dns:///[::1]:7070");
  ASSERT_OK(v6);
  EXPECT_EQ(v6->dns_host, "::1");
}

TEST(EndpointsTest, RejectsMalformedLists) {
  EXPECT_THAT(ParseEndpoints(""), StatusIs(absl::StatusCode::kInvalidArgument,
                                          HasSubstr("empty")));
  EXPECT_THAT(ParseEndpoints("a:1,,b:2"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("empty entry")));
  EXPECT_THAT(ParseEndpoints("dns:///x:1,a:2"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("only endpoint")));
  EXPECT_THAT(ParseEndpoints("dns:///nameonly"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("port")));
}

TEST(EndpointsTest, SystemResolverFindsLoopback) {
  absl::StatusOr<std::vector<std::string>> targets =
      ResolveWithSystem("127.0.0.1", "7070");
  ASSERT_OK(targets);
  EXPECT_THAT(*targets, ElementsAre("127.0.0.1:7070"));
  absl::StatusOr<std::vector<std::string>> v6 = ResolveWithSystem("::1", "9");
  ASSERT_OK(v6);
  EXPECT_THAT(*v6, Contains("[::1]:9"));
  EXPECT_THAT(ResolveWithSystem("no-such-host.invalid", "1"),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("cannot resolve")));
}

}  // namespace
}  // namespace batchd::client
