#include "server/storage/shard_cache.h"

#include <stdlib.h>
#include <sys/stat.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/sampler.h"
#include "server/storage/fake_object_store_test_util.h"
#include "testing/status_matchers.h"

namespace batchd::server {
namespace {

namespace fs = std::filesystem;
using ::batchd::testing::StatusIs;
using ::testing::HasSubstr;

constexpr uint64_t kShardBytes = 64 << 10;

std::string MakeTempDir() {
  const char* base = getenv("TEST_TMPDIR");
  std::string pattern =
      absl::StrCat(base != nullptr ? base : "/tmp", "/shard_cache_XXXXXX");
  EXPECT_NE(mkdtemp(pattern.data()), nullptr);
  return pattern;
}

std::string RandomBytes(uint64_t size, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string bytes(size, '\0');
  for (char& c : bytes) c = static_cast<char>(rng());
  return bytes;
}

std::string Url(int i) { return absl::StrFormat("s3://bucket/shard-%03d.tar", i); }

// Bytes of every file in `dir` (shards, temporary files) now. Counted by
// inode: a listing that races a rename may show one file under both names.
uint64_t BytesOnDisk(const std::string& dir) {
  std::set<ino_t> seen;
  uint64_t total = 0;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    struct stat st;
    if (::stat(it->path().c_str(), &st) == 0 && seen.insert(st.st_ino).second) {
      total += st.st_size;
    }
  }
  return total;
}

size_t FilesIn(const std::string& dir) {
  size_t count = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    (void)entry;
    ++count;
  }
  return count;
}

class ShardCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir();
    store_ = std::make_shared<FakeObjectStore>();
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Puts `count` shards of kShardBytes; returns their infos.
  std::vector<ObjectInfo> PutShards(int count) {
    std::vector<ObjectInfo> infos;
    for (int i = 0; i < count; ++i) {
      store_->Put(Url(i), RandomBytes(kShardBytes, i));
      infos.push_back(*store_->Stat(Url(i)));
    }
    return infos;
  }

  ShardCacheOptions Options(uint64_t disk_bytes) {
    ShardCacheOptions options;
    options.dir = dir_;
    options.disk_bytes = disk_bytes;
    options.chunk_bytes = 16 << 10;
    return options;
  }

  // Reads [offset, offset + size) through `cache` and checks the bytes.
  void ExpectRead(ShardCache& cache, const ObjectInfo& info, int seed,
                  uint64_t offset, uint64_t size) {
    std::string got(size, '\0');
    ASSERT_OK(cache.Read(store_, info, offset, size,
                         reinterpret_cast<uint8_t*>(got.data())));
    EXPECT_EQ(got, RandomBytes(kShardBytes, seed).substr(offset, size));
  }

  std::string dir_;
  std::shared_ptr<FakeObjectStore> store_;
};

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
  fs::remove(fs::path(dir_) / ShardCache::FileName(infos[0]));
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

// The plans' forecast of a dataset of `shards` shards of kMembers members
// each (sample i is member i % kMembers of shard i / kMembers), read in
// `order` one sample a batch.
class ForecastReads {
 public:
  static constexpr uint64_t kMembers = 16;
  static constexpr uint64_t kMemberBytes = kShardBytes / kMembers;
  // A request weighs half a member, as S3's default (64 KiB) weighs against
  // ImageNet's members (about 110 KB).
  static constexpr FetchCosts kCosts{/*request_bytes=*/kMemberBytes / 2,
                                     /*chunk_bytes=*/16 << 10};

  ForecastReads(ShardCache& cache, std::shared_ptr<FakeObjectStore> store,
                const std::vector<ObjectInfo>& shards,
                std::vector<uint64_t> order, FetchCosts costs)
      : demand_(std::make_shared<ShardDemand>(
            [](uint64_t sample) {
              return SampleLocation{static_cast<uint32_t>(sample / kMembers),
                                    kMemberBytes};
            },
            [this] { return now_; })),
        order_(std::make_shared<const std::vector<uint64_t>>(
            std::move(order))) {
    spec_.num_samples = order_->size();
    spec_.batch_size = 1;
    cache.AddForecast(demand_, store, shards, costs.request_bytes);
  }

