// The DaemonSet's rules that are pure functions; the set itself is tested
// through the Loader (loader_test.cc, loader_errors_test.cc) and the
// multi-daemon end-to-end tests.
#include "client/daemon_set.h"

#include "absl/status/status.h"
#include "testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace batchd::client {
namespace {

using ::batchd::testing::StatusIs;
using ::testing::HasSubstr;
using Next = StreamEndVerdict::Next;

StreamEndVerdict Judge(const grpc::Status& status,
                       const absl::Status& protocol_error = absl::OkStatus(),
                       bool stalled = false, uint32_t owed = 0,
                       bool in_dns = true) {
  return JudgeStreamEnd("host-a:7070", status, protocol_error, stalled, owed,
                        in_dns, /*stall_timeout=*/absl::Seconds(20),
                        ChannelSecurity());
}

TEST(JudgeStreamEndTest, LostConnectionIsRetried) {
  const StreamEndVerdict verdict =
      Judge(grpc::Status(grpc::StatusCode::UNAVAILABLE, "connection reset"));
  EXPECT_EQ(verdict.next, Next::kReconnect);
  EXPECT_THAT(verdict.error,
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("lost the stream to batchd at host-a:7070: "
                                 "connection reset")));
}

TEST(JudgeStreamEndTest, TheDaemonsVerdictIsFinalAndKeepsItsCode) {
  const StreamEndVerdict verdict = Judge(
      grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "no dataset 'x'"));
  EXPECT_EQ(verdict.next, Next::kFail);
  EXPECT_THAT(verdict.error, StatusIs(absl::StatusCode::kInvalidArgument,
                                      "no dataset 'x'"));
}

TEST(JudgeStreamEndTest, ProtocolErrorIsFinal) {
  const StreamEndVerdict verdict =
      Judge(grpc::Status::CANCELLED, absl::InternalError("protocol error"));
  EXPECT_EQ(verdict.next, Next::kFail);
  EXPECT_THAT(verdict.error, StatusIs(absl::StatusCode::kInternal, ::testing::_));
}

TEST(JudgeStreamEndTest, StalledDaemonIsRetriedAndSaysWhy) {
  const StreamEndVerdict verdict = Judge(grpc::Status::CANCELLED, {},
                                         /*stalled=*/true, /*owed=*/3);
  EXPECT_EQ(verdict.next, Next::kReconnect);
  EXPECT_THAT(verdict.error,
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("sent nothing for 20s with 3 batches")));
}

TEST(JudgeStreamEndTest, CleanEndWithBatchesOwedIsFinal) {
  const StreamEndVerdict verdict =
      Judge(grpc::Status::OK, {}, /*stalled=*/false, /*owed=*/2);
  EXPECT_EQ(verdict.next, Next::kFail);
  EXPECT_THAT(verdict.error,
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("with 2 requested batches not delivered")));
}

TEST(JudgeStreamEndTest, CleanEndOwingNothingIsRetriedOrRemoved) {
  EXPECT_EQ(Judge(grpc::Status::OK).next, Next::kReconnect);
  // Gone from DNS: done with it.
  EXPECT_EQ(Judge(grpc::Status::OK, {}, false, 0, /*in_dns=*/false).next,
            Next::kRemove);
  // Gone from DNS but lost with batches owed: still down, not removed.
  EXPECT_EQ(Judge(grpc::Status(grpc::StatusCode::UNAVAILABLE, "reset"), {},
                  false, /*owed=*/1, /*in_dns=*/false)
                .next,
            Next::kReconnect);
}

TEST(ReconnectBackoffTest, DoublesFromMinUpToMax) {
  const absl::Duration min = absl::Milliseconds(100);
  const absl::Duration max = absl::Seconds(5);
  EXPECT_EQ(ReconnectBackoff(1, min, max), absl::Milliseconds(100));
  EXPECT_EQ(ReconnectBackoff(2, min, max), absl::Milliseconds(200));
  EXPECT_EQ(ReconnectBackoff(4, min, max), absl::Milliseconds(800));
  EXPECT_EQ(ReconnectBackoff(7, min, max), absl::Seconds(5));
  EXPECT_EQ(ReconnectBackoff(1000, min, max), absl::Seconds(5));
}

TEST(AskedWindowTest, PrefetchUnlessAutoPrefetch) {
  LoaderOptions options;
  options.prefetch = 6;
  EXPECT_EQ(AskedWindow(options), 6u);
  options.auto_prefetch = true;
  options.plan.set_batch_size(8);
  options.plan.mutable_pipeline()->mutable_train()->set_size(100);
  // Batches of 8 x 100 x 100 x 3 = 240,000 bytes; 2.4 MB holds 10.
  options.auto_prefetch_max_bytes = 2'400'000;
  EXPECT_EQ(AskedWindow(options), 10u);
  // Never below prefetch, never above 1024.
  options.auto_prefetch_max_bytes = 1;
  EXPECT_EQ(AskedWindow(options), 6u);
  options.auto_prefetch_max_bytes = uint64_t{1} << 40;
  EXPECT_EQ(AskedWindow(options), 1024u);
}

}  // namespace
}  // namespace batchd::client
