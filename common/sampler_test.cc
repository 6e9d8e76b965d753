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


// torchvision's RASampler (references/classification/sampler.py), written
// from its definition, over an epoch permutation `perm` of N samples:
//   indices = [i for i in perm for _ in range(reps)]
//   indices += indices[:total_size - len(indices)]   (total_size: the
//     smallest multiple of world at or above N * reps)
//   return indices[rank::world][:floor(N // 256 * 256 / world)]
std::vector<uint64_t> TorchRaSampler(const std::vector<uint64_t>& perm,
                                     uint32_t reps, uint32_t world,
                                     uint32_t rank) {
  const uint64_t n = perm.size();
  std::vector<uint64_t> indices;
  for (uint64_t i : perm) {
    for (uint32_t r = 0; r < reps; ++r) indices.push_back(i);
  }
  const uint64_t total = CeilDiv(n * reps, world) * world;
  for (uint64_t k = 0; indices.size() < total; ++k) {
    indices.push_back(indices[k]);
  }
  const uint64_t selected = n / 256 * 256 / world;
  std::vector<uint64_t> mine;
  for (uint64_t p = rank; p < total && mine.size() < selected; p += world) {
    mine.push_back(indices[p]);
  }
  return mine;
}

ShardSpec RepeatedSpec(uint64_t n, uint32_t reps, uint32_t world,
                       uint32_t rank) {
  ShardSpec spec;
  spec.num_samples = n;
  spec.seed = 3;
  spec.shuffle = true;
  spec.world_size = world;
  spec.rank = rank;
  spec.batch_size = 16;
  spec.repeats = reps;
  return spec;
}

// Each rank's samples are RASampler's, in its order, where the world divides
// the epoch (torchvision floors the per-rank count; batchd pads, as
// DistributedSampler does, so the global position means the same on any
// world size).
TEST(RepeatedAugmentationTest, RanksTakeTorchvisionsRaSamplerIndices) {
  for (uint64_t n : {1000, 1280}) {
    for (uint32_t reps : {2u, 3u, 4u}) {
      for (uint32_t world : {1u, 2u, 4u, 8u}) {
        const std::vector<uint64_t> perm =
            EpochOrder(n, /*seed=*/3, /*shuffle=*/true, /*epoch=*/1);
        for (uint32_t rank = 0; rank < world; ++rank) {
          const ShardSpec spec = RepeatedSpec(n, reps, world, rank);
          ASSERT_EQ(EpochLength(spec), n / 256 * 256);
          std::vector<uint64_t> samples;
          for (uint64_t entry : ShardIndices(spec, EpochOrderFor(spec, 1))) {
            samples.push_back(SampleOf(entry, n));
          }
          EXPECT_EQ(samples, TorchRaSampler(perm, reps, world, rank))
              << "n=" << n << " reps=" << reps << " world=" << world
              << " rank=" << rank;
        }
      }
    }
  }
}

// Over all ranks: every (sample, repeat) pair of the epoch exactly once,
// about N / reps distinct samples each `reps` times, and one sample's
// repeats on `reps` different ranks when the world has that many.
TEST(RepeatedAugmentationTest, EachPairOnceAndRepeatsOnDifferentRanks) {
  const uint64_t n = 1024;
  for (uint32_t reps : {2u, 4u}) {
    for (uint32_t world : {1u, 4u, 8u}) {
      std::map<uint64_t, int> pairs;
      std::map<uint64_t, std::set<uint32_t>> ranks_of_sample;
      for (uint32_t rank = 0; rank < world; ++rank) {
        const ShardSpec spec = RepeatedSpec(n, reps, world, rank);
        const std::vector<uint64_t> order = EpochOrderFor(spec, 0);
        for (uint64_t b = 0; b < BatchesPerEpoch(spec); ++b) {
          for (uint64_t entry : BatchIndicesFromOrder(spec, order, b)) {
            ++pairs[entry];
            ASSERT_LT(RepeatOf(entry, n), reps);
            ranks_of_sample[SampleOf(entry, n)].insert(rank);
          }
        }
      }
      EXPECT_EQ(pairs.size(), n);  // 1024: a multiple of 256 and of world
      for (const auto& [entry, times] : pairs) ASSERT_EQ(times, 1);
      EXPECT_EQ(ranks_of_sample.size(), n / reps);
      for (const auto& [sample, ranks] : ranks_of_sample) {
        ASSERT_EQ(ranks.size(), std::min(reps, world)) << sample;
      }
    }
  }
}

// Below 256 samples the epoch keeps them all (RASampler would yield none);
// an epoch's length is what a resume position is checked against.
TEST(RepeatedAugmentationTest, SmallDatasetsKeepEveryEntryAndResumeExactly) {
  const uint64_t n = 100;
  ShardSpec spec = RepeatedSpec(n, /*reps=*/3, /*world=*/2, /*rank=*/0);
  spec.batch_size = 4;
  EXPECT_EQ(EpochLength(spec), n);
  const std::vector<uint64_t> order = EpochOrderFor(spec, 2);
  ASSERT_EQ(order.size(), n);
  // The first ceil(100 / 3) = 34 samples of the permutation, 3 times each
  // (the last only once, cut at 100).
  const std::vector<uint64_t> perm = EpochOrder(n, 3, true, 2);
  for (uint64_t p = 0; p < n; ++p) {
    ASSERT_EQ(SampleOf(order[p], n), perm[p / 3]);
    ASSERT_EQ(RepeatOf(order[p], n), p % 3);
  }
  // World 2 takes 5 batches of 4 on each rank, then world 3 resumes at the
  // global position: every remaining pair exactly once, plus padding.
  const uint64_t position = GlobalPosition(spec, 5);
  EXPECT_EQ(position, 40u);
  std::multiset<uint64_t> taken;
  for (uint32_t rank = 0; rank < 2; ++rank) {
    spec.rank = rank;
    for (uint64_t b = 0; b < 5; ++b) {
      for (uint64_t e : BatchIndicesFromOrder(spec, order, b)) taken.insert(e);
    }
  }
  ShardSpec after = RepeatedSpec(n, 3, /*world=*/3, 0);
  after.batch_size = 4;
  after.start_position = position;
  std::multiset<uint64_t> rest;
  for (uint32_t rank = 0; rank < 3; ++rank) {
    after.rank = rank;
    for (uint64_t b = 0; b < BatchesPerEpoch(after); ++b) {
      for (uint64_t e : BatchIndicesFromOrder(after, order, b)) rest.insert(e);
    }
  }
  std::multiset<uint64_t> all = taken;
  all.insert(rest.begin(), rest.end());
  // 60 left over 3 ranks: no padding.
  EXPECT_EQ(all, std::multiset<uint64_t>(order.begin(), order.end()));
  after.start_position = n;
  EXPECT_EQ(ShardSize(after), 0u);  // at the end: invalid
  spec.repeats = kMaxRepeats + 1;
  EXPECT_EQ(ShardSize(spec), 0u);
}

// The order cache tells plans apart by their repeats.
TEST(RepeatedAugmentationTest, OrderCacheKeysByRepeats) {
  EpochOrderCache cache;
  ShardSpec once = RepeatedSpec(300, 1, 1, 0);
  ShardSpec twice = RepeatedSpec(300, 2, 1, 0);
  EXPECT_NE(*cache.Get(once, 0), *cache.Get(twice, 0));
  EXPECT_EQ(*cache.Get(twice, 0), EpochOrderFor(twice, 0));
  EXPECT_EQ(cache.computed(), 2u);
}

}  // namespace
}  // namespace batchd::common
