#include "server/stream/stream_ledger.h"

#include "testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace batchd::server {
namespace {

using ::batchd::testing::StatusIs;
using ::testing::HasSubstr;
using Built = StreamLedger::Built;
using Cancelled = StreamLedger::Cancelled;
using Key = StreamLedger::Key;

constexpr uint64_t kBatchBytes = 1000;

// A ledger whose plan is open: `window` batches, 10 batches per epoch.
StreamLedger OpenLedger(uint32_t window) {
  StreamLedger ledger;
  ledger.Open(window, {.per_epoch = 10},
              /*reserved_bytes=*/window * kBatchBytes);
  return ledger;
}

// Accepts `key` on the bytes path, which must succeed.
StreamLedger::Grant MustAccept(StreamLedger& ledger, const Key& key) {
  absl::StatusOr<StreamLedger::Grant> grant =
      ledger.Accept(key, std::nullopt, /*drain_message=*/"");
  EXPECT_OK(grant);
  return grant.ok() ? *grant : StreamLedger::Grant{};
}

TEST(StreamLedgerTest, AResumedEpochHasItsOwnBatchCount) {
  StreamLedger ledger;
  ledger.Open(/*window=*/4,
              {.per_epoch = 10, .resumed_epoch = 3, .resumed = 4},
              /*reserved_bytes=*/4 * kBatchBytes);
  MustAccept(ledger, {3, 3});
  EXPECT_THAT(ledger.Accept({3, 4}, std::nullopt, ""),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("4 batches left in epoch 3, resumed")));
  MustAccept(ledger, {4, 9});
  MustAccept(ledger, {2, 9});
}

TEST(StreamLedgerTest, BatchLivesFromAcceptToCompleted) {
  StreamLedger ledger = OpenLedger(/*window=*/2);
  ledger.CountRequest();
  StreamLedger::Grant grant = MustAccept(ledger, {0, 3});
  ASSERT_NE(grant.cancelled, nullptr);
  EXPECT_FALSE(grant.cancelled->load());
  EXPECT_FALSE(grant.slot.has_value());
  EXPECT_EQ(ledger.outstanding(), 1u);
  EXPECT_FALSE(ledger.idle());

  EXPECT_EQ(ledger.BatchBuilt({0, 3}, /*built=*/true), Built::kSend);
  ledger.HeaderSent({0, 3});
  EXPECT_EQ(ledger.headers_sent(), 1u);
  EXPECT_FALSE(ledger.idle());  // chunks still to write
  ledger.Completed({0, 3});
  EXPECT_TRUE(ledger.idle());
}

TEST(StreamLedgerTest, WindowFullRejectsUntilABatchCompletes) {
  StreamLedger ledger = OpenLedger(/*window=*/2);
  MustAccept(ledger, {0, 0});
  MustAccept(ledger, {0, 1});
  EXPECT_THAT(ledger.Accept({0, 2}, std::nullopt, ""),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("more than window=2")));
  EXPECT_EQ(ledger.outstanding(), 2u);

  ASSERT_EQ(ledger.BatchBuilt({0, 0}, true), Built::kSend);
  ledger.HeaderSent({0, 0});
  ledger.Completed({0, 0});
  MustAccept(ledger, {0, 2});
  EXPECT_EQ(ledger.outstanding(), 2u);
}

TEST(StreamLedgerTest, RejectsOutOfRangeDuplicatesAndDrain) {
  StreamLedger ledger = OpenLedger(/*window=*/4);
  EXPECT_THAT(ledger.Accept({uint64_t{1} << 32, 0}, std::nullopt, ""),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("epoch 4294967296 is too large")));
  EXPECT_THAT(ledger.Accept({0, 10}, std::nullopt, ""),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("10 batches per epoch (0..9)")));
  MustAccept(ledger, {1, 5});
  EXPECT_THAT(ledger.Accept({1, 5}, std::nullopt, ""),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("already outstanding")));
  // The same index of another epoch is another batch.
  MustAccept(ledger, {2, 5});
  EXPECT_THAT(ledger.Accept({0, 1}, std::nullopt, "batchd is draining"),
              StatusIs(absl::StatusCode::kUnavailable,
                       "batchd is draining"));
  EXPECT_EQ(ledger.outstanding(), 2u);
}

