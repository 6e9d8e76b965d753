#include "server/observe/job_stats.h"

#include <string>

#include "gtest/gtest.h"

namespace batchd::server {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1'800'000'000);

std::vector<std::string> Listed(const batchd::v1::ServerStatus& status) {
  std::vector<std::string> names;
  for (const auto& job : status.jobs()) names.push_back(job.job());
  return names;
}

TEST(JobStatsTest, CountsStreamsAndTotals) {
  JobStats stats;
  stats.StreamOpened("a", kStart);
  stats.StreamOpened("a", kStart);
  stats.BatchSent("a", /*images=*/4, /*bytes=*/400, /*substitutions=*/1,
                  kStart);
  stats.StreamClosed("a", kStart);
  batchd::v1::ServerStatus status;
  stats.Fill(&status, kStart);
  ASSERT_EQ(status.jobs_size(), 1);
  EXPECT_EQ(status.jobs(0).streams(), 1u);
  EXPECT_EQ(status.jobs(0).images_sent(), 4u);
  EXPECT_EQ(status.jobs(0).bytes_sent(), 400u);
  EXPECT_EQ(status.jobs(0).substitutions(), 1u);
  EXPECT_EQ(status.retired_jobs(), 0u);
  EXPECT_FALSE(status.has_other_jobs());
}

// A close without an open (a stream refused before it counted) used to
// wrap the gauge to 4294967295.
TEST(JobStatsTest, UnmatchedCloseDoesNotWrap) {
  JobStats stats;
  stats.StreamClosed("never-opened", kStart);
  stats.StreamOpened("a", kStart);
  stats.StreamClosed("a", kStart);
  stats.StreamClosed("a", kStart);
  batchd::v1::ServerStatus status;
  stats.Fill(&status, kStart);
  ASSERT_EQ(status.jobs_size(), 1);
  EXPECT_EQ(status.jobs(0).job(), "a");
  EXPECT_EQ(status.jobs(0).streams(), 0u);
}

TEST(JobStatsTest, RetiresLongestIdleJobsIntoOther) {
  JobStats stats(/*max_idle_jobs=*/2);
  stats.StreamOpened("active", kStart);
  for (int i = 0; i < 5; ++i) {
    const std::string job = "job-" + std::to_string(i);
    const absl::Time t = kStart + absl::Seconds(i);
    stats.StreamOpened(job, t);
    stats.BatchSent(job, /*images=*/10, /*bytes=*/100, /*substitutions=*/0,
                    t);
    stats.StreamClosed(job, t);
  }
  batchd::v1::ServerStatus status;
  stats.Fill(&status, kStart + absl::Seconds(5));
  // The active job and the two most recently idle.
  EXPECT_EQ(Listed(status),
            (std::vector<std::string>{"active", "job-3", "job-4"}));
  EXPECT_EQ(status.retired_jobs(), 3u);
  EXPECT_EQ(status.other_jobs().job(), kOtherJobs);
  EXPECT_EQ(status.other_jobs().images_sent(), 30u);
  EXPECT_EQ(status.other_jobs().batches_sent(), 3u);
}

TEST(JobStatsTest, ReopenedJobIsNoLongerIdle) {
  JobStats stats(/*max_idle_jobs=*/1);
  stats.StreamOpened("a", kStart);
  stats.StreamClosed("a", kStart);
  stats.StreamOpened("a", kStart + absl::Seconds(1));  // active again
  stats.StreamOpened("b", kStart + absl::Seconds(2));
  stats.StreamClosed("b", kStart + absl::Seconds(2));
  batchd::v1::ServerStatus status;
  stats.Fill(&status, kStart + absl::Seconds(3));
  EXPECT_EQ(Listed(status), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(status.retired_jobs(), 0u);
}

// 32,000 short-lived job names leave at most max_idle_jobs entries.
TEST(JobStatsTest, ManyJobNamesStayBounded) {
  JobStats stats(/*max_idle_jobs=*/64);
  for (int i = 0; i < 32000; ++i) {
    const std::string job = std::string(100, 'x') + std::to_string(i);
    stats.StreamOpened(job, kStart + absl::Milliseconds(i));
    stats.StreamClosed(job, kStart + absl::Milliseconds(i));
  }
  batchd::v1::ServerStatus status;
  stats.Fill(&status, kStart + absl::Seconds(40));
  EXPECT_EQ(status.jobs_size(), 64);
  EXPECT_EQ(status.retired_jobs(), 32000u - 64u);
  EXPECT_LT(status.ByteSizeLong(), 64u * 1024);
}

}  // namespace
}  // namespace batchd::server
