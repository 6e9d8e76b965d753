#include "server/stream/buffer_budget.h"

#include "testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace batchd::server {
namespace {

using ::batchd::testing::StatusIs;
using ::testing::HasSubstr;

TEST(BufferBudgetTest, ReservesWhatFitsTheTotalAndTheJob) {
  BufferBudget budget(/*limit=*/1000, /*job_limit=*/600);
  EXPECT_EQ(
      budget.ReserveUpTo("a", "id", /*wanted=*/4, /*unit=*/100).window, 4u);
  // Job "a" has 200 bytes of its share left.
  EXPECT_EQ(budget.ReserveUpTo("a", "id", 4, 100).window, 2u);
  EXPECT_EQ(budget.reserved("a"), 600u);
  // The total has 400 left, whatever job "b"'s share would allow.
  EXPECT_EQ(budget.ReserveUpTo("b", "id", 8, 100).window, 4u);
  EXPECT_EQ(budget.reserved(), 1000u);
  EXPECT_EQ(budget.ReserveUpTo("c", "id", 1, 100).window, 0u);

  budget.Release("a", "id", 600);
  EXPECT_EQ(budget.reserved("a"), 0u);
  EXPECT_EQ(budget.reserved(), 400u);
  EXPECT_EQ(budget.ReserveUpTo("c", "id", 1, 100).window, 1u);
}

TEST(BufferBudgetTest, JobShareIsNeverAboveTheTotal) {
  BufferBudget budget(/*limit=*/500, /*job_limit=*/800);
  EXPECT_EQ(budget.job_limit(), 500u);
}

TEST(BufferBudgetTest, RefusalNamesTheJobShareWhenThatIsWhatIsFull) {
  BufferBudget budget(/*limit=*/1000, /*job_limit=*/300);
  ASSERT_EQ(budget.ReserveUpTo("train", "id", 3, 100).window, 3u);
  EXPECT_EQ(budget.ReserveUpTo("train", "id", 1, 100).window, 0u);
  EXPECT_THAT(budget.Refusal("train", "id", 100),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("job \"train\" holds 300 bytes")));
}

TEST(BufferBudgetTest, RefusalNamesTheWholeBudgetWhenThatIsFull) {
  BufferBudget budget(/*limit=*/1000, /*job_limit=*/600);
  ASSERT_EQ(budget.ReserveUpTo("a", "id", 6, 100).window, 6u);
  ASSERT_EQ(budget.ReserveUpTo("b", "id", 4, 100).window, 4u);
  EXPECT_EQ(budget.ReserveUpTo("c", "id", 1, 100).window, 0u);
  EXPECT_THAT(budget.Refusal("c", "id", 100),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("batch buffers are full: a batch of this "
                                 "plan needs 100 bytes, 0 of "
                                 "--max-buffer-bytes=1000 are free")));
}

TEST(BufferBudgetTest, ReservesWhatFitsTheIdentityShare) {
  BufferBudget budget(/*limit=*/1000, /*job_limit=*/1000,
                      /*identity_limit=*/500);
  // Two jobs of one identity share its 500 bytes.
  EXPECT_EQ(budget.ReserveUpTo("a", "host 1", 3, 100).window, 3u);
  EXPECT_EQ(budget.ReserveUpTo("b", "host 1", 3, 100).window, 2u);
  EXPECT_EQ(budget.reserved_by_identity("host 1"), 500u);
  EXPECT_EQ(budget.ReserveUpTo("c", "host 1", 1, 100).window, 0u);
  EXPECT_THAT(budget.Refusal("c", "host 1", 100),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("identity host 1 holds 500 bytes of batch "
                                 "buffers, and a batch of this plan needs 100 "
                                 "bytes, more than its share of 500 bytes "
                                 "(--max-identity-buffer-share")));
  // Another identity has the rest.
  EXPECT_EQ(budget.ReserveUpTo("c", "host 2", 8, 100).window, 5u);
  budget.Release("a", "host 1", 300);
  EXPECT_EQ(budget.reserved_by_identity("host 1"), 200u);
  EXPECT_EQ(budget.reserved("a"), 0u);
}

TEST(BufferBudgetTest, EveryStreamIsChargedTheMinimum) {
  BufferBudget budget(/*limit=*/1000, /*job_limit=*/1000,
                      /*identity_limit=*/500, /*min_stream_bytes=*/100);
  // A 1x1 plan (3 bytes a batch) costs what a stream costs.
  BufferBudget::Reservation tiny = budget.ReserveUpTo("a", "hog", 1, 3);
  EXPECT_EQ(tiny.window, 1u);
  EXPECT_EQ(tiny.bytes, 100u);
  // Above the minimum, the window's bytes.
  BufferBudget::Reservation big = budget.ReserveUpTo("b", "hog", 2, 150);
  EXPECT_EQ(big.window, 2u);
  EXPECT_EQ(big.bytes, 300u);
  // So a hog's tiny streams stop at its share of 500 bytes.
  int streams = 2;
  while (budget.ReserveUpTo("a", "hog", 1, 3).window > 0) ++streams;
  EXPECT_EQ(streams, 3);  // 100 + 300 + 100: 500
  EXPECT_THAT(budget.Refusal("a", "hog", 3),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("a stream is charged at least 100 bytes")));
  budget.Release("a", "hog", 100);
  EXPECT_EQ(budget.reserved_by_identity("hog"), 400u);
}

}  // namespace
}  // namespace batchd::server