TEST(StreamLedgerTest, ChecksTheShapeOfRequestsAndCancels) {
  StreamLedger ledger = OpenLedger(/*window=*/2);
  EXPECT_OK(ledger.CheckRequest(/*batches=*/2, /*slots=*/0));
  EXPECT_OK(ledger.CheckRequest(/*batches=*/2, /*slots=*/2));
  EXPECT_THAT(ledger.CheckRequest(3, 0),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("the window is 2")));
  EXPECT_THAT(ledger.CheckRequest(2, 1),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("one slot per batch")));
  EXPECT_OK(ledger.CheckCancel(2));
  EXPECT_THAT(ledger.CheckCancel(3),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("at most window=2")));
}

TEST(StreamLedgerTest, CancelWhileBuildingIsAnsweredWhenTheBatchComesBack) {
  StreamLedger ledger = OpenLedger(/*window=*/2);
  StreamLedger::Grant grant = MustAccept(ledger, {0, 1});
  EXPECT_EQ(ledger.Cancel({0, 1}), Cancelled::kBuilding);
  EXPECT_TRUE(grant.cancelled->load());  // the pipeline stops its work
  EXPECT_EQ(ledger.outstanding(), 1u);   // still holds its window place
  // Built anyway (the flag came too late) or given back unbuilt: both are
  // answered CANCELLED and free the window.
  EXPECT_EQ(ledger.BatchBuilt({0, 1}, /*built=*/true), Built::kAnswerCancelled);
  EXPECT_TRUE(ledger.idle());
  EXPECT_THAT(StreamLedger::CancelledAnswer(),
              StatusIs(absl::StatusCode::kCancelled,
                       "cancelled at the client's request"));

  MustAccept(ledger, {0, 2});
  ledger.Cancel({0, 2});
  EXPECT_EQ(ledger.BatchBuilt({0, 2}, /*built=*/false),
            Built::kAnswerCancelled);
  EXPECT_TRUE(ledger.idle());
}

TEST(StreamLedgerTest, CancelOfAQueuedBatchWithdrawsIt) {
  StreamLedger ledger = OpenLedger(/*window=*/1);
  MustAccept(ledger, {0, 4});
  ASSERT_EQ(ledger.BatchBuilt({0, 4}, true), Built::kSend);
  EXPECT_EQ(ledger.Cancel({0, 4}), Cancelled::kWithdrawn);
  EXPECT_TRUE(ledger.idle());
  MustAccept(ledger, {0, 5});  // the window place is free again
}

TEST(StreamLedgerTest, CancelAfterTheHeaderSendsTheBatchWhole) {
  StreamLedger ledger = OpenLedger(/*window=*/1);
  MustAccept(ledger, {0, 4});
  ASSERT_EQ(ledger.BatchBuilt({0, 4}, true), Built::kSend);
  ledger.HeaderSent({0, 4});
  EXPECT_EQ(ledger.Cancel({0, 4}), Cancelled::kSentWhole);
  // Its chunks keep going out; the last one completes it.
  EXPECT_EQ(ledger.outstanding(), 1u);
  ledger.Completed({0, 4});
  EXPECT_TRUE(ledger.idle());
}

TEST(StreamLedgerTest, LateCancelAndLateCompletionAreIgnored) {
  StreamLedger ledger = OpenLedger(/*window=*/2);
  MustAccept(ledger, {0, 0});
  ASSERT_EQ(ledger.BatchBuilt({0, 0}, true), Built::kSend);
  ledger.HeaderSent({0, 0});
  ledger.Completed({0, 0});
  // The batch arrived before the client's cancel did.
  EXPECT_EQ(ledger.Cancel({0, 0}), Cancelled::kUnknown);
  EXPECT_EQ(ledger.Cancel({7, 7}), Cancelled::kUnknown);

  // A batch withdrawn while queued, whose completion comes late.
  MustAccept(ledger, {0, 1});
  ASSERT_EQ(ledger.BatchBuilt({0, 1}, true), Built::kSend);
  ASSERT_EQ(ledger.Cancel({0, 1}), Cancelled::kWithdrawn);
  EXPECT_EQ(ledger.BatchBuilt({0, 1}, true), Built::kDrop);
  ledger.Completed({0, 1});
  EXPECT_TRUE(ledger.idle());
}

