#include "client/grpc_status.h"

#include "testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace batchd::client {
namespace {

using ::batchd::testing::StatusIs;

TEST(FromGrpcTest, KeepsCodeAndMessage) {
  EXPECT_THAT(FromGrpc(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                    "no dataset 'x'")),
              StatusIs(absl::StatusCode::kInvalidArgument, "no dataset 'x'"));
  EXPECT_THAT(FromGrpc(grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "t")),
              StatusIs(absl::StatusCode::kUnauthenticated, "t"));
  EXPECT_THAT(FromGrpc(grpc::Status(grpc::StatusCode::UNAVAILABLE, "down")),
              StatusIs(absl::StatusCode::kUnavailable, "down"));
}

TEST(FromGrpcTest, OkIsOk) {
  EXPECT_TRUE(FromGrpc(grpc::Status::OK).ok());
  EXPECT_TRUE(FromGrpc(grpc::Status::OK, "ignored").ok());
}

TEST(FromGrpcTest, MessageMayBeReplaced) {
  const grpc::Status status(grpc::StatusCode::DEADLINE_EXCEEDED, "late");
  EXPECT_THAT(FromGrpc(status, "GetStatus: late"),
              StatusIs(absl::StatusCode::kDeadlineExceeded, "GetStatus: late"));
}

}  // namespace
}  // namespace batchd::client
