#include "client/request_scheduler.h"

#include <map>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace batchd::client {
namespace {

using Claim = RequestScheduler::Claim;
using Key = RequestScheduler::Key;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

constexpr int kCancelled = 1;
constexpr int kUnavailable = 14;
constexpr int kInvalidArgument = 3;

const absl::Time kT0 = absl::FromUnixSeconds(1000);
absl::Time At(int ms) { return kT0 + absl::Milliseconds(ms); }

// Batch indices requested of each daemon.
std::map<int, std::vector<uint64_t>> ByDaemon(
    const std::vector<RequestScheduler::Request>& requests) {
  std::map<int, std::vector<uint64_t>> out;
  for (const auto& r : requests) {
    for (uint64_t i : r.indices) out[r.daemon].push_back(i);
  }
  return out;
}

// Delivers `key` from `daemon` (header then last chunk) at `ms`.
Claim Deliver(RequestScheduler& s, int daemon, Key key, int ms) {
  const Claim claim = s.OnHeader(daemon, key);
  s.OnComplete(daemon, key, At(ms));
  return claim;
}

TEST(RequestSchedulerTest, SpreadsOverDaemonsWithinTheirWindows) {
  RequestScheduler s({});
  const int a = s.AddDaemon(), b = s.AddDaemon();
  s.DaemonUp(a, /*window=*/2);
  s.DaemonUp(b, /*window=*/2);
  for (uint64_t i = 0; i < 6; ++i) s.Want({0, i});
  auto sent = ByDaemon(s.Schedule(At(0)));
  // Four fit (two per daemon); the rest wait for a window place.
  EXPECT_EQ(sent[a].size(), 2u);
  EXPECT_EQ(sent[b].size(), 2u);
  EXPECT_EQ(s.unassigned(), 2u);
  EXPECT_EQ(s.outstanding(a), 2u);
  // A completed batch frees a place on its daemon.
  EXPECT_EQ(Deliver(s, a, {0, sent[a][0]}, 10), Claim::kAccept);
  auto more = ByDaemon(s.Schedule(At(10)));
  EXPECT_EQ(more[a].size(), 1u);
  EXPECT_EQ(more.count(b), 0u);
}

TEST(RequestSchedulerTest, FavoursTheFasterDaemon) {
  RequestScheduler s({});
  const int fast = s.AddDaemon(), slow = s.AddDaemon();
  s.DaemonUp(fast, 8);
  s.DaemonUp(slow, 8);
  s.Want({0, 0});
  s.Want({0, 1});
  auto first = ByDaemon(s.Schedule(At(0)));
  ASSERT_EQ(first[fast].size(), 1u);
  ASSERT_EQ(first[slow].size(), 1u);
  Deliver(s, fast, {0, first[fast][0]}, 10);    // 10 ms
  Deliver(s, slow, {0, first[slow][0]}, 100);   // 100 ms
  for (uint64_t i = 2; i < 8; ++i) s.Want({0, i});
  auto next = ByDaemon(s.Schedule(At(100)));
  // (outstanding + 1) x latency: the fast one takes several before the
  // slow one's single request costs less.
  EXPECT_GE(next[fast].size(), 5u);
  EXPECT_LE(next[slow].size(), 1u);
}

TEST(RequestSchedulerTest, LostDaemonsBatchesAreRequestedElsewhere) {
  RequestScheduler s({});
  const int a = s.AddDaemon(), b = s.AddDaemon();
  s.DaemonUp(a, 4);
  s.DaemonUp(b, 4);
  for (uint64_t i = 0; i < 4; ++i) s.Want({0, i});
  auto sent = ByDaemon(s.Schedule(At(0)));
  ASSERT_EQ(sent[a].size() + sent[b].size(), 4u);
  // a was writing its first batch when it died.
  ASSERT_EQ(s.OnHeader(a, {0, sent[a][0]}), Claim::kAccept);
  EXPECT_THAT(s.DaemonDown(a), ElementsAre(Key{0, sent[a][0]}));
  EXPECT_EQ(s.rerequested(), sent[a].size());
  EXPECT_EQ(s.counters(a).lost, sent[a].size());
  auto again = ByDaemon(s.Schedule(At(6)));
  EXPECT_EQ(again.count(a), 0u);
  EXPECT_EQ(again[b], sent[a]);
  // b now holds all four; each is accepted once.
  for (uint64_t i = 0; i < 4; ++i) {
    EXPECT_EQ(Deliver(s, b, {0, i}, 20), Claim::kAccept);
  }
  EXPECT_EQ(s.unassigned(), 0u);
  EXPECT_THAT(s.Schedule(At(30)), IsEmpty());
}

TEST(RequestSchedulerTest, LateAnswerAfterReRequestIsDiscarded) {
  RequestScheduler s({});
  const int a = s.AddDaemon(), b = s.AddDaemon();
  s.DaemonUp(a, 1);
  s.Want({0, 0});
  ASSERT_THAT(ByDaemon(s.Schedule(At(0)))[a], ElementsAre(0u));
  // b comes up; a is declared lost, its batch goes to b.
  s.DaemonUp(b, 1);
  s.DaemonDown(a);
  ASSERT_THAT(ByDaemon(s.Schedule(At(10)))[b], ElementsAre(0u));
  // a reconnects and (a protocol-conforming daemon would not, but a late
  // stream might) nothing of a's old request survives: a has no request.
  s.DaemonUp(a, 1);
  EXPECT_FALSE(s.HasRequest(a, {0, 0}));
  EXPECT_EQ(Deliver(s, b, {0, 0}, 20), Claim::kAccept);
}

TEST(RequestSchedulerTest, DuplicateAnswersFirstHeaderWins) {
  RequestScheduler::Options options;
  options.min_latency_samples = 0;
  options.min_hedge_delay = absl::Milliseconds(10);
  RequestScheduler s(options);
  const int a = s.AddDaemon(), b = s.AddDaemon();
  s.DaemonUp(a, 2);
  s.DaemonUp(b, 2);
  s.Want({0, 0});
  auto first = ByDaemon(s.Schedule(At(0)));
  const int holder = first.begin()->first;
  const int other = holder == a ? b : a;
  // Past the hedge delay: the other daemon is asked too.
  auto hedge = ByDaemon(s.Schedule(At(50)));
  ASSERT_THAT(hedge[other], ElementsAre(0u));
  EXPECT_EQ(s.hedged(), 1u);
  EXPECT_EQ(s.counters(other).hedges, 1u);
  // Only one hedge per batch.
  EXPECT_THAT(s.Schedule(At(500)), IsEmpty());
  // The hedge answers first; the original is read past and still frees its
  // window place when it ends.
  EXPECT_EQ(s.OnHeader(other, {0, 0}), Claim::kAccept);
  EXPECT_EQ(s.OnHeader(holder, {0, 0}), Claim::kDiscard);
  s.OnComplete(other, {0, 0}, At(70));
  s.OnComplete(holder, {0, 0}, At(71));
  EXPECT_EQ(s.outstanding(a), 0u);
  EXPECT_EQ(s.outstanding(b), 0u);
  EXPECT_EQ(s.counters(holder).discarded, 1u);
  EXPECT_EQ(s.counters(other).served, 1u);
}

TEST(RequestSchedulerTest, HedgesOnlyAfterFactorTimesTheMedian) {
  RequestScheduler::Options options;
  options.hedge_factor = 3.0;
  options.min_latency_samples = 4;
  options.min_hedge_delay = absl::Milliseconds(1);
  RequestScheduler s(options);
  const int a = s.AddDaemon(), b = s.AddDaemon();
  s.DaemonUp(a, 1);
  s.DaemonUp(b, 1);
  // Learn a 100 ms median.
  for (uint64_t i = 0; i < 4; ++i) {
    s.Want({0, i});
    auto sent = s.Schedule(At(1000 * i));
    ASSERT_EQ(sent.size(), 1u);
    Deliver(s, sent[0].daemon, {0, i}, 1000 * i + 100);
  }
  ASSERT_EQ(s.median_latency(), absl::Milliseconds(100));
  s.Want({0, 9});
  auto sent = s.Schedule(At(10000));
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_THAT(s.Schedule(At(10299)), IsEmpty());       // < 3 x p50
  auto hedge = s.Schedule(At(10301));                  // > 3 x p50
  ASSERT_EQ(hedge.size(), 1u);
  EXPECT_NE(hedge[0].daemon, sent[0].daemon);
}

TEST(RequestSchedulerTest, NoHedgingWithOneDaemonOrWhenOff) {
  RequestScheduler::Options options;
  options.min_latency_samples = 0;
  RequestScheduler one(options);
  const int a = one.AddDaemon();
  one.DaemonUp(a, 4);
  one.Want({0, 0});
  ASSERT_EQ(one.Schedule(At(0)).size(), 1u);
  EXPECT_THAT(one.Schedule(At(100000)), IsEmpty());

  options.hedge_factor = 0;
  RequestScheduler off(options);
  const int x = off.AddDaemon(), y = off.AddDaemon();
  off.DaemonUp(x, 4);
  off.DaemonUp(y, 4);
  off.Want({0, 0});
  ASSERT_EQ(off.Schedule(At(0)).size(), 1u);
  EXPECT_THAT(off.Schedule(At(100000)), IsEmpty());
  EXPECT_EQ(off.hedged(), 0u);
}

TEST(RequestSchedulerTest, HedgesABatchWhoseDaemonMakesNoProgress) {
  RequestScheduler::Options options;
  options.hedge_factor = 0;  // no latency hedging: only the deadline
  options.progress_timeout = absl::Seconds(1);
  RequestScheduler s(options);
  const int a = s.AddDaemon(), b = s.AddDaemon();
  s.DaemonUp(a, 4);
  s.DaemonUp(b, 4);
  s.Want({0, 0});
  s.Want({0, 1});
  auto sent = ByDaemon(s.Schedule(At(0)));
  ASSERT_EQ(sent[a].size(), 1u);
  ASSERT_EQ(sent[b].size(), 1u);
  const uint64_t on_a = sent[a][0];
  // b keeps sending (another client's batch, a chunk): its copy waits.
  // a sent something at 500 ms: its clock starts again there.
  s.OnProgress(a, At(500));
  s.OnProgress(b, At(1400));
  EXPECT_THAT(s.Schedule(At(1499)), IsEmpty());
  auto hedge = ByDaemon(s.Schedule(At(1501)));
  EXPECT_THAT(hedge[b], ElementsAre(on_a));
  EXPECT_EQ(hedge.count(a), 0u);
  EXPECT_EQ(s.hedged(), 1u);
  // Once only (both daemons busy again, so b's own batch is not due);
  // the first header wins.
  s.OnProgress(a, At(4900));
  s.OnProgress(b, At(4900));
  EXPECT_THAT(s.Schedule(At(5000)), IsEmpty());
  EXPECT_EQ(s.OnHeader(b, {0, on_a}), Claim::kAccept);
}

TEST(RequestSchedulerTest, NoProgressHedgeWithOneDaemonOrWhenOff) {
  RequestScheduler::Options options;
  options.hedge_factor = 0;
  options.progress_timeout = absl::Seconds(1);
  RequestScheduler one(options);
  const int a = one.AddDaemon();
  one.DaemonUp(a, 4);
  one.Want({0, 0});
  ASSERT_EQ(one.Schedule(At(0)).size(), 1u);
  EXPECT_THAT(one.Schedule(At(100000)), IsEmpty());

  options.progress_timeout = absl::ZeroDuration();
  RequestScheduler off(options);
  const int x = off.AddDaemon(), y = off.AddDaemon();
  off.DaemonUp(x, 4);
  off.DaemonUp(y, 4);
  off.Want({0, 0});
  ASSERT_EQ(off.Schedule(At(0)).size(), 1u);
  EXPECT_THAT(off.Schedule(At(100000)), IsEmpty());
}

TEST(RequestSchedulerTest, DaemonThatRecoversGetsWorkAgain) {
  RequestScheduler s({});
  const int a = s.AddDaemon();
  s.DaemonUp(a, 2);
  s.Want({0, 0});
  ASSERT_EQ(s.Schedule(At(0)).size(), 1u);
  s.DaemonDown(a);
  // Nobody is up: the batch waits.
  EXPECT_THAT(s.Schedule(At(10)), IsEmpty());
  EXPECT_EQ(s.unassigned(), 1u);
  s.DaemonUp(a, 2);
  EXPECT_THAT(ByDaemon(s.Schedule(At(20)))[a], ElementsAre(0u));
  EXPECT_EQ(Deliver(s, a, {0, 0}, 30), Claim::kAccept);
}

TEST(RequestSchedulerTest, DrainingRejectionMovesTheBatch) {
  RequestScheduler s({});
  const int a = s.AddDaemon(), b = s.AddDaemon();
  s.DaemonUp(a, 4);
  s.Want({0, 0});
  ASSERT_EQ(ByDaemon(s.Schedule(At(0)))[a].size(), 1u);
  s.DaemonUp(b, 4);
  EXPECT_EQ(s.OnRejected(a, {0, 0}, kUnavailable),
            RequestScheduler::RejectionOutcome::kRetryElsewhere);
  EXPECT_FALSE(s.Accepting(a));
  EXPECT_TRUE(s.IsUp(a));
  EXPECT_THAT(ByDaemon(s.Schedule(At(1)))[b], ElementsAre(0u));
  // A draining daemon gets nothing new.
  s.Want({0, 1});
  EXPECT_THAT(ByDaemon(s.Schedule(At(2)))[b], ElementsAre(1u));
}

TEST(RequestSchedulerTest, BadRequestFailsOnceAndCanBeWantedAgain) {
  RequestScheduler s({});
  const int a = s.AddDaemon();
  s.DaemonUp(a, 4);
  s.Want({0, 7});
  ASSERT_EQ(s.Schedule(At(0)).size(), 1u);
  EXPECT_EQ(s.OnRejected(a, {0, 7}, kInvalidArgument),
            RequestScheduler::RejectionOutcome::kFail);
  EXPECT_EQ(s.outstanding(a), 0u);
  EXPECT_THAT(s.Schedule(At(1)), IsEmpty());
  s.Want({0, 7});  // the consumer asks again
  EXPECT_EQ(s.Schedule(At(2)).size(), 1u);
}

TEST(RequestSchedulerTest, UnwantedCopiesAreDiscardedButHoldTheirWindow) {
  RequestScheduler s({});
  const int a = s.AddDaemon();
  s.DaemonUp(a, 1);
  s.Want({0, 0});
  ASSERT_EQ(s.Schedule(At(0)).size(), 1u);
  s.Unwant({0, 0});
  s.Want({1, 0});
  // The old copy still counts against the daemon's window of 1.
  EXPECT_THAT(s.Schedule(At(1)), IsEmpty());
  EXPECT_EQ(Deliver(s, a, {0, 0}, 5), Claim::kDiscard);
  auto sent = s.Schedule(At(6));
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].epoch, 1u);
}

