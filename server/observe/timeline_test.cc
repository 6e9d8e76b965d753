#include "server/observe/timeline.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/observe/timeline_snapshot.h"

namespace batchd::server {
namespace {

using ::testing::HasSubstr;

const absl::Time kStart = absl::FromUnixSeconds(1800000000);

// The whole timeline as /api/timeline serves it, every job a series.
std::string Json(const Timeline& timeline) {
  return RenderedTimeline(timeline.View(kMaxTimelineMaxJobs),
                          kMaxTimelineMaxJobs)
      .full();
}

batchd::v1::ServerStatus Status(uint64_t decoded, double read_seconds,
                                uint64_t substituted) {
  batchd::v1::ServerStatus status;
  status.set_workers(2);
  status.set_busy_fraction(0.5);
  status.set_samples_decoded(decoded);
  status.set_samples_substituted(substituted);
  status.mutable_stage_seconds()->set_read(read_seconds);
  status.set_max_buffer_bytes(1 << 20);
  return status;
}

batchd::v1::JobStatus* AddJob(batchd::v1::ServerStatus* status,
                              const std::string& name, uint64_t images_sent,
                              double images_per_second) {
  batchd::v1::JobStatus* job = status->add_jobs();
  job->set_job(name);
  job->set_streams(1);
  job->set_images_sent(images_sent);
  job->set_images_per_second(images_per_second);
  return job;
}

TEST(TimelineTest, KeepsTheLastCapacityPoints) {
  Timeline timeline(/*capacity=*/3);
  for (int i = 0; i < 5; ++i) {
    timeline.Add(Status(i, 0, 0), kStart + absl::Seconds(i));
  }
  const std::vector<TimelinePoint> points = timeline.Points();
  ASSERT_EQ(points.size(), 3u);
  EXPECT_EQ(points.front().at, kStart + absl::Seconds(2));
  EXPECT_EQ(points.back().at, kStart + absl::Seconds(4));
}

TEST(TimelineTest, RatesAndStageTimesAreOverTheSecondBefore) {
  Timeline timeline;
  timeline.Add(Status(0, 0, 0), kStart);
  timeline.Add(Status(100, 0.2, 5), kStart + absl::Seconds(1));
  // Nothing decoded in this one: no stage time, zero substitutions.
  timeline.Add(Status(100, 0.2, 5), kStart + absl::Seconds(2));
  const std::vector<TimelinePoint> p = timeline.Points();
  ASSERT_EQ(p.size(), 3u);
  EXPECT_FALSE(p[0].substitutions_per_second.has_value());
  EXPECT_FALSE(p[0].read_ms.has_value());
  ASSERT_TRUE(p[1].read_ms.has_value());
  EXPECT_DOUBLE_EQ(*p[1].read_ms, 2.0);
  EXPECT_DOUBLE_EQ(*p[1].substitutions_per_second, 5.0);
  EXPECT_FALSE(p[2].read_ms.has_value());
  EXPECT_DOUBLE_EQ(*p[2].substitutions_per_second, 0.0);

  const std::string json = Json(timeline);
  EXPECT_THAT(json, HasSubstr("\"t\":[1800000000.000,1800000001.000,"
                              "1800000002.000]"));
  EXPECT_THAT(json, HasSubstr("\"read\":[null,2,null]"));
  EXPECT_THAT(json, HasSubstr("\"substitutions_per_second\":[null,5,0]"));
  EXPECT_THAT(json, HasSubstr("\"busy_percent\":[50,50,50]"));
  EXPECT_THAT(json, HasSubstr("\"buffer_limit_bytes\":[1048576,1048576,"
                              "1048576]"));
}

TEST(TimelineTest, JobsAlignOnTimeWithNullWhereAbsentAndNamesEscaped) {
  Timeline timeline;
  batchd::v1::ServerStatus first = Status(0, 0, 0);
  AddJob(&first, "a", 0, 10);
  timeline.Add(first, kStart);
  batchd::v1::ServerStatus second = Status(0, 0, 0);
  AddJob(&second, "a", 64, 20);
  batchd::v1::JobStatus* b = AddJob(&second, "b\"</script>", 0, 30);
  b->mutable_trainer()->set_reporting_streams(1);
  b->mutable_trainer()->set_wait_ratio(0.25);
  b->mutable_trainer()->set_demand_images_per_second(40);
  second.set_capacity_demand_ratio(0.5);
  timeline.Add(second, kStart + absl::Seconds(1));

  const std::string json = Json(timeline);
  EXPECT_THAT(json, HasSubstr("{\"job\":\"a\",\"images_per_second\":[10,20],"
                              "\"wait_percent\":[null,null],"
                              "\"compute_percent\":[null,null],"
                              "\"demand_images_per_second\":[null,null]}"));
  // A quote is escaped; "</" is written "<\/" so that no job name can end
  // a <script> element the JSON is placed in.
  EXPECT_THAT(json, HasSubstr("{\"job\":\"b\\\"<\\/script>\","
                              "\"images_per_second\":[null,30],"
                              "\"wait_percent\":[null,25],"
                              "\"compute_percent\":[null,75],"
                              "\"demand_images_per_second\":[null,40]}"));
  EXPECT_THAT(json, HasSubstr("\"capacity_images_per_second\":[null,80]"));
  EXPECT_THAT(json, HasSubstr("\"verdict\":{\"t\":1800000001.000,"
                              "\"kind\":\"network-bound\",\"line\":"
                              "\"network-bound: job \\\"b\\\"<\\/script>\\\""
                              " waits 25 %"));
}

TEST(TimelineTest, AutoscaleChangesBecomeMarkers) {
  Timeline timeline;
  batchd::v1::ServerStatus status = Status(0, 0, 0);
  status.mutable_autoscale()->set_enabled(true);
  timeline.Add(status, kStart);
  status.set_workers(3);
  status.mutable_autoscale()->set_grows(1);
  status.mutable_autoscale()->set_last_change("grow 2 -> 3: job \"a\"");
  timeline.Add(status, kStart + absl::Seconds(1));
  timeline.Add(status, kStart + absl::Seconds(2));
  EXPECT_THAT(Json(timeline),
              HasSubstr("\"autoscale\":[{\"t\":1800000001.000,\"workers\":3,"
                        "\"change\":\"grow 2 -> 3: job \\\"a\\\"\"}]"));
}

TEST(TimelineTest, EmptyTimelineHasNoVerdictAndEmptyColumns) {
  Timeline timeline;
  EXPECT_EQ(Json(timeline),
            "{\"since\":null,\"next\":null,\"interval_seconds\":1,"
            "\"capacity\":900,\"max_jobs\":1024,\"other_jobs\":0,"
            "\"verdict\":null,\"shard_cache\":null,"
            "\"t\":[],\"workers\":[],\"busy_percent\":[],"
            "\"queued_samples\":[],\"buffer_reserved_bytes\":[],"
            "\"buffer_idle_bytes\":[],\"buffer_limit_bytes\":[],"
            "\"substitutions_per_second\":[],"
            "\"capacity_images_per_second\":[],\"stage_ms_per_image\":"
            "{\"read\":[],\"decode\":[],\"transform\":[],\"augment\":[],"
            "\"send\":[]},"
            "\"jobs\":[],\"autoscale\":[]}");
}

TEST(TimelineTest, TheNewestPointsShardCacheLineIsServed) {
  Timeline timeline;
  batchd::v1::ServerStatus status = Status(0, 0, 0);
  timeline.Add(status, kStart);
  // No shard cache: null, as for an empty timeline.
  EXPECT_THAT(Json(timeline), HasSubstr("\"shard_cache\":null,\"t\":"));
  batchd::v1::ShardCacheStatus* cache = status.mutable_shard_cache();
  cache->set_disk_bytes(64'000'000);
  cache->set_disk_limit_bytes(70'000'000);
  cache->set_hits(3);
  cache->set_misses(1);
  cache->set_whole_choices(1);
  cache->set_downloaded_bytes(32'000'000);
  cache->set_served_bytes(16'000'000);
  cache->set_forecast_shard_bytes(235'000'000);
  cache->set_prefetch_depth_reads(40);
  timeline.Add(status, kStart + absl::Seconds(1));
  const std::string line =
      "shard cache: hit 75 %, fetched 2.00x served, 1 whole / 0 ranges; "
      "prefetch 40 reads ahead (0 in flight); holds 64 MB of 70 MB, the "
      "plans read 235 MB";
  EXPECT_EQ(timeline.Points().back().shard_cache, line);
  // (Quote writes "/" as "\/".)
  EXPECT_THAT(Json(timeline),
              HasSubstr("\"shard_cache\":{\"t\":1800000001.000,\"line\":"
                        "\"shard cache: hit 75 %, fetched 2.00x served, 1 "
                        "whole \\/ 0 ranges; prefetch 40 reads ahead (0 in "
                        "flight); holds 64 MB of 70 MB, the plans read 235 "
                        "MB\"},\"t\":"));
  // An answer to since= carries it too: the page keeps the newest.
  const RenderedTimeline rendered(timeline.View(kMaxTimelineMaxJobs),
                                  kMaxTimelineMaxJobs);
  EXPECT_THAT(rendered.Json(absl::ToUnixMillis(kStart)),
              HasSubstr("\"shard_cache\":{\"t\":1800000001.000,"));
}

}  // namespace
}  // namespace batchd::server
