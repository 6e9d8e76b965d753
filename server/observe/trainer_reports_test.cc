#include "server/observe/trainer_reports.h"

#include <cmath>
#include <limits>

#include "testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace batchd::server {
namespace {

using ::batchd::testing::StatusIs;
using ::testing::HasSubstr;

batchd::v1::TrainerReport Report(double wait, double compute,
                                 uint64_t batches) {
  batchd::v1::TrainerReport report;
  report.set_wait_seconds(wait);
  report.set_compute_seconds(compute);
  report.set_batches(batches);
  return report;
}

const absl::Time kStart = absl::FromUnixSeconds(1'000'000);

TEST(TrainerReportsTest, SumsAJobsStreams) {
  TrainerReports reports;
  const uint64_t a = reports.Open("job", /*batch_size=*/10, kStart);
  const uint64_t b = reports.Open("job", /*batch_size=*/10, kStart);
  const uint64_t c = reports.Open("other", /*batch_size=*/4, kStart);
  const absl::Time t = kStart + absl::Seconds(1);
  // a: waits 0.5 s of 1 s, 20 images in 0.5 s of compute -> 40 images/s.
  EXPECT_OK(reports.Record(a, Report(0.5, 0.5, 2), /*batches_sent=*/4, t));
  // b: never waits, 10 images in 1 s -> 10 images/s.
  EXPECT_OK(reports.Record(b, Report(0, 1, 1), /*batches_sent=*/4, t));
  auto loads = reports.Loads(t);
  ASSERT_EQ(loads.size(), 1u);  // "other" has not reported
  const batchd::v1::TrainerLoad& job = loads["job"];
  EXPECT_EQ(job.reporting_streams(), 2u);
  EXPECT_DOUBLE_EQ(job.wait_ratio(), 0.25);
  // Two trainers side by side take the sum of their rates.
  EXPECT_DOUBLE_EQ(job.demand_images_per_second(), 50);
  EXPECT_OK(reports.Record(c, Report(0, 0.5, 1), 1, t));
  EXPECT_EQ(reports.Loads(t).size(), 2u);
}

TEST(TrainerReportsTest, ForgetsSilentAndClosedStreams) {
  TrainerReports reports;
  const uint64_t a = reports.Open("job", 8, kStart);
  const uint64_t b = reports.Open("gone", 8, kStart);
  EXPECT_OK(reports.Record(a, Report(0.1, 0.9, 1), 1, kStart + absl::Seconds(1)));
  EXPECT_OK(reports.Record(b, Report(0.1, 0.9, 1), 1, kStart + absl::Seconds(1)));
  reports.Close(b);
  EXPECT_EQ(reports.Loads(kStart + absl::Seconds(1)).count("gone"), 0u);
  EXPECT_EQ(reports.Loads(kStart + absl::Seconds(2)).count("job"), 1u);
  // No report for longer than the window: the trainer stopped counting.
  EXPECT_TRUE(
      reports.Loads(kStart + absl::Seconds(1) + TrainerReports::kWindow +
                    absl::Milliseconds(1))
          .empty());
  reports.Close(12345);  // unknown: ignored
}

TEST(TrainerReportsTest, RejectsImpossibleReports) {
  TrainerReports reports;
  const uint64_t id = reports.Open("job", 8, kStart);
  const absl::Time t = kStart + absl::Seconds(1);
  EXPECT_THAT(reports.Record(id, Report(-1, 0, 0), 0, t),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("must be finite and >= 0")));
  EXPECT_THAT(
      reports.Record(id, Report(std::numeric_limits<double>::quiet_NaN(), 0, 0),
                     0, t),
      StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
  EXPECT_THAT(
      reports.Record(id, Report(0, std::numeric_limits<double>::infinity(), 0),
                     0, t),
      StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
  // One second since the plan opened, plus 2 s of slack: 4 s is too much.
  EXPECT_THAT(reports.Record(id, Report(2, 2, 0), 0, t),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("the plan opened 1 s ago")));
  // More batches than were sent.
  EXPECT_THAT(reports.Record(id, Report(0, 1, 3), /*batches_sent=*/2, t),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("3 batches consumed, but 2 were sent")));
  // None of those moved anything.
  EXPECT_TRUE(reports.Loads(t).empty());
  // The checks are cumulative: reports bunched by the network are fine,
  // claiming the same time twice over is not.
  EXPECT_OK(reports.Record(id, Report(0.5, 2, 2), 2, t));
  EXPECT_THAT(reports.Record(id, Report(0.5, 0.5, 1), 3, t),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
  EXPECT_THAT(reports.Record(id, Report(0, 0, 1), 2, t),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("3 batches consumed")));
  EXPECT_THAT(reports.Record(999, Report(0, 0, 0), 0, t),
              StatusIs(absl::StatusCode::kFailedPrecondition, ::testing::_));
}

TEST(TrainerReportsTest, DemandStaysFiniteWithoutCompute) {
  TrainerReports reports;
  const uint64_t id = reports.Open("job", 100, kStart);
  const absl::Time t = kStart + absl::Seconds(1);
  EXPECT_OK(reports.Record(id, Report(1, 0, 2), 2, t));
  const batchd::v1::TrainerLoad load = reports.Loads(t)["job"];
  EXPECT_NEAR(load.wait_ratio(), 1, 1e-5);
  EXPECT_TRUE(std::isfinite(load.demand_images_per_second()));
  EXPECT_GT(load.demand_images_per_second(), 1e6);
}

}  // namespace
}  // namespace batchd::server