TEST(RequestSchedulerTest, WantedAgainAdoptsTheCopyInFlight) {
  RequestScheduler s({});
  const int a = s.AddDaemon();
  s.DaemonUp(a, 2);
  s.Want({0, 3});
  ASSERT_EQ(s.Schedule(At(0)).size(), 1u);
  s.Unwant({0, 3});
  s.Want({0, 3});
  EXPECT_THAT(s.Schedule(At(1)), IsEmpty());  // no second request
  EXPECT_EQ(Deliver(s, a, {0, 3}, 2), Claim::kAccept);
}

// Two daemons, a 100 ms median learnt, and batch (0, 9) hedged: first asked
// of `*first`, then of `*second`.
RequestScheduler HedgedScheduler(int* first, int* second) {
  RequestScheduler::Options options;
  options.min_latency_samples = 4;
  options.min_hedge_delay = absl::Milliseconds(1);
  RequestScheduler s(options);
  const int a = s.AddDaemon(), b = s.AddDaemon();
  s.DaemonUp(a, 2);
  s.DaemonUp(b, 2);
  for (uint64_t i = 0; i < 4; ++i) {
    s.Want({0, i});
    auto sent = s.Schedule(At(1000 * i));
    Deliver(s, sent.at(0).daemon, {0, i}, 1000 * i + 100);
  }
  s.Want({0, 9});
  *first = s.Schedule(At(10000)).at(0).daemon;
  *second = s.Schedule(At(10400)).at(0).daemon;
  return s;
}

