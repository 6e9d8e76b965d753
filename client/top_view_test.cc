#include "client/top_view.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace batchd::client {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

batchd::v1::ServerStatus Status(uint64_t decoded, double read_s,
                                uint64_t batches) {
  batchd::v1::ServerStatus s;
  s.set_workers(4);
  s.set_busy_fraction(0.5);
  s.set_queued_samples(12);
  s.set_uptime_seconds(3725);
  s.set_samples_decoded(decoded);
  s.set_samples_substituted(2);
  s.mutable_stage_seconds()->set_read(read_s);
  s.mutable_stage_seconds()->set_decode(2 * read_s);
  s.mutable_stage_seconds()->set_send(batches * 0.001);
  batchd::v1::JobStatus* job = s.add_jobs();
  job->set_job("alpha");
  job->set_streams(2);
  job->set_batches_sent(batches);
  job->set_images_per_second(640.5);
  job->set_bytes_per_second(96.3e6);
  job->set_substitutions(1);
  return s;
}

TEST(TopViewTest, RendersDaemonsJobsAndStages) {
  std::vector<DaemonSample> samples = {
      {"localhost:7070", Status(1000, 1.0, 10), absl::Now()},
      {"otherhost:7070", absl::UnavailableError("connection refused"),
       absl::Now()}};
  const std::vector<std::string> lines = RenderTop(samples, nullptr, 80, 24);
  ASSERT_EQ(lines.size(), 8u);
  EXPECT_EQ(lines[0], "batchd top: 2 daemons, 1 reachable");
  EXPECT_THAT(lines[1], StartsWith("DAEMON"));
  EXPECT_EQ(lines[2],
            "localhost:7070           1h02m    4   50%     12    640.5     "
            "96.3      2");
  EXPECT_EQ(lines[3],
            "  ms/img read 1.00 decode 2.00 transform 0.00  ms/batch send "
            "1.00 (avg)");
  // The daemon's verdict (common/daemon_verdict.h), as its live page says.
  EXPECT_EQ(lines[4],
            "  unknown: 2 streams, none with trainer reports; workers 50 % "
            "busy (4 workers)");
  EXPECT_THAT(lines[5], StartsWith("  JOB"));
  EXPECT_THAT(lines[6], StartsWith("  alpha                      2    640.5"));
  EXPECT_EQ(lines[7], "otherhost:7070         unreachable: connection refused");
}

TEST(TopViewTest, ShowsTheAutoscalerAndTheTrainersReports) {
  batchd::v1::ServerStatus status = Status(1000, 1.0, 10);
  batchd::v1::AutoscaleStatus* autoscale = status.mutable_autoscale();
  autoscale->set_enabled(true);
  autoscale->set_min_workers(1);
  autoscale->set_max_workers(8);
  autoscale->set_grows(3);
  autoscale->set_last_change("grow 3 -> 4: job \"alpha\" waits 40 % of its "
                             "time, workers 98 % busy");
  autoscale->set_last_change_seconds_ago(12);
  status.set_capacity_demand_ratio(0.61);
  batchd::v1::TrainerLoad* trainer = status.mutable_jobs(0)->mutable_trainer();
  trainer->set_reporting_streams(2);
  trainer->set_wait_ratio(0.4);
  trainer->set_demand_images_per_second(1066.7);
  std::vector<DaemonSample> samples = {
      {"localhost:7070", status, absl::Now()}};
  const std::vector<std::string> lines = RenderTop(samples, nullptr, 200, 24);
  ASSERT_EQ(lines.size(), 9u);
  // Trainers waiting 40 % with workers half busy; the arrow is ASCII.
  EXPECT_THAT(lines[4],
              StartsWith("  network-bound: job \"alpha\" waits 40 %; "
                         "workers 50 % busy (4 workers) -> the batches"));
  EXPECT_EQ(lines[5],
            "  autoscale 1..8: 3 grows, 0 shrinks, 0 step backs; "
            "demand/capacity 0.61");
  EXPECT_EQ(lines[6],
            "  12s ago: grow 3 -> 4: job \"alpha\" waits 40 % of its time, "
            "workers 98 % busy");
  EXPECT_THAT(lines[7], HasSubstr("WAIT   DEMAND"));
  EXPECT_THAT(lines[8], HasSubstr("  40%   1066.7"));
  // A job whose trainers do not report shows dashes.
  status.mutable_jobs(0)->clear_trainer();
  samples[0].status = status;
  EXPECT_THAT(RenderTop(samples, nullptr, 200, 24)[8],
              HasSubstr("     -        -"));
}

TEST(TopViewTest, WarnsOfAnInsecureDaemon) {
  batchd::v1::ServerStatus insecure = Status(1000, 1.0, 10);
  insecure.mutable_daemon()->mutable_security()->set_insecure(true);
  std::vector<DaemonSample> samples = {
      {"batchd-a:7070", insecure, absl::Now()},
      {"batchd-b:7070", Status(1000, 1.0, 10), absl::Now()}};
  const std::vector<std::string> lines = RenderTop(samples, nullptr, 200, 24);
  int warnings = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].find("WARNING: --insecure") == std::string::npos) continue;
    ++warnings;
    // Under the daemon it is about, before the other daemon's line.
    EXPECT_THAT(lines[i - 3], StartsWith("batchd-a:7070"));
  }
  EXPECT_EQ(warnings, 1);
}

TEST(TopViewTest, StageTimesUseThePreviousPoll) {
  std::vector<DaemonSample> before = {
      {"d", Status(1000, 1.0, 10), absl::Now()}};
  std::vector<DaemonSample> now = {{"d", Status(1500, 3.0, 20), absl::Now()}};
  const std::vector<std::string> lines = RenderTop(now, &before, 100, 24);
  // 2 s of reads over 500 images; 10 ms of sends over 10 batches.
  EXPECT_THAT(lines[3], HasSubstr("read 4.00 decode 8.00"));
  EXPECT_THAT(lines[3], HasSubstr("send 1.00 (now)"));
}

