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
  EXPECT_EQ(budget.ReserveUpTo("a", /*wanted=*/4, /*unit=*/100), 4u);
  // Job "a" has 200 bytes of its share left.
  EXPECT_EQ(budget.ReserveUpTo("a", 4, 100), 2u);
  EXPECT_EQ(budget.reserved("a"), 600u);
  // The total has 400 left, whatever job "b"'s share would allow.
  EXPECT_EQ(budget.ReserveUpTo("b", 8, 100), 4u);
  EXPECT_EQ(budget.reserved(), 1000u);
  EXPECT_EQ(budget.ReserveUpTo("c", 1, 100), 0u);

  budget.Release("a", 600);
  EXPECT_EQ(budget.reserved("a"), 0u);
  EXPECT_EQ(budget.reserved(), 400u);
  EXPECT_EQ(budget.ReserveUpTo("c", 1, 100), 1u);
}

TEST(BufferBudgetTest, JobShareIsNeverAboveTheTotal) {
  BufferBudget budget(/*limit=*/500, /*job_limit=*/800);
  EXPECT_EQ(budget.job_limit(), 500u);
}

TEST(BufferBudgetTest, RefusalNamesTheJobShareWhenThatIsWhatIsFull) {
  BufferBudget budget(/*limit=*/1000, /*job_limit=*/300);
  ASSERT_EQ(budget.ReserveUpTo("train", 3, 100), 3u);
  EXPECT_EQ(budget.ReserveUpTo("train", 1, 100), 0u);
  EXPECT_THAT(budget.Refusal("train", 100),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("job \"train\" holds 300 bytes")));
}

TEST(BufferBudgetTest, RefusalNamesTheWholeBudgetWhenThatIsFull) {
  BufferBudget budget(/*limit=*/1000, /*job_limit=*/600);
  ASSERT_EQ(budget.ReserveUpTo("a", 6, 100), 6u);
  ASSERT_EQ(budget.ReserveUpTo("b", 4, 100), 4u);
  EXPECT_EQ(budget.ReserveUpTo("c", 1, 100), 0u);
  EXPECT_THAT(budget.Refusal("c", 100),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("batch buffers are full: a batch of this "
                                 "plan needs 100 bytes, 0 of "
                                 "--max-buffer-bytes=1000 are free")));
}

}  // namespace
}  // namespace batchd::server