TEST(RequestSchedulerTest, HedgeLoserIsCancelledOnce) {
  int first = -1, second = -1;
  RequestScheduler s = HedgedScheduler(&first, &second);
  ASSERT_NE(first, second);
  EXPECT_THAT(s.TakeCancels(), IsEmpty());
  // The hedge answers first: the original copy is withdrawn.
  EXPECT_EQ(s.OnHeader(second, {0, 9}), Claim::kAccept);
  EXPECT_TRUE(s.has_cancels());
  auto cancels = s.TakeCancels();
  ASSERT_EQ(cancels.size(), 1u);
  EXPECT_EQ(cancels[0].daemon, first);
  EXPECT_EQ(cancels[0].epoch, 0u);
  EXPECT_THAT(cancels[0].indices, ElementsAre(9u));
  EXPECT_THAT(s.TakeCancels(), IsEmpty());  // once
  s.OnComplete(second, {0, 9}, At(10450));
  // Until its daemon answers, the withdrawn copy holds its window place.
  EXPECT_EQ(s.outstanding(first), 1u);
  EXPECT_EQ(s.OnRejected(first, {0, 9}, kCancelled),
            RequestScheduler::RejectionOutcome::kIgnore);
  EXPECT_EQ(s.outstanding(first), 0u);
  EXPECT_EQ(s.counters(first).cancelled, 1u);
  EXPECT_EQ(s.counters(first).discarded, 0u);
  EXPECT_THAT(s.Schedule(At(10500)), IsEmpty());  // nothing asked again
}