TEST(TopViewTest, ShowsTheAugmentStageOnceTheDaemonAugments) {
  batchd::v1::ServerStatus old_status = Status(1000, 1.0, 10);
  old_status.mutable_stage_seconds()->set_transform(0.5);
  old_status.mutable_stage_seconds()->set_augment(1.5);
  batchd::v1::ServerStatus new_status = Status(1500, 3.0, 20);
  new_status.mutable_stage_seconds()->set_transform(1.0);
  new_status.mutable_stage_seconds()->set_augment(4.0);
  std::vector<DaemonSample> before = {{"d", old_status, absl::Now()}};
  std::vector<DaemonSample> now = {{"d", new_status, absl::Now()}};
  // 2.5 s of augmentation over the poll's 500 images; since start, 1.5 s
  // over 1000.
  EXPECT_EQ(RenderTop(now, &before, 100, 24)[3],
            "  ms/img read 4.00 decode 8.00 transform 1.00 augment 5.00  "
            "ms/batch send 1.00 (now)");
  EXPECT_EQ(RenderTop(before, nullptr, 100, 24)[3],
            "  ms/img read 1.00 decode 2.00 transform 0.50 augment 1.50  "
            "ms/batch send 1.00 (avg)");
}

TEST(TopViewTest, FitsTheTerminal) {
  std::vector<DaemonSample> samples;
  for (int i = 0; i < 10; ++i) {
    samples.push_back({"a-rather-long-daemon-host-name.example.com:7070",
                       Status(100, 0.1, 1), absl::Now()});
  }
  const std::vector<std::string> lines = RenderTop(samples, nullptr, 40, 24);
  ASSERT_EQ(lines.size(), 24u);
  for (const std::string& line : lines) EXPECT_LE(line.size(), 40u);
  EXPECT_THAT(lines.back(), StartsWith("... 29 more lines"));
}

TEST(TopViewTest, FormatsUptime) {
  EXPECT_EQ(FormatUptime(42), "42s");
  EXPECT_EQ(FormatUptime(307), "5m07s");
  EXPECT_EQ(FormatUptime(3725), "1h02m");
  EXPECT_EQ(FormatUptime(266400), "3d02h");
}

TEST(TopViewTest, ShowsHowBatchesWereShared) {
  batchd::v1::ServerStatus status = Status(1000, 1.0, 10);
  batchd::v1::SharedBatchStatus* shared = status.mutable_shared_batches();
  shared->set_enabled(true);
  batchd::v1::PlanSharing* plan = shared->add_plans();
  plan->set_built(10);
  plan->set_retained(30);
  std::vector<DaemonSample> samples = {{"batchd-a:7070", status, absl::Now()}};
  const std::vector<std::string> lines = RenderTop(samples, nullptr, 200, 24);
  EXPECT_THAT(lines, Contains(StartsWith(
                         "  sharing: 40 requests of 1 plan from 10 builds "
                         "(4.00 each)")));
}

TEST(TopViewTest, ShowsTheShardCache) {
  batchd::v1::ServerStatus status = Status(1000, 1.0, 10);
  batchd::v1::ShardCacheStatus* cache = status.mutable_shard_cache();
  cache->set_disk_bytes(64'000'000);
  cache->set_disk_limit_bytes(70'000'000);
  cache->set_hits(300);
  cache->set_misses(100);
  cache->set_uncached_reads(100);
  cache->set_whole_choices(90);
  cache->set_range_choices(100);
  cache->set_downloaded_bytes(380'000'000);
  cache->set_range_bytes(20'000'000);
  cache->set_served_bytes(200'000'000);
  cache->set_forecast_shard_bytes(235'000'000);
  cache->set_prefetches_in_flight(2);
  cache->set_prefetch_depth_reads(150);
  std::vector<DaemonSample> samples = {{"batchd-a:7070", status, absl::Now()}};
  // Wide: one line, after the verdict.
  std::vector<std::string> lines = RenderTop(samples, nullptr, 200, 24);
  const std::string summary =
      "  shard cache: hit 60 %, fetched 2.00x served, 90 whole / 100 ranges; "
      "prefetch 150 reads ahead (2 in flight); holds 64 MB of 70 MB, the "
      "plans read 235 MB";
  ASSERT_GE(lines.size(), 6u);
  EXPECT_THAT(lines[4], StartsWith("  unknown: "));
  EXPECT_EQ(lines[5], summary);
  // 80 columns: hit rate, amplification and choices on the first line,
  // the prefetch depth and the sizes on the next ones, nothing cut.
  lines = RenderTop(samples, nullptr, 80, 24);
  ASSERT_GE(lines.size(), 8u);
  EXPECT_EQ(lines[5],
            "  shard cache: hit 60 %, fetched 2.00x served, 90 whole / 100 "
            "ranges");
  EXPECT_EQ(lines[6], "    prefetch 150 reads ahead (2 in flight)");
  EXPECT_EQ(lines[7], "    holds 64 MB of 70 MB, the plans read 235 MB");
  for (const std::string& line : lines) EXPECT_LE(line.size(), 80u);
  // A daemon without remote shards has no such line.
  status.clear_shard_cache();
  samples = {{"batchd-a:7070", status, absl::Now()}};
  for (const std::string& line : RenderTop(samples, nullptr, 200, 24)) {
    EXPECT_THAT(line, Not(HasSubstr("shard cache")));
  }
}

}  // namespace
}  // namespace batchd::client
