// The pipeline and remote TAR_SHARDS datasets (fake object store): a batch
// job prefetches the shards of the next batches into the shard cache, and a
// shard that changed since indexing is substituted with a reason naming it.
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/dataset/fake_remote_test_util.h"
#include "server/dataset/remote_shards.h"
#include "server/pipeline/pipeline.h"
#include "server/plan/resolved_plan.h"
#include "server/storage/shard_cache.h"
#include "testing/daemon_process.h"
#include "testing/jpeg_synth.h"
#include "testing/status_matchers.h"
#include "testing/tar_builder.h"

namespace batchd::server {
namespace {

using ::testing::HasSubstr;

constexpr int kShards = 6;
constexpr int kPerShard = 4;  // = the batch size: batch k is shard k

std::string ShardUrl(int s) {
  return absl::StrFormat("s3://bucket/data/shard-%02d.tar", s);
}

std::string ShardBytes(int s) {
  TarBuilder tar;
  for (int i = 0; i < kPerShard; ++i) {
    tools::SynthOptions options;
    options.width = 64;
    options.height = 48;
    options.seed = s * 100 + i;
    absl::StatusOr<std::vector<uint8_t>> jpeg = tools::SynthesizeJpeg(options);
    EXPECT_TRUE(jpeg.ok()) << jpeg.status();
    const std::string key = absl::StrFormat("%02d_%02d", s, i);
    tar.AddFile(key + ".jpg", std::string(jpeg->begin(), jpeg->end()));
    tar.AddFile(key + ".cls", absl::StrCat(i % 2));
  }
  tar.Finish();
  return tar.bytes();
}

class PipelinePrefetchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = std::make_shared<FakeObjectStore>();
    for (int s = 0; s < kShards; ++s) store_->Put(ShardUrl(s), ShardBytes(s));
    ShardCacheOptions options;
    options.dir = testing::MakeTempDir("pipeline-prefetch");
    options.disk_bytes = 64 << 20;
    absl::StatusOr<std::unique_ptr<ShardCache>> cache =
        ShardCache::Open(options);
    ASSERT_TRUE(cache.ok()) << cache.status();
    cache_ = *std::move(cache);
    RemoteOptions remote = FakeRemoteOptions(store_);
    remote.cache = cache_;
    batchd::v1::DatasetConfig config;
    config.set_name("remote");
    config.set_path("s3://bucket/data/");
    absl::StatusOr<std::shared_ptr<const Dataset>> dataset =
        LoadDataset(config, remote);
    ASSERT_TRUE(dataset.ok()) << dataset.status();
    dataset_ = *dataset;
    batchd::v1::Plan plan;
    plan.set_dataset("remote");
    plan.set_batch_size(kPerShard);
    plan.set_job("j");
    plan.mutable_pipeline()->mutable_train()->set_size(32);
    absl::StatusOr<std::shared_ptr<const ResolvedPlan>> resolved =
        ResolvePlan(plan, {{"remote", dataset_}}, PlanLimits{});
    ASSERT_TRUE(resolved.ok()) << resolved.status();
    plan_ = *resolved;
  }

  std::unique_ptr<BuiltBatch> Build(Pipeline& pipeline, uint64_t index) {
    absl::Notification done;
    std::unique_ptr<BuiltBatch> out;
    absl::Status started = pipeline.BuildBatch(
        plan_, /*epoch=*/0, index,
        {std::make_shared<std::atomic<bool>>(false),
         std::make_shared<std::atomic<bool>>(false)},
        [&](std::unique_ptr<BuiltBatch> batch) {
          out = std::move(batch);
          done.Notify();
        });
    EXPECT_TRUE(started.ok()) << started;
    done.WaitForNotification();
    return out;
  }

  const ObjectInfo& Object(int s) const {
    return dynamic_cast<const RemoteShards&>(*dataset_->shards()).object(s);
  }

  // Waits (at most 30 s) until shards `want` are in the cache.
  bool WaitCached(const std::vector<int>& want) {
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    for (;;) {
      bool all = true;
      for (int s : want) all = all && cache_->Contains(Object(s));
      if (all) return true;
      if (absl::Now() > deadline) return false;
      absl::SleepFor(absl::Milliseconds(5));
    }
  }

  std::shared_ptr<FakeObjectStore> store_;
  std::shared_ptr<ShardCache> cache_;
  std::shared_ptr<const Dataset> dataset_;
  std::shared_ptr<const ResolvedPlan> plan_;
};