TEST(RequestSchedulerTest, CancelledCopyThatArrivesAnywayIsDiscarded) {
  int first = -1, second = -1;
  RequestScheduler s = HedgedScheduler(&first, &second);
  EXPECT_EQ(Deliver(s, second, {0, 9}, 10450), Claim::kAccept);
  ASSERT_EQ(s.TakeCancels().size(), 1u);
  // Its header was already on the way when the cancel reached the daemon.
  EXPECT_EQ(Deliver(s, first, {0, 9}, 10460), Claim::kDiscard);
  EXPECT_EQ(s.outstanding(first), 0u);
  EXPECT_EQ(s.counters(first).discarded, 1u);
}

TEST(RequestSchedulerTest, WinnerLostWhileLoserIsBeingCancelled) {
  int first = -1, second = -1;
  RequestScheduler s = HedgedScheduler(&first, &second);
  EXPECT_EQ(s.OnHeader(second, {0, 9}), Claim::kAccept);
  ASSERT_EQ(s.TakeCancels().size(), 1u);
  // The winner dies mid-batch: its bytes start over.
  EXPECT_THAT(s.DaemonDown(second), ElementsAre(Key{0, 9}));
  EXPECT_EQ(s.rerequested(), 1u);
  // The only copy left is being withdrawn; the batch waits for its answer.
  EXPECT_THAT(s.Schedule(At(10500)), IsEmpty());
  EXPECT_EQ(s.unassigned(), 1u);
  EXPECT_EQ(s.OnRejected(first, {0, 9}, kCancelled),
            RequestScheduler::RejectionOutcome::kIgnore);
  EXPECT_THAT(ByDaemon(s.Schedule(At(10510)))[first], ElementsAre(9u));
  EXPECT_EQ(Deliver(s, first, {0, 9}, 10600), Claim::kAccept);
}