  // Reads every sample of the order through `cache`, the reader advancing
  // (and the forecast renewed) before each.
  void ReadAll(ShardCache& cache, const std::shared_ptr<FakeObjectStore>& store,
               const std::vector<ObjectInfo>& shards) {
    std::string got(kMemberBytes, '\0');
    for (uint64_t i = 0; i < order_->size(); ++i) {
      demand_->Publish("job/0", spec_, order_, i);
      now_ += absl::Seconds(1);
      const uint64_t sample = (*order_)[i];
      ASSERT_OK(cache.Read(store, shards[sample / kMembers],
                           (sample % kMembers) * kMemberBytes, kMemberBytes,
                           reinterpret_cast<uint8_t*>(got.data())));
      EXPECT_EQ(got, RandomBytes(kShardBytes, sample / kMembers)
                         .substr((sample % kMembers) * kMemberBytes,
                                 kMemberBytes));
    }
  }

  const std::shared_ptr<ShardDemand>& demand() const { return demand_; }

 private:
  absl::Time now_ = absl::UnixEpoch();
  common::ShardSpec spec_;
  std::shared_ptr<ShardDemand> demand_;
  std::shared_ptr<const std::vector<uint64_t>> order_;
};

// Belady's eviction: of two cached shards, the one no plan reads again goes,
// although it was used more recently.
TEST_F(ShardCacheTest, EvictsTheShardNeededFurthestAhead) {
  const std::vector<ObjectInfo> infos = PutShards(3);
  ASSERT_OK_AND_ASSIGN(auto cache, ShardCache::Open(Options(2 * kShardBytes)));
  // Upcoming: shard 2, then shard 1; shard 0 never.
  std::vector<uint64_t> order;
  for (uint64_t shard : {2, 1}) {
    for (uint64_t m = 0; m < ForecastReads::kMembers; ++m) {
      order.push_back(shard * ForecastReads::kMembers + m);
    }
  }
  ForecastReads plan(*cache, store_, infos, order, FetchCosts{/*request_bytes=*/0});
  common::ShardSpec spec;
  spec.num_samples = order.size();
  plan.demand()->Publish(
      "job/0", spec,
      std::make_shared<const std::vector<uint64_t>>(order), 0);
  ExpectRead(*cache, infos[1], 1, 0, 100);  // known: whole
  ExpectRead(*cache, infos[0], 0, 0, 100);  // unknown to the plan: whole
  ASSERT_TRUE(cache->Contains(infos[0]) && cache->Contains(infos[1]));
  ExpectRead(*cache, infos[2], 2, 0, 100);  // least recently used: shard 1
  EXPECT_TRUE(cache->Contains(infos[1]));
  EXPECT_TRUE(cache->Contains(infos[2]));
  EXPECT_FALSE(cache->Contains(infos[0]));
  EXPECT_EQ(cache->stats().evictions, 1u);
}

// A prefetch never evicts a shard the plans need sooner than the one it
// fetches: it is dropped instead (the shard it would have evicted is read
// first, and would be downloaded again). Here the one shard needed later
// is a prefetched shard not read yet, which a prefetch may not evict.
TEST_F(ShardCacheTest, APrefetchEvictsNoShardNeededSooner) {
  const std::vector<ObjectInfo> infos = PutShards(5);
  ShardCacheOptions options = Options(4 * kShardBytes);
  options.prefetch_threads = 1;
  options.plan_interval = absl::Hours(1);  // queued prefetches only
  ASSERT_OK_AND_ASSIGN(auto cache, ShardCache::Open(options));
  auto settle = [&] {
    for (int i = 0; i < 1000 && cache->stats().prefetches_in_flight > 0; ++i) {
      absl::SleepFor(absl::Milliseconds(2));
    }
  };
  // Upcoming: shards 0, 2, 4, 1, 3.
  std::vector<uint64_t> order;
  for (uint64_t shard : {0, 2, 4, 1, 3}) {
    for (uint64_t m = 0; m < ForecastReads::kMembers; ++m) {
      order.push_back(shard * ForecastReads::kMembers + m);
    }
  }
  ForecastReads plan(*cache, store_, infos, order,
                     FetchCosts{/*request_bytes=*/0});
  cache->Prefetch(store_, infos[3]);  // before any forecast: whole
  settle();
  ASSERT_TRUE(cache->Contains(infos[3]));
  common::ShardSpec spec;
  spec.num_samples = order.size();
  plan.demand()->Publish(
      "job/0", spec, std::make_shared<const std::vector<uint64_t>>(order), 0);
  plan.demand()->ForecastNow();  // its clock stands still: rebuild now
  for (int shard : {0, 2, 4}) ExpectRead(*cache, infos[shard], shard, 0, 100);
  // Full. Shard 1, needed after 0, 2 and 4, would be downloaded whole (the
  // cache holds every shard needed up to its reads), but only 0, 2 and 4
  // could make room.
  cache->Prefetch(store_, infos[1]);
  settle();
  const ShardCacheStats stats = cache->stats();
  EXPECT_EQ(stats.prefetches_dropped, 1u);
  EXPECT_EQ(stats.prefetches_declined, 0u);
  EXPECT_EQ(stats.evictions, 0u);
  for (int shard : {0, 2, 3, 4}) {
    EXPECT_TRUE(cache->Contains(infos[shard])) << shard;
  }
  EXPECT_FALSE(cache->Contains(infos[1]));
}

