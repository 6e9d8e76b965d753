#include "server/storage/shard_cache.h"

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/storage/fake_object_store_test_util.h"
#include "server/storage/shard_cache_files.h"
#include "server/storage/shard_cache_test_util.h"
#include "testing/status_matchers.h"

namespace batchd::server {
namespace {

using namespace shard_cache_testing;  // NOLINT
using ::batchd::testing::StatusIs;
using ::testing::HasSubstr;

TEST(PrefetchThreadsForTest, HalfTheConnectionsInDownloadsBounded) {
  EXPECT_EQ(PrefetchThreadsFor(/*connections=*/32, /*chunks_in_flight=*/4), 4);
  EXPECT_EQ(PrefetchThreadsFor(/*connections=*/1, /*chunks_in_flight=*/4), 1);
  EXPECT_EQ(PrefetchThreadsFor(/*connections=*/1000, /*chunks_in_flight=*/4),
            16);
  EXPECT_EQ(PrefetchThreadsFor(/*connections=*/8, /*chunks_in_flight=*/0), 4);
}

TEST_F(ShardCacheTest, ReadsDownloadOnceThenHit) {
  const std::vector<ObjectInfo> infos = PutShards(1);
  ASSERT_OK_AND_ASSIGN(auto cache, ShardCache::Open(Options(4 * kShardBytes)));
  ExpectRead(*cache, infos[0], 0, 100, 1000);
  const uint64_t reads = store_->reads();
  EXPECT_EQ(reads, kShardBytes / (16 << 10));  // whole shard, in chunks
  ExpectRead(*cache, infos[0], 0, 5000, 20000);
  EXPECT_EQ(store_->reads(), reads);
  const ShardCacheStats stats = cache->stats();
  EXPECT_EQ(stats.downloads, 1);
  EXPECT_EQ(stats.misses, 1);
  EXPECT_EQ(stats.hits, 1);
  EXPECT_EQ(stats.disk_bytes, kShardBytes);
  EXPECT_EQ(stats.shards, 1);
  EXPECT_TRUE(cache->Contains(infos[0]));
}

TEST_F(ShardCacheTest, BoundHoldsWithDatasetFourTimesTheCache) {
  const int kShards = 16;
  const std::vector<ObjectInfo> infos = PutShards(kShards);
  const uint64_t bound = 4 * kShardBytes;
  ASSERT_OK_AND_ASSIGN(auto cache, ShardCache::Open(Options(bound)));

  std::atomic<bool> done{false};
  std::atomic<uint64_t> max_on_disk{0};
  std::thread watcher([&] {
    while (!done.load()) {
      const uint64_t now = BytesOnDisk(dir_);
      if (now > max_on_disk.load()) max_on_disk.store(now);
    }
  });
  std::vector<std::thread> readers;
  for (int t = 0; t < 4; ++t) {
    readers.emplace_back([&, t] {
      std::mt19937 rng(t);
      for (int i = 0; i < 60; ++i) {
        const int s = rng() % kShards;
        const uint64_t offset = rng() % (kShardBytes - 100);
        ExpectRead(*cache, infos[s], s, offset, 100);
        EXPECT_LE(BytesOnDisk(dir_), bound);
        EXPECT_LE(cache->stats().disk_bytes, bound);
      }
    });
  }
  for (std::thread& reader : readers) reader.join();
  done.store(true);
  watcher.join();
  EXPECT_LE(max_on_disk.load(), bound);
  const ShardCacheStats stats = cache->stats();
  EXPECT_GT(stats.evictions, 0);
  EXPECT_LE(stats.shards, 4);
  EXPECT_EQ(stats.disk_limit, bound);
}

TEST_F(ShardCacheTest, RestartReusesTheCacheAndAChangedEtagInvalidates) {
  std::vector<ObjectInfo> infos = PutShards(3);
  {
    ASSERT_OK_AND_ASSIGN(auto cache, ShardCache::Open(Options(4 * kShardBytes)));
    for (int i = 0; i < 3; ++i) ExpectRead(*cache, infos[i], i, 0, 10);
  }
  const uint64_t reads = store_->reads();
  {
    ASSERT_OK_AND_ASSIGN(auto cache, ShardCache::Open(Options(4 * kShardBytes)));
    EXPECT_EQ(cache->stats().shards, 3);
    for (int i = 0; i < 3; ++i) ExpectRead(*cache, infos[i], i, 7, 1000);
    EXPECT_EQ(store_->reads(), reads);  // no downloads
    EXPECT_EQ(cache->stats().hits, 3);
    EXPECT_EQ(cache->stats().downloads, 0);
  }
  // Shard 1 changes: its new ETag is another file; the new bytes are read.
  store_->Put(Url(1), RandomBytes(kShardBytes, 100));
  const ObjectInfo changed = *store_->Stat(Url(1));
  ASSERT_NE(changed.etag, infos[1].etag);
  {
    ASSERT_OK_AND_ASSIGN(auto cache, ShardCache::Open(Options(4 * kShardBytes)));
    ExpectRead(*cache, changed, 100, 0, 500);
    EXPECT_EQ(cache->stats().downloads, 1);
    EXPECT_FALSE(cache->Contains(ObjectInfo{Url(7), kShardBytes, "x"}));
  }
}

TEST_F(ShardCacheTest, ChangeDuringDownloadIsFailedPreconditionNamingTheUrl) {
  std::vector<ObjectInfo> infos = PutShards(1);
  store_->Put(Url(0), RandomBytes(kShardBytes, 5));  // ETag moves on
  ASSERT_OK_AND_ASSIGN(auto cache, ShardCache::Open(Options(4 * kShardBytes)));
  std::string got(10, '\0');
  EXPECT_THAT(cache->Read(store_, infos[0], 0, 10,
                          reinterpret_cast<uint8_t*>(got.data())),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr(Url(0))));
  EXPECT_EQ(FilesIn(dir_), 0);  // no temporary file left behind
  EXPECT_EQ(cache->stats().download_failures, 1);
  EXPECT_EQ(cache->stats().disk_bytes, 0);
}

TEST_F(ShardCacheTest, FailedDownloadLeavesNothingAndIsRetried) {
  std::vector<ObjectInfo> infos = PutShards(1);
  ASSERT_OK_AND_ASSIGN(auto cache, ShardCache::Open(Options(4 * kShardBytes)));
  store_->FailNextReads(1, absl::UnavailableError("503 from s3"));
  std::string got(10, '\0');
  EXPECT_THAT(cache->Read(store_, infos[0], 0, 10,
                          reinterpret_cast<uint8_t*>(got.data())),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("503")));
  EXPECT_EQ(FilesIn(dir_), 0);
  ExpectRead(*cache, infos[0], 0, 0, 10);
}