TEST(RequestSchedulerTest, LateHeaderOfCancelledCopyServesALostWinner) {
  int first = -1, second = -1;
  RequestScheduler s = HedgedScheduler(&first, &second);
  EXPECT_EQ(s.OnHeader(second, {0, 9}), Claim::kAccept);
  ASSERT_EQ(s.TakeCancels().size(), 1u);
  s.DaemonDown(second);
  const uint64_t served = s.counters(first).served;
  // The cancel came too late on `first`: its copy is taken gladly.
  EXPECT_EQ(Deliver(s, first, {0, 9}, 10600), Claim::kAccept);
  EXPECT_EQ(s.counters(first).served, served + 1);
}

TEST(RequestSchedulerTest, CancelsForADaemonThatWentDownAreDropped) {
  int first = -1, second = -1;
  RequestScheduler s = HedgedScheduler(&first, &second);
  EXPECT_EQ(s.OnHeader(second, {0, 9}), Claim::kAccept);
  s.DaemonDown(first);  // forgets its copy: nothing to withdraw
  EXPECT_THAT(s.TakeCancels(), IsEmpty());
}

TEST(RequestSchedulerTest, UnwantedCopiesAreCancelled) {
  RequestScheduler s({});
  const int a = s.AddDaemon();
  s.DaemonUp(a, 4);
  s.Want({0, 0});
  s.Want({0, 1});
  ASSERT_EQ(s.Schedule(At(0)).size(), 1u);
  EXPECT_EQ(s.OnHeader(a, {0, 0}), Claim::kAccept);  // being received
  s.Unwant({0, 0});
  s.Unwant({0, 1});
  auto cancels = s.TakeCancels();
  ASSERT_EQ(cancels.size(), 1u);
  // The copy whose bytes are arriving is read past, not cancelled.
  EXPECT_THAT(cancels[0].indices, ElementsAre(1u));
}

}  // namespace
}  // namespace batchd::client