// A per-sample shuffle through a cache of a quarter of the dataset: the
// forecast reads member ranges (about the bytes of the members read), where
// whole shards on every miss fetch the dataset several times over.
TEST_F(ShardCacheTest, PerSampleShuffleReadsMemberRangesWhenTheCacheIsSmall) {
  constexpr int kShards = 8;
  const std::vector<ObjectInfo> infos = PutShards(kShards);
  const std::vector<uint64_t> order = common::EpochOrder(
      kShards * ForecastReads::kMembers, /*seed=*/3, /*shuffle=*/true, 0);
  const uint64_t dataset = kShards * kShardBytes;
  {
    ASSERT_OK_AND_ASSIGN(auto cache,
                         ShardCache::Open(Options(2 * kShardBytes)));
    ForecastReads plan(*cache, store_, infos, order, ForecastReads::kCosts);
    plan.ReadAll(*cache, store_, infos);
    const ShardCacheStats stats = cache->stats();
    EXPECT_GT(stats.range_choices, order.size() / 2);
    EXPECT_LE(store_->bytes_read(), dataset * 12 / 10);
    EXPECT_LE(stats.disk_bytes, 2 * kShardBytes);
  }
  fs::remove_all(dir_);
  const uint64_t forecast_bytes = store_->bytes_read();
  {
    // The same reads with no forecast: least recently used whole shards.
    ASSERT_OK_AND_ASSIGN(auto cache,
                         ShardCache::Open(Options(2 * kShardBytes)));
    std::string got(ForecastReads::kMemberBytes, '\0');
    for (uint64_t sample : order) {
      ASSERT_OK(cache->Read(
          store_, infos[sample / ForecastReads::kMembers],
          (sample % ForecastReads::kMembers) * ForecastReads::kMemberBytes,
          ForecastReads::kMemberBytes,
          reinterpret_cast<uint8_t*>(got.data())));
    }
  }
  const uint64_t lru_bytes = store_->bytes_read() - forecast_bytes;
  EXPECT_GT(lru_bytes, 3 * dataset);
  std::printf("per-sample shuffle, cache 25%%: %.2fx the dataset fetched with "
              "the forecast, %.2fx without\n",
              static_cast<double>(forecast_bytes) / dataset,
              static_cast<double>(lru_bytes) / dataset);
}

// Shard by shard (the shard-aware shuffle's window of one): every shard is
// downloaded whole, once.
TEST_F(ShardCacheTest, ShardByShardReadsDownloadEachShardOnce) {
  constexpr int kShards = 6;
  const std::vector<ObjectInfo> infos = PutShards(kShards);
  common::ShardSpec spec;
  spec.num_samples = kShards * ForecastReads::kMembers;
  spec.shuffle = true;
  spec.shuffle_window_shards = 1;
  spec.shard_samples = std::make_shared<const std::vector<uint64_t>>(
      kShards, ForecastReads::kMembers);
  ASSERT_OK_AND_ASSIGN(auto cache, ShardCache::Open(Options(2 * kShardBytes)));
  ForecastReads plan(*cache, store_, infos, common::EpochOrderFor(spec, 0),
                     ForecastReads::kCosts);
  plan.ReadAll(*cache, store_, infos);
  EXPECT_EQ(store_->bytes_read(), kShards * kShardBytes);
  EXPECT_EQ(cache->stats().downloads, kShards);
  EXPECT_EQ(cache->stats().range_choices, 0u);
}