TEST_F(PipelinePrefetchTest, ABatchPrefetchesTheShardsOfTheNextBatches) {
  Pipeline pipeline(PipelineOptions{.workers = 1, .prefetch_batches = 2});
  std::unique_ptr<BuiltBatch> batch = Build(pipeline, 0);
  ASSERT_NE(batch, nullptr);
  EXPECT_THAT(batch->sample_indices,
              ::testing::ElementsAre(0, 1, 2, 3));  // shard 0, unshuffled
  EXPECT_TRUE(batch->substitutions.empty());
  EXPECT_TRUE(WaitCached({0, 1, 2}));
  EXPECT_FALSE(cache_->Contains(Object(3)));
  EXPECT_EQ(cache_->stats().prefetches, 2);

  // The next batch's shard is read from the cache, not the store.
  const uint64_t reads = store_->reads();
  const uint64_t shard_3_reads = store_->reads_of(ShardUrl(3));  // indexing
  batch = Build(pipeline, 1);
  ASSERT_NE(batch, nullptr);
  EXPECT_TRUE(batch->substitutions.empty());
  EXPECT_TRUE(WaitCached({3}));  // batch 1 asked for shards 2 and 3
  EXPECT_EQ(store_->reads() - reads,
            store_->reads_of(ShardUrl(3)) - shard_3_reads);  // its download

  // The last batch has nothing after it.
  batch = Build(pipeline, kShards - 1);
  ASSERT_NE(batch, nullptr);
  EXPECT_LE(cache_->stats().prefetches, 4);
}

// A client's window of batches is accepted at once, then read in order:
// the shard cache's forecast starts at the batch being read, not at the
// last one accepted (whose reads alone would leave out those of the
// batches before it, their shards evicted or read by ranges while in use).
TEST_F(PipelinePrefetchTest, TheForecastStartsAtTheBatchBeingRead) {
  store_->set_read_latency(absl::Milliseconds(300));
  Pipeline pipeline(
      PipelineOptions{.workers = 1, .readers = 1, .prefetch_batches = 0});
  std::atomic<int> built{0};
  for (uint64_t index = 0; index < 5; ++index) {
    ASSERT_OK(pipeline.BuildBatch(
        plan_, /*epoch=*/0, index,
        {std::make_shared<std::atomic<bool>>(false),
         std::make_shared<std::atomic<bool>>(false)},
        [&](std::unique_ptr<BuiltBatch>) { ++built; }));
  }
  // The one reader waits 300 ms for batch 0's shard: the forecast covers
  // the rest of the epoch from batch 0 (24 reads) and the next epoch (24),
  // where one from batch 4, the last accepted, would cover 8 + 24.
  uint64_t forecast_reads = 0;
  for (int i = 0; i < 2000 && forecast_reads == 0; ++i) {
    forecast_reads = cache_->stats().forecast_reads;
    if (forecast_reads == 0) absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(forecast_reads, 2u * kShards * kPerShard);
  EXPECT_EQ(built.load(), 0);
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (built.load() < 5 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(built.load(), 5);
}

TEST_F(PipelinePrefetchTest, NoPrefetchWhenTurnedOff) {
  Pipeline pipeline(PipelineOptions{.workers = 1, .prefetch_batches = 0});
  ASSERT_NE(Build(pipeline, 0), nullptr);
  // The cache's own prefetch by the forecast runs every 50 ms whatever
  // prefetch_batches says: under load it may have fetched shard 1 already.
  const ShardCacheStats stats = cache_->stats();
  EXPECT_EQ(stats.prefetches - stats.forecast_prefetches, 0);
  if (stats.forecast_prefetches == 0) {
    EXPECT_FALSE(cache_->Contains(Object(1)));
  }
}

TEST_F(PipelinePrefetchTest, AChangedShardIsSubstitutedWithAReasonNamingIt) {
  Pipeline pipeline(PipelineOptions{.workers = 1, .prefetch_batches = 0});
  store_->Put(ShardUrl(2), ShardBytes(2));  // new ETag after indexing
  std::unique_ptr<BuiltBatch> batch = Build(pipeline, 2);
  ASSERT_NE(batch, nullptr);
  ASSERT_EQ(batch->substitutions.size(), kPerShard);
  for (const batchd::v1::Substitution& sub : batch->substitutions) {
    EXPECT_EQ(sub.reason(), batchd::v1::READ_ERROR)
        << sub.DebugString();
    EXPECT_THAT(sub.detail(), HasSubstr(ShardUrl(2)));
  }
  EXPECT_EQ(pipeline.counters().samples_substituted, kPerShard);
}

}  // namespace
}  // namespace batchd::server
