// The shard-aware shuffle (common::ShardWindowOrder, Plan's
// shuffle_window_shards): coverage, determinism and the window bounds,
// through the sampler too; and the randomness table of docs/datasets.md.
#include <algorithm>
#include <cstdio>
#include <numeric>
#include <set>
#include <vector>

#include "common/sampler.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace batchd::common {
namespace {

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

std::multiset<uint64_t> Multiset(const std::vector<uint64_t>& order,
                                 uint64_t begin, uint64_t end) {
  return std::multiset<uint64_t>(order.begin() + begin, order.begin() + end);
}

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
//   build/common/shard_window_order_test --gtest_filter='ShardWindowStatsTest.*'
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
