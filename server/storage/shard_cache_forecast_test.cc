// The shard cache's choices by the plans' forecast (shard_demand.h):
// Belady's eviction, whole shards or member ranges, prefetch by the
// forecast, and member ranges fetched ahead.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "common/sampler.h"
#include "server/storage/fake_object_store_test_util.h"
#include "server/storage/shard_cache.h"
#include "server/storage/shard_cache_test_util.h"
#include "server/storage/shard_demand.h"
#include "testing/status_matchers.h"

namespace batchd::server {
namespace {

using namespace shard_cache_testing;  // NOLINT

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

  // The reader at the order's start, its forecast due now.
  void PublishStart() { demand_->Publish("job/0", spec_, order_, 0); }

  // A per-sample shuffle over `shards` shards of kMembers members.
  static std::vector<uint64_t> PerSampleOrder(int shards) {
    return common::EpochOrder(shards * kMembers, /*seed=*/5, /*shuffle=*/true,
                              0);
  }
  // The shard-aware shuffle with a window of one shard: shard by shard.
  static std::vector<uint64_t> ShardByShardOrder(int shards) {
    common::ShardSpec spec;
    spec.num_samples = shards * kMembers;
    spec.shuffle = true;
    spec.shuffle_window_shards = 1;
    spec.shard_samples =
        std::make_shared<const std::vector<uint64_t>>(shards, kMembers);
    return common::EpochOrderFor(spec, 0);
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
  plan.PublishStart();
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
  plan.PublishStart();
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
  ASSERT_OK_AND_ASSIGN(auto cache, ShardCache::Open(Options(2 * kShardBytes)));
  ForecastReads plan(*cache, store_, infos,
                     ForecastReads::ShardByShardOrder(kShards),
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
  const std::vector<uint64_t> order = ForecastReads::PerSampleOrder(kShards);
  ForecastReads plan(*cache, store_, infos, order, ForecastReads::kCosts);
  plan.PublishStart();
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
  const std::vector<uint64_t> order = ForecastReads::PerSampleOrder(kShards);
  ForecastReads plan(*cache, store_, infos, order, ForecastReads::kCosts);
  plan.PublishStart();
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

// While members of a shard are held, fetched ahead by ranges, the shard is
// read by ranges, though the forecast now says whole: a download would
// fetch those members twice.
TEST_F(ShardCacheTest, AShardWithMembersFetchedAheadIsNotDownloadedWhole) {
  constexpr int kShards = 8;
  const std::vector<ObjectInfo> infos = PutShards(kShards);
  ShardCacheOptions options = Options(2 * kShardBytes);
  options.range_prefetch_threads = 2;
  ASSERT_OK_AND_ASSIGN(auto cache, ShardCache::Open(options));
  const std::vector<uint64_t> order = ForecastReads::PerSampleOrder(kShards);
  ForecastReads plan(*cache, store_, infos, order, ForecastReads::kCosts);
  plan.PublishStart();
  cache->PrefetchMembers(store_, infos[3],
                         {{0, ForecastReads::kMemberBytes},
                          {ForecastReads::kMemberBytes,
                           ForecastReads::kMemberBytes}});
  for (int i = 0; i < 1000 && cache->stats().prefetches_in_flight > 0; ++i) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  ASSERT_EQ(cache->stats().range_prefetches, 2u);
  // Another reader reads all of shard 3 next: whole, by the forecast.
  std::vector<uint64_t> shard_three_first;
  for (uint64_t m = 0; m < ForecastReads::kMembers; ++m) {
    shard_three_first.push_back(3 * ForecastReads::kMembers + m);
  }
  common::ShardSpec spec;
  spec.num_samples = shard_three_first.size();
  plan.demand()->Publish(
      "job/1", spec,
      std::make_shared<const std::vector<uint64_t>>(shard_three_first), 0);
  plan.demand()->ForecastNow();
  ExpectRead(*cache, infos[3], 3, 5 * ForecastReads::kMemberBytes,
             ForecastReads::kMemberBytes);
  EXPECT_EQ(cache->stats().downloads, 0u);
  EXPECT_FALSE(cache->Contains(infos[3]));
  EXPECT_EQ(store_->reads(), 3u);  // the two fetched ahead, and this one
}

// Members of a shard read whole once the readers reach it (shard by shard:
// all its members in a row) are not fetched by ranges, though seen from
// now, with another shard's reads first and room for one shard, its reads
// would come after it left the cache: the read downloads it whole.
TEST_F(ShardCacheTest, MembersOfAShardReadWholeAreNotFetchedByRanges) {
  constexpr int kShards = 4;
  const std::vector<ObjectInfo> infos = PutShards(kShards);
  ShardCacheOptions options = Options(kShardBytes);
  options.range_prefetch_threads = 4;
  ASSERT_OK_AND_ASSIGN(auto cache, ShardCache::Open(options));
  const std::vector<uint64_t> order = ForecastReads::ShardByShardOrder(kShards);
  ForecastReads plan(*cache, store_, infos, order, ForecastReads::kCosts);
  plan.PublishStart();
  const uint32_t second =
      order[ForecastReads::kMembers] / ForecastReads::kMembers;
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
  const std::vector<uint64_t> order = ForecastReads::ShardByShardOrder(kShards);
  ForecastReads plan(*cache, store_, infos, order, ForecastReads::kCosts);
  plan.PublishStart();
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
