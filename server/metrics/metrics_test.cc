#include "server/metrics/metrics.h"

#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "server/metrics/metrics_http_server.h"

namespace batchd::server {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(MetricsTest, CounterFamilyRendersHelpTypeAndLabelledSamples) {
  MetricsRegistry registry;
  Family<Counter>& rejected = registry.AddCounter(
      "batchd_rejected_requests_total", "Requests refused.", {"code"});
  rejected.With({"INVALID_ARGUMENT"}).Increment();
  rejected.With({"INVALID_ARGUMENT"}).Increment(2);
  rejected.With({"RESOURCE_EXHAUSTED"}).Increment();
  EXPECT_EQ(registry.Render(),
            "# HELP batchd_rejected_requests_total Requests refused.\n"
            "# TYPE batchd_rejected_requests_total counter\n"
            "batchd_rejected_requests_total{code=\"INVALID_ARGUMENT\"} 3\n"
            "batchd_rejected_requests_total{code=\"RESOURCE_EXHAUSTED\"} 1\n");
}

TEST(MetricsTest, UnlabelledGaugeAddsAndSets) {
  MetricsRegistry registry;
  Gauge& gauge = registry.AddGauge("batchd_workers", "Workers.").With({});
  gauge.Set(3);
  gauge.Add(0.5);
  EXPECT_THAT(registry.Render(), HasSubstr("\nbatchd_workers 3.5\n"));
}

TEST(MetricsTest, HistogramBucketsAreCumulativeWithSumAndCount) {
  MetricsRegistry registry;
  Histogram& h = registry
                     .AddHistogram("batchd_stage_seconds", "Stage time.",
                                   {"stage"}, {0.001, 0.01, 0.1})
                     .With({"read"});
  h.Observe(0.0005);
  h.Observe(0.001);  // on a bound: counts in that bucket (le is inclusive)
  h.Observe(0.05);
  h.Observe(7);
  const std::string page = registry.Render();
  EXPECT_THAT(page, HasSubstr(
      "batchd_stage_seconds_bucket{stage=\"read\",le=\"0.001\"} 2\n"
      "batchd_stage_seconds_bucket{stage=\"read\",le=\"0.01\"} 2\n"
      "batchd_stage_seconds_bucket{stage=\"read\",le=\"0.1\"} 3\n"
      "batchd_stage_seconds_bucket{stage=\"read\",le=\"+Inf\"} 4\n"
      "batchd_stage_seconds_sum{stage=\"read\"} 7.0515\n"
      "batchd_stage_seconds_count{stage=\"read\"} 4\n"));
  EXPECT_THAT(page, HasSubstr("# TYPE batchd_stage_seconds histogram\n"));
}

TEST(MetricsTest, LabelValuesAndHelpAreEscaped) {
  MetricsRegistry registry;
  registry.AddCounter("x_total", "a \\ b\nc", {"batchd_job"})
      .With({"q\"uote\\back\nline"})
      .Increment();
  EXPECT_EQ(registry.Render(),
            "# HELP x_total a \\\\ b\\nc\n"
            "# TYPE x_total counter\n"
            "x_total{batchd_job=\"q\\\"uote\\\\back\\nline\"} 1\n");
}

TEST(MetricsTest, ValuesUseTheShortestExactForm) {
  EXPECT_EQ(FormatMetricValue(0.0005), "0.0005");
  EXPECT_EQ(FormatMetricValue(12), "12");
  EXPECT_EQ(FormatMetricValue(1.0 / 3), "0.3333333333333333");
  EXPECT_EQ(FormatMetricValue(1.0 / 0.0), "+Inf");
}

TEST(MetricsTest, RegisteringTwiceReturnsTheSameFamily) {
  MetricsRegistry registry;
  registry.AddCounter("a_total", "A.").With({}).Increment();
  registry.AddCounter("a_total", "A.").With({}).Increment();
  EXPECT_THAT(registry.Render(), HasSubstr("\na_total 2\n"));
}

TEST(MetricsTest, CollectorsRunAtRenderTime) {
  MetricsRegistry registry;
  int calls = 0;
  registry.AddCollector([&calls](MetricWriter& writer) {
    ++calls;
    writer.Begin("batchd_job_streams", "Streams.", MetricWriter::Type::kGauge);
    writer.Sample({{"batchd_job", "a"}}, calls);
  });
  EXPECT_THAT(registry.Render(),
              HasSubstr("batchd_job_streams{batchd_job=\"a\"} 1\n"));
  EXPECT_THAT(registry.Render(),
              HasSubstr("batchd_job_streams{batchd_job=\"a\"} 2\n"));
}

TEST(MetricsTest, ConcurrentUpdatesAreAllCounted) {
  MetricsRegistry registry;
  Counter& counter = registry.AddCounter("c_total", "C.").With({});
  Histogram& histogram =
      registry.AddHistogram("h_seconds", "H.", {}, {1}).With({});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        counter.Increment();
        histogram.Observe(0.5);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(counter.value(), 40000u);
  const Histogram::Snapshot s = histogram.Read();
  EXPECT_EQ(s.count, 40000u);
  EXPECT_DOUBLE_EQ(s.sum, 20000.0);
}

TEST(MetricsTest, ResidentMemoryIsPositive) {
  EXPECT_GT(ProcessResidentBytes(), 1u << 20);
}

TEST(MetricsHttpServerTest, ServesThePageOnAFreePort) {
  MetricsRegistry registry;
  registry.AddCounter("batchd_test_total", "T.").With({}).Increment(5);
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> server =
      MetricsHttpServer::Start(&registry, "127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT((*server)->port(), 0);
  httplib::Client client("127.0.0.1", (*server)->port());
  httplib::Result result = client.Get("/metrics");
  ASSERT_TRUE(result) << httplib::to_string(result.error());
  EXPECT_EQ(result->status, 200);
  EXPECT_THAT(result->get_header_value("Content-Type"),
              HasSubstr("version=0.0.4"));
  EXPECT_THAT(result->body, HasSubstr("\nbatchd_test_total 5\n"));
  httplib::Result missing = client.Get("/nope");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  (*server)->Stop();
  (*server)->Stop();  // idempotent
}

TEST(MetricsHttpServerTest, BusyPortIsAClearError) {
  MetricsRegistry registry;
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> first =
      MetricsHttpServer::Start(&registry, "127.0.0.1", 0);
  ASSERT_TRUE(first.ok());
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> second =
      MetricsHttpServer::Start(&registry, "127.0.0.1", (*first)->port());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(second.status().message()),
              HasSubstr("--metrics-port"));
}

}  // namespace
}  // namespace batchd::server
