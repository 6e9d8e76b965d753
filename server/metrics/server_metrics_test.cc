#include "server/metrics/server_metrics.h"

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace batchd::server {
namespace {

// Keeps what WriteStatus writes: sample values by "name{k=v,...}", and
// each family's type.
class Recorder : public MetricWriter {
 public:
  void Begin(const std::string& name, const std::string& help,
             Type type) override {
    EXPECT_FALSE(help.empty()) << name;
    EXPECT_EQ(types.count(name), 0u) << name << " begun twice";
    family_ = name;
    types[name] = type;
  }
  void Sample(const std::vector<std::pair<std::string, std::string>>& labels,
              double value) override {
    std::string key = family_;
    if (!labels.empty()) {
      key += "{";
      for (size_t i = 0; i < labels.size(); ++i) {
        if (i > 0) key += ",";
        key += labels[i].first + "=" + labels[i].second;
      }
      key += "}";
    }
    values[key] = value;
  }

  std::map<std::string, double> values;
  std::map<std::string, Type> types;

 private:
  std::string family_;
};

batchd::v1::ServerStatus CacheStatus() {
  batchd::v1::ServerStatus status;
  batchd::v1::ShardCacheStatus& cache = *status.mutable_shard_cache();
  cache.set_disk_limit_bytes(70'000'000);
  cache.set_hits(290);
  cache.set_misses(1'482);
  cache.set_uncached_reads(210);
  cache.set_downloaded_bytes(45'600'000'000);
  cache.set_whole_choices(1'482);
  cache.set_range_choices(200);
  cache.set_prefetches_declined(7);
  cache.set_served_bytes(235'000'000);
  cache.set_range_bytes(24'000'000);
  cache.set_forecast_shard_bytes(256'000'000);
  cache.set_forecast_reads(4'096);
  cache.set_prefetches_in_flight(2);
  cache.set_prefetch_depth_reads(150);
  cache.set_range_prefetches(120);
  cache.set_range_prefetch_hits(110);
  cache.set_range_prefetches_unread(4);
  cache.set_range_prefetches_dropped(3);
  return status;
}

TEST(ServerMetricsTest, ShardCacheSeriesGiveHitRateAndAmplification) {
  Recorder r;
  ServerMetrics::WriteStatus(CacheStatus(), 0, r);
  using Type = MetricWriter::Type;
  EXPECT_EQ(r.values.at("batchd_shard_cache_served_bytes_total"), 235e6);
  EXPECT_EQ(r.types.at("batchd_shard_cache_served_bytes_total"),
            Type::kCounter);
  EXPECT_EQ(r.values.at("batchd_shard_cache_range_bytes_total"), 24e6);
  EXPECT_EQ(r.types.at("batchd_shard_cache_range_bytes_total"),
            Type::kCounter);
  EXPECT_EQ(r.values.at("batchd_shard_cache_forecast_shard_bytes"), 256e6);
  EXPECT_EQ(r.types.at("batchd_shard_cache_forecast_shard_bytes"),
            Type::kGauge);
  EXPECT_EQ(r.values.at("batchd_shard_cache_forecast_reads"), 4096);
  EXPECT_EQ(r.values.at("batchd_shard_cache_prefetches_in_flight"), 2);
  EXPECT_EQ(r.types.at("batchd_shard_cache_prefetches_in_flight"),
            Type::kGauge);
  EXPECT_EQ(r.values.at("batchd_shard_cache_prefetch_depth_reads"), 150);
  EXPECT_EQ(r.values.at("batchd_shard_cache_fetch_choices_total{choice=whole}"),
            1482);
  EXPECT_EQ(
      r.values.at("batchd_shard_cache_fetch_choices_total{choice=ranges}"),
      200);
  EXPECT_EQ(
      r.values.at("batchd_shard_cache_prefetches_total{result=declined}"), 7);
  EXPECT_EQ(r.values.at(
                "batchd_shard_cache_range_prefetches_total{result=queued}"),
            120);
  EXPECT_EQ(
      r.values.at("batchd_shard_cache_range_prefetches_total{result=read}"),
      110);
  EXPECT_EQ(
      r.values.at("batchd_shard_cache_range_prefetches_total{result=unread}"),
      4);
  EXPECT_EQ(r.values.at(
                "batchd_shard_cache_range_prefetches_total{result=dropped}"),
            3);

  // The documented formulas (docs/observability.md) over these series.
  double reads = 0;
  for (const char* result : {"hit", "ram_hit", "miss", "uncached"}) {
    reads += r.values.at(std::string("batchd_shard_cache_reads_total{result=") +
                         result + "}");
  }
  EXPECT_DOUBLE_EQ(
      (r.values.at("batchd_shard_cache_reads_total{result=hit}") +
       r.values.at("batchd_shard_cache_reads_total{result=ram_hit}")) /
          reads,
      290.0 / 1982.0);
  EXPECT_DOUBLE_EQ(
      (r.values.at("batchd_shard_cache_downloaded_bytes_total") +
       r.values.at("batchd_shard_cache_range_bytes_total")) /
          r.values.at("batchd_shard_cache_served_bytes_total"),
      (45.6e9 + 24e6) / 235e6);
}

TEST(ServerMetricsTest, NoShardCacheSeriesWithoutTheCache) {
  Recorder r;
  ServerMetrics::WriteStatus(batchd::v1::ServerStatus(), 0, r);
  for (const auto& [name, type] : r.types) {
    EXPECT_EQ(name.rfind("batchd_shard_cache_", 0), std::string::npos)
        << name;
  }
  EXPECT_GT(r.values.count("batchd_workers"), 0u);
}

}  // namespace
}  // namespace batchd::server
