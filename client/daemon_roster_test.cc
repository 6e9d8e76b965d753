#include "client/daemon_roster.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace batchd::client {
namespace {

using ::batchd::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using State = DaemonRoster::State;
using Next = DaemonRoster::Next;

const absl::Time kT0 = absl::FromUnixSeconds(1000);
absl::Time At(int ms) { return kT0 + absl::Milliseconds(ms); }

DaemonRoster::Options Backoff(int min_ms, int max_ms) {
  DaemonRoster::Options options;
  options.reconnect_backoff_min = absl::Milliseconds(min_ms);
  options.reconnect_backoff_max = absl::Milliseconds(max_ms);
  options.jitter_seed = 7;
  return options;
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

TEST(DaemonRosterTest, DaemonsAreNumberedAndStartConnecting) {
  DaemonRoster roster(Backoff(100, 5000));
  EXPECT_EQ(roster.Add("a:1"), 0);
  EXPECT_EQ(roster.Add("b:2"), 1);
  EXPECT_EQ(roster.size(), 2);
  EXPECT_EQ(roster.endpoint(1), "b:2");
  EXPECT_EQ(roster.state(0), State::kConnecting);
  EXPECT_TRUE(roster.in_dns(0));
  EXPECT_TRUE(roster.Knows("a:1"));
  EXPECT_FALSE(roster.Knows("c:3"));
  EXPECT_EQ(roster.CountIn(State::kConnecting), 2);
}

TEST(DaemonRosterTest, LostStreamWaitsOutAGrowingBackoffWithJitter) {
  DaemonRoster roster(Backoff(100, 5000));
  roster.Add("a:1");
  EXPECT_TRUE(roster.Up(0));
  roster.Ended(0, Next::kReconnect, absl::UnavailableError("reset"), At(0));
  EXPECT_EQ(roster.state(0), State::kDown);
  EXPECT_EQ(roster.failures(0), 1);
  EXPECT_THAT(roster.last_error(0),
              StatusIs(absl::StatusCode::kUnavailable, "reset"));
  // 100 ms +-20 %.
  EXPECT_GE(roster.retry_at(0), At(80));
  EXPECT_LE(roster.retry_at(0), At(120));
  EXPECT_FALSE(roster.DueForRetry(0, At(79)));
  EXPECT_TRUE(roster.DueForRetry(0, At(120)));

  roster.Connecting(0);
  EXPECT_FALSE(roster.DueForRetry(0, At(1000)));
  roster.Ended(0, Next::kReconnect, absl::UnavailableError("reset"), At(1000));
  EXPECT_EQ(roster.failures(0), 2);
  // 200 ms +-20 %.
  EXPECT_GE(roster.retry_at(0), At(1160));
  EXPECT_LE(roster.retry_at(0), At(1240));
}

TEST(DaemonRosterTest, UpAfterFailuresIsNoRecoveryUntilItDelivers) {
  DaemonRoster roster(Backoff(100, 5000));
  roster.Add("a:1");
  roster.Ended(0, Next::kReconnect, absl::UnavailableError("reset"), At(0));
  roster.Connecting(0);
  // Failed since it last delivered: the stream's answer proves nothing.
  EXPECT_FALSE(roster.Up(0));
  EXPECT_EQ(roster.state(0), State::kUp);
  EXPECT_EQ(roster.failures(0), 1);
  EXPECT_FALSE(roster.last_error(0).ok());
  // It delivered.
  roster.Recovered(0);
  EXPECT_EQ(roster.failures(0), 0);
  EXPECT_TRUE(roster.last_error(0).ok());
  // Up with no failures is recovered at once.
  roster.Connecting(0);
  EXPECT_TRUE(roster.Up(0));
}

TEST(DaemonRosterTest, StoppedAndFinalEnds) {
  DaemonRoster roster(Backoff(100, 5000));
  roster.Add("a:1");
  roster.Add("b:2");
  roster.Stopped(0);
  EXPECT_EQ(roster.state(0), State::kDown);
  EXPECT_EQ(roster.failures(0), 0);
  roster.Ended(1, Next::kFail, absl::InvalidArgumentError("no dataset"),
               At(0));
  EXPECT_EQ(roster.state(1), State::kFailed);
  EXPECT_FALSE(roster.DueForRetry(1, At(100000)));
}

TEST(DaemonRosterTest, ReconcileDrainsUnlistedAndListsNew) {
  DaemonRoster roster(Backoff(100, 5000));
  roster.Add("a:1");
  roster.Add("b:2");
  const DaemonRoster::Reconciled changes =
      roster.Reconcile({"b:2", "c:3", "c:3", "d:4"}, At(0));
  EXPECT_THAT(changes.draining, ElementsAre(0));
  EXPECT_THAT(changes.added, ElementsAre("c:3", "d:4"));
  EXPECT_FALSE(roster.in_dns(0));
  EXPECT_TRUE(roster.in_dns(1));
  // Added by the caller, not by Reconcile.
  EXPECT_EQ(roster.size(), 2);
  // The same answer again changes nothing.
  const DaemonRoster::Reconciled again = roster.Reconcile({"b:2"}, At(10));
  EXPECT_THAT(again.draining, IsEmpty());
  EXPECT_THAT(again.added, IsEmpty());
}

TEST(DaemonRosterTest, UnlistedDaemonIsNotRetriedAndARemovedOneComesBack) {
  DaemonRoster roster(Backoff(100, 5000));
  roster.Add("a:1");
  roster.Up(0);
  roster.Reconcile({}, At(0));
  roster.Ended(0, Next::kReconnect, absl::UnavailableError("reset"), At(0));
  EXPECT_FALSE(roster.DueForRetry(0, At(100000)));
  roster.Ended(0, Next::kRemove, absl::UnavailableError("ended"), At(10));
  EXPECT_EQ(roster.state(0), State::kRemoved);
  // Listed again: down, and due at once.
  roster.Reconcile({"a:1"}, At(500));
  EXPECT_EQ(roster.state(0), State::kDown);
  EXPECT_TRUE(roster.in_dns(0));
  EXPECT_EQ(roster.retry_at(0), At(500));
  EXPECT_TRUE(roster.DueForRetry(0, At(500)));
}

TEST(DaemonRosterTest, SummaryNamesEachDaemonAndWhy) {
  DaemonRoster roster(Backoff(100, 5000));
  roster.Add("a:1");
  roster.Add("b:2");
  roster.Ended(0, Next::kReconnect, absl::UnavailableError("reset"), At(0));
  EXPECT_EQ(roster.Summary(), "a:1 (reset); b:2 (never answered)");
}

TEST(DaemonRosterTest, AllFailedErrorOnlyOnceEveryDaemonFailed) {
  DaemonRoster roster(Backoff(100, 5000));
  EXPECT_TRUE(roster.AllFailedError(/*may_grow=*/false).ok());
  roster.Add("a:1");
  roster.Ended(0, Next::kFail, absl::InvalidArgumentError("no dataset 'x'"),
               At(0));
  // One daemon: its own error, as it is.
  EXPECT_THAT(roster.AllFailedError(false),
              StatusIs(absl::StatusCode::kInvalidArgument, "no dataset 'x'"));
  // A DNS name may bring more.
  EXPECT_TRUE(roster.AllFailedError(/*may_grow=*/true).ok());
  roster.Add("b:2");
  EXPECT_TRUE(roster.AllFailedError(false).ok());
  roster.Ended(1, Next::kFail, absl::FailedPreconditionError("other dataset"),
               At(0));
  EXPECT_THAT(roster.AllFailedError(false),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       "every batchd daemon failed: a:1 (no dataset 'x'); "
                       "b:2 (other dataset)"));
}

TEST(DaemonRosterTest, StateNames) {
  DaemonRoster roster(Backoff(100, 5000));
  roster.Add("a:1");
  EXPECT_STREQ(roster.StateName(0, /*accepting=*/false), "connecting");
  roster.Up(0);
  EXPECT_STREQ(roster.StateName(0, /*accepting=*/true), "up");
  EXPECT_STREQ(roster.StateName(0, /*accepting=*/false), "draining");
  roster.Stopped(0);
  EXPECT_STREQ(roster.StateName(0, false), "down");
  roster.Ended(0, Next::kFail, absl::InternalError("x"), At(0));
  EXPECT_STREQ(roster.StateName(0, false), "failed");
  roster.Ended(0, Next::kRemove, absl::UnavailableError("x"), At(0));
  EXPECT_STREQ(roster.StateName(0, false), "removed");
}

}  // namespace
}  // namespace batchd::client