// A prefetch of a shard the forecast would read by ranges is declined.
TEST_F(ShardCacheTest, PrefetchOfAShardBetterReadByRangesIsDeclined) {
  constexpr int kShards = 8;
  const std::vector<ObjectInfo> infos = PutShards(kShards);
  ShardCacheOptions options = Options(2 * kShardBytes);
  options.prefetch_threads = 1;
  ASSERT_OK_AND_ASSIGN(auto cache, ShardCache::Open(options));
  const std::vector<uint64_t> order = common::EpochOrder(
      kShards * ForecastReads::kMembers, /*seed=*/5, /*shuffle=*/true, 0);
  ForecastReads plan(*cache, store_, infos, order, ForecastReads::kCosts);
  common::ShardSpec spec;
  spec.num_samples = order.size();
  plan.demand()->Publish(
      "job/0", spec, std::make_shared<const std::vector<uint64_t>>(order), 0);
  cache->Prefetch(store_, infos[3]);
  for (int i = 0; i < 500 && cache->stats().prefetches_declined == 0; ++i) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  EXPECT_EQ(cache->stats().prefetches_declined, 1u);
  EXPECT_EQ(store_->bytes_read(), 0u);
  EXPECT_FALSE(cache->Contains(infos[3]));
}

// The members of a shard the forecast reads by ranges are fetched ahead of
// their reads: each read then takes its bytes from memory, and the store
// sees one request per member, no more.
TEST_F(ShardCacheTest, MembersOfAShardReadByRangesAreFetchedAhead) {
  constexpr int kShards = 8;
  const std::vector<ObjectInfo> infos = PutShards(kShards);
  ShardCacheOptions options = Options(2 * kShardBytes);
  options.prefetch_threads = 1;
  options.range_prefetch_threads = 4;
  ASSERT_OK_AND_ASSIGN(auto cache, ShardCache::Open(options));
  const std::vector<uint64_t> order = common::EpochOrder(
      kShards * ForecastReads::kMembers, /*seed=*/5, /*shuffle=*/true, 0);
  ForecastReads plan(*cache, store_, infos, order, ForecastReads::kCosts);
  common::ShardSpec spec;
  spec.num_samples = order.size();
  plan.demand()->Publish(
      "job/0", spec, std::make_shared<const std::vector<uint64_t>>(order), 0);
  // The first reads of shard 3 in the order, as the next batches read them.
  std::vector<MemberRange> members;
  for (uint64_t sample : order) {
    if (sample / ForecastReads::kMembers != 3) continue;
    members.push_back({(sample % ForecastReads::kMembers) *
                           ForecastReads::kMemberBytes,
                       ForecastReads::kMemberBytes});
    if (members.size() == 6) break;
  }
  cache->PrefetchMembers(store_, infos[3], members);
  for (int i = 0; i < 1000 && cache->stats().prefetches_in_flight > 0; ++i) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  EXPECT_EQ(cache->stats().range_prefetches, 6u);
  EXPECT_EQ(store_->reads(), 6u);
  for (const MemberRange& member : members) {
    std::string got(member.size, '\0');
    ASSERT_OK(cache->Read(store_, infos[3], member.offset, member.size,
                          reinterpret_cast<uint8_t*>(got.data())));
    EXPECT_EQ(got, RandomBytes(kShardBytes, 3).substr(member.offset,
                                                      member.size));
  }
  const ShardCacheStats stats = cache->stats();
  EXPECT_EQ(stats.range_prefetch_hits, 6u);
  EXPECT_EQ(store_->reads(), 6u);  // the reads asked nothing more
  EXPECT_EQ(stats.range_bytes, 6 * ForecastReads::kMemberBytes);
  EXPECT_EQ(stats.served_bytes, 6 * ForecastReads::kMemberBytes);
  EXPECT_FALSE(cache->Contains(infos[3]));
}

