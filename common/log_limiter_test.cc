#include "common/log_limiter.h"

#include "gtest/gtest.h"

namespace batchd::common {
namespace {

TEST(LogLimiterTest, AllowsABurstPerIntervalAndCountsTheRest) {
  LogLimiter limiter(/*burst=*/3, absl::Seconds(10));
  const absl::Time start = absl::FromUnixSeconds(1000);
  uint64_t dropped = 99;
  int allowed = 0;
  for (int i = 0; i < 1000; ++i) {
    allowed += limiter.Allow(start + absl::Milliseconds(i), &dropped);
  }
  EXPECT_EQ(allowed, 3);
  EXPECT_EQ(dropped, 0u);
  // The next interval: the first line says how many were dropped.
  ASSERT_TRUE(limiter.Allow(start + absl::Seconds(10), &dropped));
  EXPECT_EQ(dropped, 997u);
  ASSERT_TRUE(limiter.Allow(start + absl::Seconds(11), &dropped));
  EXPECT_EQ(dropped, 0u);
}

}  // namespace
}  // namespace batchd::common
