#include "client/daemon_watch.h"

#include "absl/status/status.h"
#include "testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace batchd::client {
namespace {

using ::batchd::testing::StatusIs;
using ::testing::HasSubstr;
using Next = StreamEndVerdict::Next;

const absl::Time kT0 = absl::FromUnixSeconds(1000);
absl::Time At(int ms) { return kT0 + absl::Milliseconds(ms); }

StreamEndVerdict Judge(const grpc::Status& status,
                       const absl::Status& protocol_error = absl::OkStatus(),
                       bool stalled = false, uint32_t owed = 0,
                       bool in_dns = true, bool opened = false) {
  return JudgeStreamEnd("host-a:7070", status, protocol_error, stalled, owed,
                        in_dns, /*stall_timeout=*/absl::Seconds(20),
                        ChannelSecurity(), opened);
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

TEST(JudgeStreamEndTest, AFullDaemonIsAskedAgainAndItsMessageKept) {
  const StreamEndVerdict verdict = Judge(grpc::Status(
      grpc::StatusCode::RESOURCE_EXHAUSTED,
      "identity peer host 10.0.0.1 has 512 of its 512 streams "
      "(--max-streams-per-identity)"));
  EXPECT_EQ(verdict.next, Next::kReconnect);
  EXPECT_THAT(verdict.error,
              StatusIs(absl::StatusCode::kResourceExhausted,
                       "batchd at host-a:7070 refused the stream: identity "
                       "peer host 10.0.0.1 has 512 of its 512 streams "
                       "(--max-streams-per-identity)"));
  // After its `opened`, the same code is the daemon's verdict.
  const StreamEndVerdict later =
      Judge(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "full"),
            absl::OkStatus(), /*stalled=*/false, /*owed=*/1,
            /*in_dns=*/true, /*opened=*/true);
  EXPECT_EQ(later.next, Next::kFail);
  EXPECT_THAT(later.error,
              StatusIs(absl::StatusCode::kResourceExhausted, "full"));
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

DaemonWatch::Options Timeouts() {
  DaemonWatch::Options options;
  options.stall_timeout = absl::Seconds(20);
  options.progress_timeout = absl::Seconds(5);
  options.unavailable_timeout = absl::Seconds(30);
  return options;
}

// Up, streaming, owing `owed`, with `others` other daemons accepting.
DaemonWatch::Facts Streaming(uint32_t owed, int others) {
  DaemonWatch::Facts facts;
  facts.streaming = true;
  facts.owed = owed;
  facts.others_accepting = others;
  return facts;
}

DaemonWatch::Facts Receiving(int others) {
  DaemonWatch::Facts facts = Streaming(/*owed=*/1, others);
  facts.receiving = true;
  facts.epoch = 2;
  facts.batch_index = 7;
  facts.received = 100;
  facts.total = 400;
  return facts;
}

TEST(DaemonWatchTest, SilenceWithBatchesOwedStallsOnce) {
  DaemonWatch watch(Timeouts(), kT0);
  const int d = watch.Add();
  watch.Connecting(d, At(0));
  watch.OnMessage(d, At(1000));
  // Nothing owed: silence is fine.
  EXPECT_FALSE(watch.ShouldCancel(d, "a:1", At(60000), Streaming(0, 0)));
  EXPECT_FALSE(watch.ShouldCancel(d, "a:1", At(21000), Streaming(2, 0)));
  EXPECT_TRUE(watch.ShouldCancel(d, "a:1", At(21001), Streaming(2, 0)));
  EXPECT_TRUE(watch.stalled(d));
  // Cancelled once.
  EXPECT_FALSE(watch.ShouldCancel(d, "a:1", At(50000), Streaming(2, 0)));
  // The stream ends: the stall timeout's message.
  const StreamEndVerdict verdict =
      watch.JudgeEnd(d, "a:1", grpc::Status::CANCELLED, absl::OkStatus(),
                     /*owed=*/2, /*in_dns=*/true, ChannelSecurity(),
                     /*opened=*/true);
  EXPECT_EQ(verdict.next, Next::kReconnect);
  EXPECT_THAT(verdict.error,
              StatusIs(absl::StatusCode::kUnavailable,
                       "batchd at a:1 sent nothing for 20s with 2 batches "
                       "outstanding"));
  // A new stream starts afresh.
  watch.Connecting(d, At(60000));
  EXPECT_FALSE(watch.stalled(d));
  EXPECT_FALSE(watch.ShouldCancel(d, "a:1", At(61000), Streaming(2, 0)));
}

TEST(DaemonWatchTest, NotStreamingIsNeverCancelled) {
  DaemonWatch watch(Timeouts(), kT0);
  const int d = watch.Add();
  watch.Connecting(d, At(0));
  DaemonWatch::Facts facts = Receiving(/*others=*/1);
  facts.streaming = false;
  EXPECT_FALSE(watch.ShouldCancel(d, "a:1", At(100000), facts));
}

TEST(DaemonWatchTest, FrozenBatchIsGivenToTheOthersAndSaysWhy) {
  DaemonWatch watch(Timeouts(), kT0);
  const int d = watch.Add();
  watch.Connecting(d, At(0));
  EXPECT_FALSE(watch.ShouldCancel(d, "a:1", At(5000), Receiving(1)));
  // No other daemon: left to the stall timeout.
  EXPECT_FALSE(watch.ShouldCancel(d, "a:1", At(5001), Receiving(0)));
  EXPECT_TRUE(watch.ShouldCancel(d, "a:1", At(5001), Receiving(1)));
  EXPECT_EQ(watch.progress_cancels(), 1u);
  const StreamEndVerdict verdict =
      watch.JudgeEnd(d, "a:1", grpc::Status::CANCELLED, absl::OkStatus(),
                     /*owed=*/1, /*in_dns=*/true, ChannelSecurity(),
                     /*opened=*/true);
  EXPECT_EQ(verdict.next, Next::kReconnect);
  EXPECT_THAT(verdict.error,
              StatusIs(absl::StatusCode::kUnavailable,
                       "batchd at a:1 sent nothing of batch 7 of epoch 2 for "
                       "5s (100 of 400 bytes received); asked the other "
                       "daemons"));
}

TEST(DaemonWatchTest, ProgressDeadlineOffWhenZero) {
  DaemonWatch::Options options = Timeouts();
  options.progress_timeout = absl::ZeroDuration();
  DaemonWatch watch(options, kT0);
  const int d = watch.Add();
  watch.Connecting(d, At(0));
  EXPECT_FALSE(watch.ShouldCancel(d, "a:1", At(19000), Receiving(3)));
}

TEST(DaemonWatchTest, PacingTimeIsNotTheDaemonsSilence) {
  DaemonWatch watch(Timeouts(), kT0);
  const int d = watch.Add();
  watch.Connecting(d, At(0));
  // 8 MB at 1 MB/s: the link is busy until 8 s.
  EXPECT_EQ(watch.Pace(d, At(0), 8'000'000, 1'000'000), At(8000));
  // Another 1 MB queues behind it.
  EXPECT_EQ(watch.Pace(d, At(100), 1'000'000, 1'000'000), At(9000));
  EXPECT_FALSE(watch.ShouldCancel(d, "a:1", At(14000), Receiving(1)));
  EXPECT_TRUE(watch.ShouldCancel(d, "a:1", At(14001), Receiving(1)));
}

TEST(DaemonWatchTest, UnavailableClock) {
  DaemonWatch watch(Timeouts(), /*unavailable_since=*/At(0));
  EXPECT_FALSE(watch.Unavailable(At(30000)));
  EXPECT_TRUE(watch.Unavailable(At(30001)));
  watch.Recovered();
  EXPECT_FALSE(watch.Unavailable(At(100000)));
  // Some daemon accepts: the clock does not start.
  watch.NoteAccepting(/*accepting=*/1, At(100000));
  EXPECT_FALSE(watch.Unavailable(At(200000)));
  watch.NoteAccepting(/*accepting=*/0, At(200000));
  // Running: a later note does not restart it.
  watch.NoteAccepting(/*accepting=*/0, At(220000));
  EXPECT_FALSE(watch.Unavailable(At(230000)));
  EXPECT_TRUE(watch.Unavailable(At(230001)));
}

}  // namespace
}  // namespace batchd::client