TEST_F(ShardCacheTest, ConcurrentReadersOfOneShardShareOneDownload) {
  std::vector<ObjectInfo> infos = PutShards(1);
  store_->set_read_latency(absl::Milliseconds(20));
  ASSERT_OK_AND_ASSIGN(auto cache, ShardCache::Open(Options(4 * kShardBytes)));
  std::vector<std::thread> readers;
  for (int t = 0; t < 6; ++t) {
    readers.emplace_back(
        [&, t] { ExpectRead(*cache, infos[0], 0, t * 1000, 1000); });
  }
  for (std::thread& reader : readers) reader.join();
  EXPECT_EQ(store_->reads(), kShardBytes / (16 << 10));
  EXPECT_EQ(cache->stats().downloads, 1);
  EXPECT_EQ(cache->stats().hits + cache->stats().misses, 6);
}

TEST_F(ShardCacheTest, ShardLargerThanTheCacheIsReadByRange) {
  std::vector<ObjectInfo> infos = PutShards(1);
  ASSERT_OK_AND_ASSIGN(auto cache, ShardCache::Open(Options(kShardBytes / 2)));
  ExpectRead(*cache, infos[0], 0, 300, 200);
  EXPECT_EQ(store_->reads(), 1);
  EXPECT_EQ(store_->bytes_read(), 200);
  EXPECT_EQ(cache->stats().uncached_reads, 1);
  EXPECT_EQ(FilesIn(dir_), 0);
}

TEST_F(ShardCacheTest, RamTierServesSmallShardsFromMemory) {
  std::vector<ObjectInfo> infos = PutShards(3);
  ShardCacheOptions options = Options(4 * kShardBytes);
  options.ram_bytes = 8 * kShardBytes;  // shards up to 2 * kShardBytes
  ASSERT_OK_AND_ASSIGN(auto cache, ShardCache::Open(options));
  ExpectRead(*cache, infos[0], 0, 0, 100);
  // Gone from disk behind the cache's back: only RAM can answer.
  fs::remove(fs::path(dir_) / ShardFileName(infos[0]));
  ExpectRead(*cache, infos[0], 0, 200, 100);
  ShardCacheStats stats = cache->stats();
  EXPECT_EQ(stats.ram_hits, 1);
  EXPECT_EQ(stats.ram_bytes, kShardBytes);
  EXPECT_EQ(stats.ram_limit, 8 * kShardBytes);
}

