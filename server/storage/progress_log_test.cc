#include "server/storage/progress_log.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace batchd::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

TEST(ProgressLogTest, FormatsCountsRateAndTimeLeft) {
  EXPECT_EQ(ProgressLog::Format("imagenet", "indexing", "shards", 1200, 4800,
                                uint64_t{310} * 1000 * 1000,
                                absl::Seconds(10)),
            "dataset 'imagenet': indexing: 1,200 of 4,800 shards, 310.0 MB "
            "in 10 s (120 shards/s, 31.0 MB/s), about 30 s left");
  // No total: no time left.
  EXPECT_EQ(ProgressLog::Format("d", "listing s3://b/p/", "keys", 200000, 0,
                                5000000, absl::Seconds(5)),
            "dataset 'd': listing s3://b/p/: 200,000 keys, 5.0 MB in 5 s "
            "(40000 keys/s, 1.0 MB/s)");
}

TEST(ProgressLogTest, OneLinePerIntervalAndNoneForAShortStep) {
  absl::Time now = absl::UnixEpoch();
  std::vector<std::string> lines;
  ProgressLog log(
      "d", "HEAD of each shard", "shards", 100, absl::Seconds(5),
      [&now] { return now; },
      [&lines](const std::string& line) { lines.push_back(line); });
  for (int i = 0; i < 10; ++i) {
    now += absl::Milliseconds(400);
    log.Add(1, 0);
  }
  EXPECT_THAT(lines, IsEmpty());  // 4 s: shorter than the interval
  for (int i = 0; i < 40; ++i) {
    now += absl::Milliseconds(400);
    log.Add(1, 0);
  }
  // 20 s in all: a line at 5 s, 10 s, 15 s and 20 s.
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(log.lines(), 4);
  EXPECT_THAT(lines[0], HasSubstr("13 of 100 shards"));
  EXPECT_THAT(lines[3], HasSubstr("50 of 100 shards"));
  EXPECT_THAT(lines[3], HasSubstr("about 20 s left"));
}

}  // namespace
}  // namespace batchd::server
