#include "common/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>
#include <set>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace batchd::common {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::IsEmpty;

std::vector<uint64_t> Iota(uint64_t n) {
  std::vector<uint64_t> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

bool IsPermutation(const std::vector<uint64_t>& order, uint64_t n) {
  std::vector<uint64_t> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  return sorted == Iota(n);
}

uint64_t CeilDiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

TEST(ShardSizeTest, Arithmetic) {
  ShardSpec spec;
  spec.num_samples = 10;
  spec.world_size = 3;
  spec.batch_size = 2;
  EXPECT_EQ(ShardSize(spec), 4u);
  EXPECT_EQ(BatchesPerEpoch(spec), 2u);
  spec.batch_size = 3;
  EXPECT_EQ(BatchesPerEpoch(spec), 2u);  // 3 + 1
  spec.drop_last = true;
  EXPECT_EQ(BatchesPerEpoch(spec), 1u);
  spec.batch_size = 5;
  EXPECT_EQ(BatchesPerEpoch(spec), 0u);  // the only batch is partial
  spec.drop_last = false;
  EXPECT_EQ(BatchesPerEpoch(spec), 1u);
}

TEST(ShardSizeTest, InvalidSpecsGiveZeroInsteadOfCrashing) {
  ShardSpec spec;
  spec.num_samples = 10;
  spec.world_size = 0;
  EXPECT_EQ(ShardSize(spec), 0u);
  EXPECT_EQ(BatchesPerEpoch(spec), 0u);
  EXPECT_THAT(ShardIndices(spec, Iota(10)), IsEmpty());
  spec.world_size = 2;
  spec.rank = 2;
  EXPECT_EQ(ShardSize(spec), 0u);
  spec.rank = 0;
  spec.batch_size = 0;
  EXPECT_EQ(BatchesPerEpoch(spec), 0u);
  EXPECT_THAT(BatchSampleIndices(spec, Iota(5), 0), IsEmpty());
  spec.batch_size = 2;
  spec.num_samples = 0;
  EXPECT_EQ(ShardSize(spec), 0u);
}

TEST(EpochOrderTest, NoShuffleIsIdentity) {
  EXPECT_EQ(EpochOrder(7, /*seed=*/3, /*shuffle=*/false, /*epoch=*/5),
            Iota(7));
  EXPECT_THAT(EpochOrder(0, 3, true, 5), IsEmpty());
  EXPECT_THAT(EpochOrder(1, 3, true, 5), ElementsAre(0u));
}

TEST(EpochOrderTest, ShuffleIsADeterministicPermutation) {
  for (uint64_t n : {2, 7, 100, 1001}) {
    const std::vector<uint64_t> a = EpochOrder(n, /*seed=*/42, true, 0);
    EXPECT_TRUE(IsPermutation(a, n));
    EXPECT_EQ(a, EpochOrder(n, 42, true, 0));
  }
}

TEST(EpochOrderTest, EpochsAndSeedsGiveDifferentPermutations) {
  const uint64_t n = 1000;
  std::set<std::vector<uint64_t>> seen;
  for (uint64_t seed : std::vector<uint64_t>{0, 1, 2, 0xFFFFFFFFFFull}) {
    for (uint64_t epoch : std::vector<uint64_t>{0, 1, 2, 100}) {
      std::vector<uint64_t> order = EpochOrder(n, seed, true, epoch);
      EXPECT_NE(order, Iota(n));
      seen.insert(std::move(order));
    }
  }
  EXPECT_EQ(seen.size(), 16u);
}

TEST(EpochOrderTest, ShuffleLooksUniform) {
  // Position of element 0 over many epochs of a 5-element order: each of the
  // 5 positions should get about 1/5 of 5000 draws (std ~28).
  std::vector<int> counts(5, 0);
  for (uint64_t epoch = 0; epoch < 5000; ++epoch) {
    const std::vector<uint64_t> order = EpochOrder(5, /*seed=*/9, true, epoch);
    ++counts[std::find(order.begin(), order.end(), 0u) - order.begin()];
  }
  for (int c : counts) EXPECT_NEAR(c, 1000, 150);
}

// The full matrix of the brief: N x world_size x drop_last x shuffle.
TEST(ShardIndicesTest, DistributedSamplerSemantics) {
  for (uint64_t n : {1, 7, 10, 100, 1001}) {
    for (uint32_t world : {1, 2, 3, 8}) {
      for (bool drop_last : {false, true}) {
        for (bool shuffle : {false, true}) {
          SCOPED_TRACE(::testing::Message()
                       << "N=" << n << " W=" << world << " drop_last="
                       << drop_last << " shuffle=" << shuffle);
          const std::vector<uint64_t> order =
              EpochOrder(n, /*seed=*/7, shuffle, /*epoch=*/3);
          ASSERT_TRUE(IsPermutation(order, n));
          if (!shuffle) {
            EXPECT_EQ(order, Iota(n));
          }

          const uint64_t shard_size = CeilDiv(n, world);
          const uint64_t padding = shard_size * world - n;
          std::map<uint64_t, int> multiplicity;
          for (uint32_t rank = 0; rank < world; ++rank) {
            ShardSpec spec;
            spec.num_samples = n;
            spec.seed = 7;
            spec.shuffle = shuffle;
            spec.drop_last = drop_last;
            spec.rank = rank;
            spec.world_size = world;
            spec.batch_size = 4;
            const std::vector<uint64_t> shard = ShardIndices(spec, order);
            ASSERT_EQ(shard.size(), ShardSize(spec));
            ASSERT_EQ(shard.size(), shard_size);
            // Strided positions of the padded order.
            for (uint64_t k = 0; k < shard.size(); ++k) {
              EXPECT_EQ(shard[k], order[(rank + k * world) % n]);
            }
            for (uint64_t index : shard) ++multiplicity[index];

            // Batches concatenate to the shard (minus a dropped tail).
            const uint64_t batches = BatchesPerEpoch(spec);
            EXPECT_EQ(batches, drop_last ? shard_size / 4
                                         : CeilDiv(shard_size, 4));
            std::vector<uint64_t> concatenated;
            for (uint64_t b = 0; b < batches; ++b) {
              const std::vector<uint64_t> batch =
                  BatchSampleIndices(spec, shard, b);
              EXPECT_FALSE(batch.empty());
              EXPECT_LE(batch.size(), 4u);
              if (drop_last || b + 1 < batches) {
                EXPECT_EQ(batch.size(), 4u);
              }
              concatenated.insert(concatenated.end(), batch.begin(),
                                  batch.end());
            }
            const uint64_t kept =
                drop_last ? shard_size / 4 * 4 : shard_size;
            EXPECT_EQ(concatenated,
                      std::vector<uint64_t>(shard.begin(),
                                            shard.begin() + kept));
            EXPECT_THAT(BatchSampleIndices(spec, shard, batches), IsEmpty());
          }
          // Union covers every sample.
          EXPECT_EQ(multiplicity.size(), n);
          // Duplicates: exactly `padding` extra copies, all of them from the
          // head of the epoch order.
          uint64_t duplicates = 0;
          for (const auto& [index, count] : multiplicity) {
            duplicates += count - 1;
          }
          EXPECT_EQ(duplicates, padding);
          if (padding == 0) {
            for (const auto& [index, count] : multiplicity) {
              EXPECT_EQ(count, 1) << "index " << index;
            }
          } else if (padding < n) {
            for (uint64_t p = 0; p < n; ++p) {
              EXPECT_EQ(multiplicity[order[p]], p < padding ? 2 : 1)
                  << "position " << p;
            }
          }
        }
      }
    }
  }
}

TEST(ShardIndicesTest, WorldLargerThanDatasetRepeatsTheOrder) {
  const std::vector<uint64_t> order = {2, 0, 1};
  ShardSpec spec;
  spec.num_samples = 3;
  spec.world_size = 8;
  std::vector<uint64_t> all;
  for (uint32_t rank = 0; rank < 8; ++rank) {
    spec.rank = rank;
    const std::vector<uint64_t> shard = ShardIndices(spec, order);
    ASSERT_EQ(shard.size(), 1u);
    all.push_back(shard[0]);
  }
  // Padded order: the order, then its head cycled: 2 0 1 | 2 0 1 2 0.
  EXPECT_THAT(all, ElementsAre(2, 0, 1, 2, 0, 1, 2, 0));
  // As DistributedSampler, padding 5 > N: indices * ceil(5/3), first 5.
}

TEST(ShardIndicesTest, MatchesTorchDistributedSamplerExample) {
  // DistributedSampler(range(10), num_replicas=3, shuffle=False):
  // padded = 0..9 + [0, 1]; rank r takes padded[r::3].
  ShardSpec spec;
  spec.num_samples = 10;
  spec.world_size = 3;
  spec.batch_size = 3;
  const std::vector<uint64_t> order = EpochOrder(10, 0, false, 0);
  spec.rank = 0;
  EXPECT_THAT(ShardIndices(spec, order), ElementsAre(0, 3, 6, 9));
  spec.rank = 1;
  EXPECT_THAT(ShardIndices(spec, order), ElementsAre(1, 4, 7, 0));
  spec.rank = 2;
  const std::vector<uint64_t> shard = ShardIndices(spec, order);
  EXPECT_THAT(shard, ElementsAre(2, 5, 8, 1));
  EXPECT_THAT(BatchSampleIndices(spec, shard, 0), ElementsAre(2, 5, 8));
  EXPECT_THAT(BatchSampleIndices(spec, shard, 1), ElementsAre(1));
  spec.drop_last = true;
  EXPECT_EQ(BatchesPerEpoch(spec), 1u);
  EXPECT_THAT(BatchSampleIndices(spec, shard, 1), IsEmpty());
}

TEST(BatchIndicesFromOrderTest, EqualsBatchesOfTheShard) {
  for (uint64_t n : {1, 7, 100, 1001}) {
    for (uint32_t world : {1u, 3u, 8u}) {
      for (bool drop_last : {false, true}) {
        for (uint32_t rank = 0; rank < world; ++rank) {
          const ShardSpec spec{.num_samples = n, .seed = 5, .shuffle = true,
                               .drop_last = drop_last, .rank = rank,
                               .world_size = world, .batch_size = 16};
          const std::vector<uint64_t> order = EpochOrder(n, 5, true, 2);
          const std::vector<uint64_t> shard = ShardIndices(spec, order);
          const uint64_t batches = BatchesPerEpoch(spec);
          for (uint64_t b = 0; b < batches; ++b) {
            EXPECT_EQ(BatchIndicesFromOrder(spec, order, b),
                      BatchSampleIndices(spec, shard, b))
                << "n=" << n << " world=" << world << " rank=" << rank
                << " batch=" << b;
          }
          EXPECT_TRUE(BatchIndicesFromOrder(spec, order, batches).empty());
        }
      }
    }
  }
}

TEST(EpochOrderCacheTest, ComputesOncePerKey) {
  EpochOrderCache cache(/*capacity=*/4);
  auto a = cache.Get(100, /*seed=*/1, /*shuffle=*/true, /*epoch=*/0);
  auto b = cache.Get(100, 1, true, 0);
  EXPECT_EQ(cache.computed(), 1u);
  EXPECT_EQ(a.get(), b.get());
  EXPECT_EQ(*a, EpochOrder(100, 1, true, 0));
  cache.Get(100, 1, true, 1);
  cache.Get(100, 2, true, 0);
  cache.Get(101, 1, true, 0);
  EXPECT_EQ(cache.computed(), 4u);
  // Unshuffled orders ignore seed and epoch.
  auto c = cache.Get(100, 1, false, 0);
  auto d = cache.Get(100, 5, false, 9);
  EXPECT_EQ(c.get(), d.get());
  EXPECT_EQ(*c, Iota(100));
  EXPECT_EQ(cache.computed(), 5u);
}

TEST(EpochOrderCacheTest, EvictsLeastRecentlyUsed) {
  EpochOrderCache cache(/*capacity=*/2);
  cache.Get(10, 0, true, 0);  // A
  cache.Get(10, 0, true, 1);  // B
  cache.Get(10, 0, true, 0);  // A again: B is now least recent
  EXPECT_EQ(cache.computed(), 2u);
  cache.Get(10, 0, true, 2);  // C evicts B
  EXPECT_EQ(cache.computed(), 3u);
  cache.Get(10, 0, true, 0);  // A still cached
  cache.Get(10, 0, true, 2);  // C still cached
  EXPECT_EQ(cache.computed(), 3u);
  cache.Get(10, 0, true, 1);  // B was evicted
  EXPECT_EQ(cache.computed(), 4u);
}

TEST(EpochOrderCacheTest, ZeroCapacityCachesNothingButStillAnswers) {
  EpochOrderCache cache(/*capacity=*/0);
  EXPECT_EQ(*cache.Get(5, 0, true, 0), EpochOrder(5, 0, true, 0));
  EXPECT_EQ(*cache.Get(5, 0, true, 0), EpochOrder(5, 0, true, 0));
  EXPECT_EQ(cache.computed(), 2u);
}

TEST(EpochOrderCacheTest, ConcurrentGetsAreConsistent) {
  EpochOrderCache cache(/*capacity=*/3);
  constexpr int kThreads = 8;
  constexpr int kIterations = 2000;
  std::vector<std::vector<uint64_t>> expected;
  for (uint64_t epoch = 0; epoch < 5; ++epoch) {
    expected.push_back(EpochOrder(500, /*seed=*/3, true, epoch));
  }
  std::vector<int> mismatches(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kIterations; ++i) {
        const uint64_t epoch = (i * 7 + t) % 5;
        auto order = cache.Get(500, 3, true, epoch);
        if (*order != expected[epoch]) ++mismatches[t];
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(mismatches[t], 0);
  EXPECT_GE(cache.computed(), 5u);
  EXPECT_LE(cache.computed(), uint64_t{kThreads} * kIterations);
}

TEST(EpochOrderCacheTest, ConcurrentFirstGetsOfOneKeyComputeOnce) {
  // Every thread asks for the same large order at once; only one computes.
  for (int round = 0; round < 5; ++round) {
    EpochOrderCache cache(/*capacity=*/4);
    std::vector<std::shared_ptr<const std::vector<uint64_t>>> results(8);
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
      threads.emplace_back([&, t] {
        results[t] = cache.Get(200000, /*seed=*/round, true, 0);
      });
    }
    for (std::thread& thread : threads) thread.join();
    EXPECT_EQ(cache.computed(), 1u);
    for (const auto& result : results) EXPECT_EQ(result.get(), results[0].get());
  }
}

// Everything rank `rank` of `spec`'s world delivers in the epoch, batch by
// batch.
std::vector<std::vector<uint64_t>> RankBatches(
    const ShardSpec& spec, const std::vector<uint64_t>& order) {
  std::vector<std::vector<uint64_t>> batches;
  for (uint64_t b = 0; b < BatchesPerEpoch(spec); ++b) {
    batches.push_back(BatchIndicesFromOrder(spec, order, b));
  }
  return batches;
}

std::multiset<uint64_t> Multiset(const std::vector<uint64_t>& order,
                                 uint64_t begin, uint64_t end) {
  return std::multiset<uint64_t>(order.begin() + begin, order.begin() + end);
}

// A run of world size W is checkpointed after every possible number of
// lockstep batches and resumed on every world size W'. Before the
// checkpoint the ranks together took exactly the order's positions
// [0, position); after it, the new ranks take every remaining sample
// exactly once, plus their own padding (repeats of the epoch's head), minus
// with drop_last the tail each rank drops.
TEST(ElasticResumeTest, EveryRemainingSampleExactlyOnceOnAnyWorldSize) {
  const std::vector<uint32_t> worlds = {1, 2, 3, 4, 6, 8};
  int checked = 0;
  for (uint64_t n : {1, 7, 50, 97}) {
    for (bool shuffle : {false, true}) {
      const std::vector<uint64_t> order =
          EpochOrder(n, /*seed=*/5, shuffle, /*epoch=*/2);
      for (bool drop_last : {false, true}) {
        for (uint32_t batch_size : {1u, 3u, 5u}) {
          for (uint32_t w : worlds) {
            ShardSpec before;
            before.num_samples = n;
            before.shuffle = shuffle;
            before.drop_last = drop_last;
            before.batch_size = batch_size;
            before.world_size = w;
            for (uint64_t next = 0; next <= BatchesPerEpoch(before); ++next) {
              std::multiset<uint64_t> taken;
              for (uint32_t r = 0; r < w; ++r) {
                before.rank = r;
                const auto batches = RankBatches(before, order);
                for (uint64_t b = 0; b < next; ++b) {
                  taken.insert(batches[b].begin(), batches[b].end());
                }
              }
              before.rank = 0;
              const uint64_t position = GlobalPosition(before, next);
              if (next < BatchesPerEpoch(before)) {
                ASSERT_LT(position, n);
                ASSERT_EQ(taken, Multiset(order, 0, position))
                    << "n=" << n << " w=" << w << " next=" << next;
              } else {
                ASSERT_EQ(position, n);  // the epoch is done
                continue;
              }
              for (uint32_t w2 : worlds) {
                ShardSpec after = before;
                after.world_size = w2;
                after.start_position = position;
                std::multiset<uint64_t> rest;
                for (uint32_t r = 0; r < w2; ++r) {
                  after.rank = r;
                  for (const auto& batch : RankBatches(after, order)) {
                    rest.insert(batch.begin(), batch.end());
                  }
                }
                const uint64_t padded = ShardSize(after) * w2;
                // Exactly the rest, then the padding from the epoch's head.
                std::multiset<uint64_t> expected = Multiset(order, position, n);
                for (uint64_t a = n; a < position + padded; ++a) {
                  expected.insert(order[a % n]);
                }
                if (!drop_last) {
                  ASSERT_EQ(rest, expected)
                      << "n=" << n << " w=" << w << " next=" << next
                      << " w2=" << w2 << " bs=" << batch_size;
                } else {
                  // The same less each rank's final partial batch: nothing
                  // more often than without drop_last, and at most
                  // batch_size - 1 samples missing per rank.
                  ASSERT_TRUE(std::includes(expected.begin(), expected.end(),
                                            rest.begin(), rest.end()));
                  ASSERT_LE(expected.size() - rest.size(),
                            uint64_t{w2} * (batch_size - 1));
                }
                ++checked;
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 5000);
}

// Resuming with the same world size gives exactly the batches the first
// run would have given from that point, padding included.
TEST(ElasticResumeTest, SameWorldSizeResumesTheSameBatches) {
  for (uint64_t n : {10, 50, 97}) {
    const std::vector<uint64_t> order =
        EpochOrder(n, /*seed=*/9, /*shuffle=*/true, /*epoch=*/0);
    for (uint32_t w : {1u, 3u, 8u}) {
      ShardSpec spec;
      spec.num_samples = n;
      spec.batch_size = 4;
      spec.world_size = w;
      for (uint64_t next = 0; next < BatchesPerEpoch(spec); ++next) {
        ShardSpec resumed = spec;
        resumed.start_position = GlobalPosition(spec, next);
        ASSERT_EQ(BatchesPerEpoch(resumed), BatchesPerEpoch(spec) - next);
        for (uint32_t r = 0; r < w; ++r) {
          spec.rank = resumed.rank = r;
          for (uint64_t b = 0; b < BatchesPerEpoch(resumed); ++b) {
            ASSERT_EQ(BatchIndicesFromOrder(resumed, order, b),
                      BatchIndicesFromOrder(spec, order, next + b))
                << "n=" << n << " w=" << w << " next=" << next;
          }
        }
      }
    }
  }
}

// Elastic determinism: with the same global batch (batch_size *
// world_size), global step k holds the same samples for W=2 and W=4, for
// every step whose samples lie inside the epoch (the last, padded step may
// differ by its padding).
TEST(ElasticResumeTest, GlobalStepsHoldTheSameSamplesForAnyWorldSize) {
  const uint64_t n = 103;
  const std::vector<uint64_t> order =
      EpochOrder(n, /*seed=*/3, /*shuffle=*/true, /*epoch=*/1);
  auto step = [&](uint32_t world, uint32_t batch_size, uint64_t k) {
    ShardSpec spec;
    spec.num_samples = n;
    spec.world_size = world;
    spec.batch_size = batch_size;
    std::multiset<uint64_t> samples;
    for (uint32_t r = 0; r < world; ++r) {
      spec.rank = r;
      const std::vector<uint64_t> batch = BatchIndicesFromOrder(spec, order, k);
      samples.insert(batch.begin(), batch.end());
    }
    return samples;
  };
  const uint64_t global_batch = 16;
  for (uint64_t k = 0; k < n / global_batch; ++k) {
    EXPECT_EQ(step(2, 8, k), step(4, 4, k)) << "step " << k;
    EXPECT_EQ(step(2, 8, k), Multiset(order, k * global_batch,
                                      (k + 1) * global_batch));
  }
}

TEST(ElasticResumeTest, AStartAtOrPastTheEndIsInvalid) {
  ShardSpec spec;
  spec.num_samples = 10;
  spec.start_position = 10;
  EXPECT_EQ(ShardSize(spec), 0u);
  EXPECT_EQ(BatchesPerEpoch(spec), 0u);
  EXPECT_THAT(BatchIndicesFromOrder(spec, Iota(10), 0), IsEmpty());
  spec.start_position = 9;
  EXPECT_EQ(ShardSize(spec), 1u);
  EXPECT_THAT(BatchIndicesFromOrder(spec, Iota(10), 0), ElementsAre(9));
}

// ---- The shard-aware shuffle (ShardWindowOrder) ----

// Shard layouts: `shards` shards of `per_shard` samples, the last `uneven`
// ones shorter by varying amounts (as a dataset's last shard, or damaged
// shards, are).
std::vector<uint64_t> Layout(uint64_t shards, uint64_t per_shard,
                             uint64_t uneven = 0) {
  std::vector<uint64_t> layout(shards, per_shard);
  for (uint64_t i = 0; i < uneven && i < shards; ++i) {
    layout[shards - 1 - i] = 1 + (per_shard * (i + 3)) % per_shard;
  }
  return layout;
}

uint64_t Total(const std::vector<uint64_t>& layout) {
  return std::accumulate(layout.begin(), layout.end(), uint64_t{0});
}

// Sample -> its shard.
std::vector<uint64_t> ShardOfSample(const std::vector<uint64_t>& layout) {
  std::vector<uint64_t> shard_of;
  for (uint64_t g = 0; g < layout.size(); ++g) {
    shard_of.insert(shard_of.end(), layout[g], g);
  }
  return shard_of;
}

// The most shards live at one position of `order`: a shard is live at p
// when it has a sample at or before p and one at or after p.
uint64_t MaxLiveShards(const std::vector<uint64_t>& order,
                       const std::vector<uint64_t>& layout) {
  const std::vector<uint64_t> shard_of = ShardOfSample(layout);
  std::vector<uint64_t> first(layout.size(), order.size()), last(layout.size());
  for (uint64_t p = 0; p < order.size(); ++p) {
    const uint64_t g = shard_of[order[p]];
    first[g] = std::min(first[g], p);
    last[g] = p;
  }
  // +1 where a shard's interval starts, -1 after it ends.
  std::vector<int64_t> delta(order.size() + 1, 0);
  for (uint64_t g = 0; g < layout.size(); ++g) {
    ++delta[first[g]];
    --delta[last[g] + 1];
  }
  int64_t live = 0, most = 0;
  for (uint64_t p = 0; p < order.size(); ++p) {
    live += delta[p];
    most = std::max(most, live);
  }
  return static_cast<uint64_t>(most);
}

ShardSpec WindowSpec(const std::vector<uint64_t>& layout, uint32_t window) {
  ShardSpec spec;
  spec.num_samples = Total(layout);
  spec.seed = 11;
  spec.shuffle = true;
  spec.shuffle_window_shards = window;
  spec.shard_samples = std::make_shared<const std::vector<uint64_t>>(layout);
  return spec;
}

TEST(ShardWindowOrderTest, IsAPermutationOfEveryLayout) {
  for (uint64_t shards : {1, 2, 7, 64}) {
    for (uint64_t per_shard : {1, 5, 100}) {
      for (uint64_t uneven : {0, 1, 3}) {
        const std::vector<uint64_t> layout = Layout(shards, per_shard, uneven);
        for (uint32_t window : {1u, 2u, 3u, 8u, 100u}) {
          const std::vector<uint64_t> order =
              ShardWindowOrder(layout, /*seed=*/4, window, /*epoch=*/1);
          ASSERT_TRUE(IsPermutation(order, Total(layout)))
              << shards << "x" << per_shard << " window " << window;
        }
      }
    }
  }
}

TEST(ShardWindowOrderTest, DeterministicAndDifferentPerEpochSeedAndWindow) {
  const std::vector<uint64_t> layout = Layout(16, 20, 2);
  const std::vector<uint64_t> a = ShardWindowOrder(layout, 7, 4, 0);
  EXPECT_EQ(a, ShardWindowOrder(layout, 7, 4, 0));
  std::set<std::vector<uint64_t>> distinct = {a};
  for (uint64_t epoch = 1; epoch < 6; ++epoch) {
    distinct.insert(ShardWindowOrder(layout, 7, 4, epoch));
  }
  distinct.insert(ShardWindowOrder(layout, 8, 4, 0));
  distinct.insert(ShardWindowOrder(layout, 7, 3, 0));
  EXPECT_EQ(distinct.size(), 8u);
  // And none is the per-sample shuffle's order.
  EXPECT_EQ(distinct.count(EpochOrder(Total(layout), 7, true, 0)), 0u);
}

TEST(ShardWindowOrderTest, WindowsOfAtLeastTheShardCountGiveOneOrder) {
  const std::vector<uint64_t> layout = Layout(6, 9, 1);
  const std::vector<uint64_t> all = ShardWindowOrder(layout, 3, 6, 2);
  EXPECT_EQ(ShardWindowOrder(layout, 3, 7, 2), all);
  EXPECT_EQ(ShardWindowOrder(layout, 3, 65536, 2), all);
  EXPECT_NE(ShardWindowOrder(layout, 3, 5, 2), all);
  EXPECT_EQ(EffectiveWindowShards(65536, layout), 6u);
  EXPECT_EQ(EffectiveWindowShards(4, layout), 4u);
}

TEST(ShardWindowOrderTest, WindowOfOneReadsShardsOneByOneInAPermutedOrder) {
  const std::vector<uint64_t> layout = Layout(12, 10, 2);
  const std::vector<uint64_t> order = ShardWindowOrder(layout, 5, 1, 0);
  const std::vector<uint64_t> shard_of = ShardOfSample(layout);
  std::vector<uint64_t> runs;  // shards in the order they appear
  for (uint64_t sample : order) {
    if (runs.empty() || runs.back() != shard_of[sample]) {
      runs.push_back(shard_of[sample]);
    }
  }
  EXPECT_TRUE(IsPermutation(runs, 12)) << "each shard is one run";
  EXPECT_NE(runs, Iota(12)) << "the shards are permuted";
  EXPECT_NE(order, Iota(Total(layout)));
  // Within its run each shard's samples are permuted too.
  EXPECT_FALSE(std::is_sorted(order.begin(), order.begin() + 10));
}

// The window bound (sampler.h): at most K shards live at any position (K
// somewhere, with long enough shards); any L consecutive
// positions touch at most 2K + floor(L / smallest shard) shards.
TEST(ShardWindowOrderTest, WindowBoundsTheShardsInUse) {
  for (uint64_t shards : {1, 5, 33}) {
    for (uint64_t per_shard : {3, 40}) {
      for (uint64_t uneven : {0, 2}) {
        const std::vector<uint64_t> layout = Layout(shards, per_shard, uneven);
        const std::vector<uint64_t> shard_of = ShardOfSample(layout);
        const uint64_t smallest =
            *std::min_element(layout.begin(), layout.end());
        for (uint32_t window : {1u, 2u, 4u, 8u, 40u}) {
          for (uint64_t epoch : {0, 1, 2}) {
            const std::vector<uint64_t> order =
                ShardWindowOrder(layout, /*seed=*/epoch + 1, window, epoch);
            const uint64_t k = std::min<uint64_t>(window, shards);
            const uint64_t live = MaxLiveShards(order, layout);
            ASSERT_LE(live, k)
                << shards << "x" << per_shard << " window " << window;
            // Shards long enough to be touched before another ends fill
            // the window.
            if (per_shard >= 40 && uneven == 0) EXPECT_EQ(live, k);
            for (uint64_t length : {1, 7, 64, 250}) {
              for (uint64_t begin = 0; begin < order.size(); ++begin) {
                std::set<uint64_t> touched;
                for (uint64_t p = begin;
                     p < std::min<uint64_t>(order.size(), begin + length);
                     ++p) {
                  touched.insert(shard_of[order[p]]);
                }
                ASSERT_LE(touched.size(), 2 * k + length / smallest)
                    << shards << "x" << per_shard << " window " << window
                    << " at " << begin << " length " << length;
              }
            }
          }
        }
      }
    }
  }
}

// Through the whole sampler, for many (shards, samples per shard, window,
// batch size, world size, drop_last): every rank's batches together hold
// each sample exactly once (plus the padding of the epoch's head, less
// with drop_last each rank's final partial batch), the same from the cache
// as computed directly; and a rank's run of consecutive batches stays
// within the window bound.
TEST(ShardWindowOrderTest, ExactlyOncePerEpochThroughTheSampler) {
  EpochOrderCache cache(/*capacity=*/4);
  int checked = 0;
  for (uint64_t shards : {1, 3, 10, 17}) {
    for (uint64_t per_shard : {1, 4, 25}) {
      const std::vector<uint64_t> layout =
          Layout(shards, per_shard, /*uneven=*/shards > 2 ? 1 : 0);
      const uint64_t n = Total(layout);
      const std::vector<uint64_t> shard_of = ShardOfSample(layout);
      for (uint32_t window : {1u, 2u, 5u, 64u}) {
        ShardSpec spec = WindowSpec(layout, window);
        const uint64_t k = std::min<uint64_t>(window, shards);
        const uint64_t smallest =
            *std::min_element(layout.begin(), layout.end());
        for (uint32_t batch_size : {1u, 4u, 7u}) {
          for (uint32_t world : {1u, 2u, 3u, 8u}) {
            for (bool drop_last : {false, true}) {
              spec.batch_size = batch_size;
              spec.world_size = world;
              spec.drop_last = drop_last;
              const uint64_t epoch = checked % 3;
              std::shared_ptr<const std::vector<uint64_t>> order =
                  cache.Get(spec, epoch);
              ASSERT_EQ(*order, ShardWindowOrder(layout, spec.seed, window,
                                                 epoch));
              std::multiset<uint64_t> got;
              for (uint32_t rank = 0; rank < world; ++rank) {
                spec.rank = rank;
                const uint64_t batches = BatchesPerEpoch(spec);
                for (uint64_t b = 0; b < batches; ++b) {
                  const std::vector<uint64_t> batch =
                      BatchIndicesFromOrder(spec, *order, b);
                  got.insert(batch.begin(), batch.end());
                }
                // Runs of R consecutive batches span at most R * batch_size
                // * world positions of the order (padding aside).
                if (n % world == 0) {
                  for (uint64_t r = 1; r <= 3; ++r) {
                    for (uint64_t b = 0; b + r <= batches; ++b) {
                      std::set<uint64_t> touched;
                      for (uint64_t i = b; i < b + r; ++i) {
                        for (uint64_t sample :
                             BatchIndicesFromOrder(spec, *order, i)) {
                          touched.insert(shard_of[sample]);
                        }
                      }
                      ASSERT_LE(touched.size(),
                                2 * k + r * batch_size * world / smallest);
                    }
                  }
                }
              }
              spec.rank = 0;
              const uint64_t padded = ShardSize(spec) * world;
              std::multiset<uint64_t> expected(order->begin(), order->end());
              for (uint64_t a = n; a < padded; ++a) {
                expected.insert((*order)[a % n]);
              }
              if (!drop_last) {
                ASSERT_EQ(got, expected)
                    << shards << "x" << per_shard << " window " << window
                    << " batch " << batch_size << " world " << world;
                for (uint64_t sample = 0; sample < n; ++sample) {
                  ASSERT_GE(got.count(sample), 1u);
                }
              } else {
                ASSERT_TRUE(std::includes(expected.begin(), expected.end(),
                                          got.begin(), got.end()));
                ASSERT_EQ(expected.size() - got.size(),
                          uint64_t{world} * (ShardSize(spec) % batch_size));
              }
              ++checked;
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(checked, 4 * 3 * 4 * 3 * 4 * 2);
}

// An elastic resume of a windowed epoch, on another world size, delivers
// every remaining sample exactly once: the rest of the sampler only reads
// the order.
TEST(ShardWindowOrderTest, ElasticResumeOnAnotherWorldSizeTakesTheRestOnce) {
  const std::vector<uint64_t> layout = Layout(9, 12, 1);
  const uint64_t n = Total(layout);
  ShardSpec spec = WindowSpec(layout, 3);
  spec.batch_size = 5;
  spec.world_size = 2;
  const std::vector<uint64_t> order = EpochOrderFor(spec, /*epoch=*/4);
  const uint64_t position = GlobalPosition(spec, /*next_batch=*/3);
  std::multiset<uint64_t> rest;
  ShardSpec after = spec;
  after.world_size = 3;
  after.start_position = position;
  for (uint32_t r = 0; r < 3; ++r) {
    after.rank = r;
    for (uint64_t b = 0; b < BatchesPerEpoch(after); ++b) {
      for (uint64_t s : BatchIndicesFromOrder(after, order, b)) rest.insert(s);
    }
  }
  std::multiset<uint64_t> expected = Multiset(order, position, n);
  for (uint64_t a = n; a < position + ShardSize(after) * 3; ++a) {
    expected.insert(order[a % n]);
  }
  EXPECT_EQ(rest, expected);
}

TEST(ShardWindowOrderTest, CacheKeysTheWindowAndTheLayout) {
  EpochOrderCache cache(/*capacity=*/8);
  const std::vector<uint64_t> layout = Layout(8, 10);
  ShardSpec spec = WindowSpec(layout, 2);
  auto a = cache.Get(spec, 0);
  EXPECT_EQ(cache.Get(spec, 0), a);  // the same layout object: shared
  EXPECT_EQ(cache.computed(), 1u);
  ShardSpec wider = spec;
  wider.shuffle_window_shards = 3;
  EXPECT_NE(*cache.Get(wider, 0), *a);
  // Windows past the shard count are one order, computed once.
  wider.shuffle_window_shards = 8;
  auto all = cache.Get(wider, 0);
  wider.shuffle_window_shards = 100;
  EXPECT_EQ(cache.Get(wider, 0), all);
  EXPECT_EQ(cache.computed(), 3u);
  // Another layout of the same size is another order.
  ShardSpec other = WindowSpec(Layout(4, 20), 2);
  EXPECT_NE(*cache.Get(other, 0), *a);
  // Without shuffle, or with window 0, the old orders.
  ShardSpec global = spec;
  global.shuffle_window_shards = 0;
  EXPECT_EQ(*cache.Get(global, 0), EpochOrder(80, spec.seed, true, 0));
  global.shuffle = false;
  global.shuffle_window_shards = 2;
  EXPECT_EQ(*cache.Get(global, 0), Iota(80));
}

// The measurements of docs/datasets.md ("Shard-aware shuffle"), printed:
//   build/common/sampler_test --gtest_filter='ShardWindowStatsTest.*'
// 64 shards x 100 samples, averaged over 5 epochs: distinct shards per
// 1,000 consecutive samples (mean over the epoch's ten ranges, and the most
// over ranges starting every 100), the most shards live at once, how often
// two adjacent samples come from the same shard (1/64 = 1.6 % for a
// uniform permutation), a shard's spread (the positions from its first to
// its last sample, as a fraction of the epoch; 0.98 for a uniform
// permutation), and the mean |position - sample index| / N (1/3 for a
// uniform permutation, 0 for none).
TEST(ShardWindowStatsTest, PrintsTheTable) {
  const std::vector<uint64_t> layout = Layout(64, 100);
  const uint64_t n = Total(layout);
  const std::vector<uint64_t> shard_of = ShardOfSample(layout);
  constexpr int kEpochs = 5;
  std::printf("%-7s %9s %7s %5s %11s %7s %13s\n", "window", "shards/1k",
              "max/1k", "live", "same-shard", "spread", "displacement");
  double previous_same = 2;
  for (uint32_t window : {1u, 2u, 4u, 8u, 16u, 64u, 0u}) {
    double per_1k = 0, same = 0, spread = 0, displacement = 0;
    uint64_t most_1k = 0, live = 0;
    for (int epoch = 0; epoch < kEpochs; ++epoch) {
      const std::vector<uint64_t> order =
          window == 0 ? EpochOrder(n, /*seed=*/1, true, epoch)
                      : ShardWindowOrder(layout, /*seed=*/1, window, epoch);
      live = std::max(live, MaxLiveShards(order, layout));
      for (uint64_t begin = 0; begin + 1000 <= n; begin += 100) {
        std::set<uint64_t> touched;
        for (uint64_t p = begin; p < begin + 1000; ++p) {
          touched.insert(shard_of[order[p]]);
        }
        most_1k = std::max<uint64_t>(most_1k, touched.size());
        if (begin % 1000 == 0) {
          per_1k += touched.size() / double(n / 1000) / kEpochs;
        }
      }
      std::vector<uint64_t> first(64, n), last(64, 0);
      for (uint64_t p = 0; p < n; ++p) {
        const uint64_t g = shard_of[order[p]];
        first[g] = std::min(first[g], p);
        last[g] = p;
        if (p + 1 < n) {
          same += (g == shard_of[order[p + 1]]) / double(n - 1) / kEpochs;
        }
        displacement +=
            std::abs(double(p) - double(order[p])) / n / n / kEpochs;
      }
      for (uint64_t g = 0; g < 64; ++g) {
        spread += double(last[g] - first[g]) / n / 64 / kEpochs;
      }
    }
    std::printf("%-7s %9.1f %7llu %5llu %10.1f%% %7.3f %13.3f\n",
                window == 0 ? "global" : std::to_string(window).c_str(),
                per_1k, static_cast<unsigned long long>(most_1k),
                static_cast<unsigned long long>(live), 100 * same, spread,
                displacement);
    if (window != 0) {
      EXPECT_LE(live, window);
      EXPECT_LT(same, previous_same);  // wider windows mix better
      previous_same = same;
    } else {
      EXPECT_LT(same, 0.05);  // ~1/64
    }
  }
}

}  // namespace
}  // namespace batchd::common