// Members of a shard read whole once the readers reach it (shard by shard:
// all its members in a row) are not fetched by ranges, though seen from
// now, with another shard's reads first and room for one shard, its reads
// would come after it left the cache: the read downloads it whole.
TEST_F(ShardCacheTest, MembersOfAShardReadWholeAreNotFetchedByRanges) {
  constexpr int kShards = 4;
  const std::vector<ObjectInfo> infos = PutShards(kShards);
  common::ShardSpec spec;
  spec.num_samples = kShards * ForecastReads::kMembers;
  spec.shuffle = true;
  spec.shuffle_window_shards = 1;
  spec.shard_samples = std::make_shared<const std::vector<uint64_t>>(
      kShards, ForecastReads::kMembers);
  ShardCacheOptions options = Options(kShardBytes);
  options.range_prefetch_threads = 4;
  ASSERT_OK_AND_ASSIGN(auto cache, ShardCache::Open(options));
  const std::vector<uint64_t> order = common::EpochOrderFor(spec, 0);
  ForecastReads plan(*cache, store_, infos, order, ForecastReads::kCosts);
  common::ShardSpec reader;
  reader.num_samples = order.size();
  plan.demand()->Publish(
      "job/0", reader, std::make_shared<const std::vector<uint64_t>>(order),
      0);
  const uint32_t second = order[ForecastReads::kMembers] / ForecastReads::kMembers;
  ASSERT_NE(second, order[0] / ForecastReads::kMembers);
  cache->PrefetchMembers(store_, infos[second],
                         {{0, ForecastReads::kMemberBytes},
                          {ForecastReads::kMemberBytes,
                           ForecastReads::kMemberBytes}});
  for (int i = 0; i < 1000 && cache->stats().prefetches_in_flight > 0; ++i) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  EXPECT_EQ(cache->stats().range_prefetches, 0u);  // not even queued
  EXPECT_EQ(store_->reads(), 0u);
  plan.ReadAll(*cache, store_, infos);
  EXPECT_EQ(store_->bytes_read(), kShards * kShardBytes);
  EXPECT_EQ(cache->stats().range_prefetch_hits, 0u);
}

// With nothing queued, the prefetch threads fetch ahead by the forecast:
// shard by shard, the next shards the plan reads arrive before their reads,
// up to half the cache.
TEST_F(ShardCacheTest, PrefetchesAheadByTheForecast) {
  constexpr int kShards = 6;
  const std::vector<ObjectInfo> infos = PutShards(kShards);
  ShardCacheOptions options = Options(4 * kShardBytes);
  options.prefetch_threads = 1;
  options.plan_interval = absl::Milliseconds(5);
  ASSERT_OK_AND_ASSIGN(auto cache, ShardCache::Open(options));
  common::ShardSpec spec;
  spec.num_samples = kShards * ForecastReads::kMembers;
  spec.shuffle = true;
  spec.shuffle_window_shards = 1;
  spec.shard_samples = std::make_shared<const std::vector<uint64_t>>(
      kShards, ForecastReads::kMembers);
  const std::vector<uint64_t> order = common::EpochOrderFor(spec, 0);
  ForecastReads plan(*cache, store_, infos, order, ForecastReads::kCosts);
  common::ShardSpec reader;
  reader.num_samples = order.size();
  plan.demand()->Publish(
      "job/0", reader, std::make_shared<const std::vector<uint64_t>>(order),
      0);
  // The shards of the order, in the order it reads them.
  std::vector<int> upcoming;
  for (uint64_t sample : order) {
    const int shard = static_cast<int>(sample / ForecastReads::kMembers);
    if (upcoming.empty() || upcoming.back() != shard) upcoming.push_back(shard);
  }
  for (int i = 0; i < 1000 && cache->stats().downloads < 2; ++i) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  const ShardCacheStats stats = cache->stats();
  EXPECT_EQ(stats.downloads, 2u);  // half the cache: two shards
  EXPECT_EQ(stats.forecast_prefetches, 2u);
  EXPECT_TRUE(cache->Contains(infos[upcoming[0]]));
  EXPECT_TRUE(cache->Contains(infos[upcoming[1]]));
  EXPECT_EQ(stats.prefetch_depth_reads, ForecastReads::kMembers);
  EXPECT_EQ(stats.forecast_shard_bytes, kShards * kShardBytes);
  // Reading them is all hits.
  plan.ReadAll(*cache, store_, infos);
  EXPECT_GE(cache->stats().hits, 2 * ForecastReads::kMembers);
  EXPECT_GT(cache->stats().served_bytes, 0u);
}

}  // namespace
}  // namespace batchd::server