TEST(StreamLedgerTest, CloseDropsOutstandingBatchesAndLateOnesAfterIt) {
  StreamLedger ledger = OpenLedger(/*window=*/3);
  MustAccept(ledger, {0, 0});
  MustAccept(ledger, {0, 1});
  ASSERT_EQ(ledger.BatchBuilt({0, 1}, true), Built::kSend);
  EXPECT_EQ(ledger.Close(), 2u);
  EXPECT_TRUE(ledger.idle());
  // The pipeline finishing a batch after the stream ended.
  EXPECT_EQ(ledger.BatchBuilt({0, 0}, true), Built::kDrop);
  EXPECT_EQ(ledger.Cancel({0, 1}), Cancelled::kUnknown);
  EXPECT_EQ(ledger.Close(), 0u);
}

TEST(StreamLedgerTest, BudgetIsGivenBackOnce) {
  StreamLedger ledger = OpenLedger(/*window=*/3);
  EXPECT_EQ(ledger.TakeReservedBytes(), 3 * kBatchBytes);
  EXPECT_EQ(ledger.TakeReservedBytes(), 0u);
}

TEST(StreamLedgerTest, SharedMemoryAttachesOnlyBeforeTheFirstRequest) {
  StreamLedger ledger = OpenLedger(/*window=*/2);
  ledger.CountRequest();
  EXPECT_THAT(ledger.AttachSharedMemory(/*slots=*/4),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("before the first BatchRequest")));
  EXPECT_FALSE(ledger.shared_memory());
  EXPECT_THAT(ledger.Accept({0, 0}, /*slot=*/0, ""),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("no shared memory is attached")));
}

TEST(StreamLedgerTest, ARingOfMoreSlotsThanTheWindowIsRefused) {
  StreamLedger ledger = OpenLedger(/*window=*/1);
  EXPECT_THAT(ledger.AttachSharedMemory(/*slots=*/64),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("a ring of 64 slots, but this stream's "
                                 "granted window (PlanOpened.window) is 1")));
  EXPECT_FALSE(ledger.shared_memory());
  EXPECT_OK(ledger.AttachSharedMemory(/*slots=*/1));
}

TEST(StreamLedgerTest, SlotGrantsFollowTheirBatches) {
  StreamLedger ledger = OpenLedger(/*window=*/3);
  ASSERT_OK(ledger.AttachSharedMemory(/*slots=*/2));
  // The ring's pages are the daemon's too: the reservation stays whole.
  EXPECT_EQ(ledger.TakeReservedBytes(), 3 * kBatchBytes);
  ledger.CountRequest();

  EXPECT_THAT(ledger.Accept({0, 0}, std::nullopt, ""),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("name a slot for each batch")));
  EXPECT_THAT(ledger.Accept({0, 0}, /*slot=*/2, ""),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("slot 2 is beyond the attached ring's 2 "
                                 "slots (0..1)")));
  absl::StatusOr<StreamLedger::Grant> grant = ledger.Accept({0, 0}, 1, "");
  ASSERT_OK(grant);
  EXPECT_EQ(grant->slot, std::optional<uint32_t>(1));
  EXPECT_THAT(ledger.Accept({0, 1}, /*slot=*/1, ""),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("slot 1 is already granted")));

  // The header of a shared-memory batch completes it: the slot is free.
  ASSERT_EQ(ledger.BatchBuilt({0, 0}, true), Built::kSend);
  ledger.HeaderSent({0, 0});
  ledger.Completed({0, 0});
  EXPECT_OK(ledger.Accept({0, 1}, /*slot=*/1, ""));
}

TEST(StreamLedgerTest, WithdrawingABatchRevokesItsSlotGrant) {
  StreamLedger ledger = OpenLedger(/*window=*/2);
  ASSERT_OK(ledger.AttachSharedMemory(/*slots=*/1));
  ASSERT_OK(ledger.Accept({0, 0}, /*slot=*/0, ""));
  EXPECT_THAT(ledger.Accept({0, 1}, /*slot=*/0, ""),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("already granted")));
  ledger.Cancel({0, 0});
  ASSERT_EQ(ledger.BatchBuilt({0, 0}, /*built=*/false),
            Built::kAnswerCancelled);
  // The daemon writes the slot no more: it may be granted again.
  EXPECT_OK(ledger.Accept({0, 1}, /*slot=*/0, ""));
}

}  // namespace
}  // namespace batchd::server