TEST_F(ShardCacheTest, RamTierIsBoundedLeastRecentlyUsedFirst) {
  std::vector<ObjectInfo> infos = PutShards(5);
  ShardCacheOptions options = Options(8 * kShardBytes);
  options.ram_bytes = 4 * kShardBytes;  // four shards of kShardBytes
  ASSERT_OK_AND_ASSIGN(auto cache, ShardCache::Open(options));
  for (int i = 0; i < 5; ++i) ExpectRead(*cache, infos[i], i, 0, 100);
  EXPECT_EQ(cache->stats().ram_bytes, 4 * kShardBytes);
  // 1..4 are in RAM, 0 went first.
  for (int i = 1; i < 5; ++i) ExpectRead(*cache, infos[i], i, 0, 100);
  EXPECT_EQ(cache->stats().ram_hits, 4);
  ExpectRead(*cache, infos[0], 0, 0, 100);  // from disk; pushes out 1
  EXPECT_EQ(cache->stats().ram_hits, 4);
  ExpectRead(*cache, infos[4], 4, 0, 100);
  EXPECT_EQ(cache->stats().ram_hits, 5);
  ExpectRead(*cache, infos[1], 1, 0, 100);
  EXPECT_EQ(cache->stats().ram_hits, 5);
  EXPECT_EQ(cache->stats().ram_bytes, 4 * kShardBytes);

  // A shard above a quarter of the RAM tier stays on disk only.
  options.ram_bytes = 2 * kShardBytes;
  options.dir = dir_ + "-2";
  cache.reset();
  ASSERT_OK_AND_ASSIGN(cache, ShardCache::Open(options));
  ExpectRead(*cache, infos[0], 0, 0, 100);
  EXPECT_EQ(cache->stats().ram_bytes, 0);
  fs::remove_all(dir_ + "-2");
}

TEST_F(ShardCacheTest, PrefetchDownloadsInTheBackground) {
  std::vector<ObjectInfo> infos = PutShards(2);
  ASSERT_OK_AND_ASSIGN(auto cache, ShardCache::Open(Options(4 * kShardBytes)));
  cache->Prefetch(store_, infos[1]);
  cache->Prefetch(store_, infos[1]);  // already queued: nothing more
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (!cache->Contains(infos[1]) && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_TRUE(cache->Contains(infos[1]));
  const uint64_t reads = store_->reads();
  ExpectRead(*cache, infos[1], 1, 10, 10);
  EXPECT_EQ(store_->reads(), reads);
  const ShardCacheStats stats = cache->stats();
  EXPECT_EQ(stats.prefetches, 1);
  EXPECT_EQ(stats.hits, 1);
  EXPECT_EQ(stats.downloads, 1);
}

TEST_F(ShardCacheTest, PrefetchesHoldAtMostHalfTheCacheAndEvictNoPins) {
  std::vector<ObjectInfo> infos = PutShards(6);
  ShardCacheOptions options = Options(4 * kShardBytes);
  options.prefetch_threads = 1;
  ASSERT_OK_AND_ASSIGN(auto cache, ShardCache::Open(options));
  for (int i = 0; i < 6; ++i) cache->Prefetch(store_, infos[i]);
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (absl::Now() < deadline) {
    const ShardCacheStats stats = cache->stats();
    if (stats.downloads + stats.prefetches_dropped >= 6) break;
    absl::SleepFor(absl::Milliseconds(5));
  }
  const ShardCacheStats stats = cache->stats();
  EXPECT_EQ(stats.downloads, 2);  // half of 4 shards' room
  EXPECT_EQ(stats.prefetches_dropped, 4);
  EXPECT_EQ(stats.evictions, 0);
  EXPECT_TRUE(cache->Contains(infos[0]));
  EXPECT_TRUE(cache->Contains(infos[1]));
  EXPECT_LE(BytesOnDisk(dir_), 4 * kShardBytes);
}

TEST_F(ShardCacheTest, OpenRejectsAZeroBoundAndCleansTemporaryFiles) {
  EXPECT_THAT(ShardCache::Open(Options(0)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(dir_)));
  {
    std::FILE* f = std::fopen((dir_ + "/abc.shard.tmp.1.2").c_str(), "w");
    std::fputs("partial", f);
    std::fclose(f);
    // A shard file shorter than its name says is dropped too.
    f = std::fopen((dir_ + "/0123456789abcdef-100.shard").c_str(), "w");
    std::fputs("short", f);
    std::fclose(f);
  }
  ASSERT_OK_AND_ASSIGN(auto cache, ShardCache::Open(Options(kShardBytes)));
  EXPECT_EQ(FilesIn(dir_), 0);
  EXPECT_EQ(cache->stats().disk_bytes, 0);
}

TEST_F(ShardCacheTest, RestartWithASmallerBoundEvictsDownToIt) {
  std::vector<ObjectInfo> infos = PutShards(4);
  {
    ASSERT_OK_AND_ASSIGN(auto cache, ShardCache::Open(Options(4 * kShardBytes)));
    for (int i = 0; i < 4; ++i) ExpectRead(*cache, infos[i], i, 0, 10);
  }
  ASSERT_OK_AND_ASSIGN(auto cache, ShardCache::Open(Options(2 * kShardBytes)));
  EXPECT_EQ(cache->stats().shards, 2);
  EXPECT_LE(BytesOnDisk(dir_), 2 * kShardBytes);
}

}  // namespace
}  // namespace batchd::server
