#include "common/mixture.h"

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "common/sampler.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace batchd::common {
namespace {

using ::testing::ElementsAre;

// Three sources: one far smaller than its share (upsampled), one about its
// share, one far larger (subsampled).
MixtureSpec ThreeSources(uint64_t samples_per_epoch = 400) {
  MixtureSpec spec;
  const std::vector<uint64_t> units = QuantizeWeights({0.7, 0.2, 0.1});
  const uint64_t sizes[] = {50, 90, 1000};
  const char* names[] = {"laion", "cc12m", "coco"};
  for (int s = 0; s < 3; ++s) {
    spec.sources.push_back(MixtureSource{sizes[s], units[s],
                                         SourceStreamKey(names[s]), 0});
  }
  spec.samples_per_epoch = samples_per_epoch;
  return spec;
}

// Each source's samples in `epoch`'s order, in order.
std::vector<std::vector<uint64_t>> PerSource(const MixtureSpec& spec,
                                             uint64_t seed, bool shuffle,
                                             uint64_t epoch) {
  const std::vector<uint64_t> offsets = SourceOffsets(spec);
  std::vector<std::vector<uint64_t>> out(spec.sources.size());
  for (uint64_t entry : MixtureOrder(spec, seed, shuffle, epoch)) {
    const MixtureEntry e = DecodeEntry(offsets, TotalSamples(spec), entry);
    out[e.source].push_back(e.sample);
  }
  return out;
}

TEST(MixtureQuotasTest, LargestRemainderSumsToTheEpoch) {
  MixtureSpec spec;
  for (double w : {1.0, 1.0, 1.0}) {
    spec.sources.push_back(MixtureSource{5, 0, 0, 0});
  }
  const std::vector<uint64_t> units = QuantizeWeights({1, 1, 1});
  for (size_t s = 0; s < 3; ++s) spec.sources[s].weight_units = units[s];
  spec.samples_per_epoch = 10;
  EXPECT_THAT(MixtureQuotas(spec), ElementsAre(4, 3, 3));
  MixtureSpec two = ThreeSources(1000);
  two.sources.pop_back();
  const std::vector<uint64_t> u = QuantizeWeights({0.7, 0.3});
  two.sources[0].weight_units = u[0];
  two.sources[1].weight_units = u[1];
  EXPECT_THAT(MixtureQuotas(two), ElementsAre(700, 300));
  EXPECT_THAT(QuantizeWeights({0.7, 0.3}),
              ElementsAre(uint64_t{1} << 32, 1840700270));
}

TEST(MixtureOrderTest, CountsFollowTheWeightsOverALongRun) {
  // 100 epochs of an epoch length the weights do not divide evenly.
  const MixtureSpec spec = ThreeSources(/*samples_per_epoch=*/333);
  std::vector<uint64_t> counts(3, 0);
  uint64_t total = 0;
  for (uint64_t epoch = 0; epoch < 100; ++epoch) {
    const auto per_source = PerSource(spec, /*seed=*/7, /*shuffle=*/true,
                                      epoch);
    for (size_t s = 0; s < 3; ++s) counts[s] += per_source[s].size();
    total += 333;
  }
  const double weights[] = {0.7, 0.2, 0.1};
  for (size_t s = 0; s < 3; ++s) {
    const double share = static_cast<double>(counts[s]) / total;
    EXPECT_NEAR(share, weights[s], 0.01 * weights[s]) << "source " << s;
  }
}

TEST(MixtureOrderTest, PassesAreWithoutReplacementAndContinueAcrossEpochs) {
  const MixtureSpec spec = ThreeSources();
  for (bool shuffle : {false, true}) {
    std::vector<std::vector<uint64_t>> streams(3);
    for (uint64_t epoch = 0; epoch < 12; ++epoch) {
      const auto per_source = PerSource(spec, /*seed=*/3, shuffle, epoch);
      for (size_t s = 0; s < 3; ++s) {
        streams[s].insert(streams[s].end(), per_source[s].begin(),
                          per_source[s].end());
      }
    }
    for (size_t s = 0; s < 3; ++s) {
      const uint64_t n = spec.sources[s].num_samples;
      // The epochs' samples, joined, are the source's stream: every whole
      // pass a permutation of the source.
      for (uint64_t k = 0; k < streams[s].size(); ++k) {
        ASSERT_EQ(streams[s][k], StreamSample(spec, s, 3, shuffle, k))
            << "source " << s << " position " << k;
      }
      for (uint64_t begin = 0; begin + n <= streams[s].size(); begin += n) {
        std::set<uint64_t> pass(streams[s].begin() + begin,
                                streams[s].begin() + begin + n);
        EXPECT_EQ(pass.size(), n) << "source " << s << " pass " << begin / n;
      }
    }
    // The larger source's passes are not restarted each epoch: 12 epochs of
    // 40 take 480 distinct samples of its 1000.
    std::set<uint64_t> distinct(streams[2].begin(), streams[2].end());
    EXPECT_EQ(distinct.size(), streams[2].size());
    if (shuffle) {
      // Successive passes of a source are permuted apart.
      EXPECT_NE(std::vector<uint64_t>(streams[0].begin(),
                                      streams[0].begin() + 50),
                std::vector<uint64_t>(streams[0].begin() + 50,
                                      streams[0].begin() + 100));
    }
  }
}

TEST(MixtureOrderTest, EntriesAreUniqueWithinAnEpochAndDecode) {
  // Source 0 (50 samples, quota 280) is seen about 5.6 times an epoch:
  // each time its own entry (occurrence), so its own augmentation.
  const MixtureSpec spec = ThreeSources();
  const std::vector<uint64_t> order = MixtureOrder(spec, 1, true, 4);
  ASSERT_EQ(order.size(), 400u);
  EXPECT_EQ(std::set<uint64_t>(order.begin(), order.end()).size(), 400u);
  for (uint64_t entry : order) EXPECT_LT(entry, EntryBound(spec));
  const MixtureEntry e =
      DecodeEntry(SourceOffsets(spec), TotalSamples(spec), 50 + 7 + 2 * 1140);
  EXPECT_EQ(e.source, 1u);
  EXPECT_EQ(e.sample, 7u);
  EXPECT_EQ(e.occurrence, 2u);
}

TEST(MixtureOrderTest, PureFunctionOfSpecSeedAndEpoch) {
  const MixtureSpec a = ThreeSources();
  const MixtureSpec b = ThreeSources();
  EXPECT_EQ(MixtureOrder(a, 9, true, 5), MixtureOrder(b, 9, true, 5));
  EXPECT_NE(MixtureOrder(a, 9, true, 5), MixtureOrder(a, 9, true, 6));
  EXPECT_NE(MixtureOrder(a, 9, true, 5), MixtureOrder(a, 10, true, 5));
  // A source's passes follow its name, not its place in the list.
  MixtureSpec swapped = a;
  std::swap(swapped.sources[0], swapped.sources[1]);
  const auto before = PerSource(a, 9, true, 3);
  const auto after = PerSource(swapped, 9, true, 3);
  EXPECT_EQ(before[0], after[1]);
}

TEST(MixtureOrderTest, SmoothInterleavingWithoutShuffle) {
  const MixtureSpec spec = ThreeSources(10);  // quotas 7, 2, 1
  const std::vector<uint64_t> offsets = SourceOffsets(spec);
  std::vector<uint32_t> sources;
  for (uint64_t entry : MixtureOrder(spec, 0, false, 0)) {
    sources.push_back(DecodeEntry(offsets, TotalSamples(spec), entry).source);
  }
  EXPECT_THAT(sources, ElementsAre(0, 0, 1, 0, 0, 2, 0, 1, 0, 0));
}

TEST(MixtureOrderTest, WeightChangeTakesEffectAtTheEpochBoundary) {
  const MixtureSpec old_spec = ThreeSources();
  // From epoch 5 on: 0.1, 0.1, 0.8, each source continuing where it was.
  MixtureSpec new_spec = old_spec;
  const std::vector<uint64_t> units = QuantizeWeights({0.1, 0.1, 0.8});
  const std::vector<uint64_t> cursors = CursorsAt(old_spec, 5);
  for (size_t s = 0; s < 3; ++s) {
    new_spec.sources[s].weight_units = units[s];
    new_spec.sources[s].start_cursor = cursors[s];
  }
  new_spec.cursor_epoch = 5;
  EXPECT_THAT(MixtureQuotas(old_spec), ElementsAre(280, 80, 40));
  EXPECT_THAT(MixtureQuotas(new_spec), ElementsAre(40, 40, 320));
  std::vector<std::vector<uint64_t>> streams(3);
  for (uint64_t epoch = 0; epoch < 8; ++epoch) {
    const MixtureSpec& spec = epoch < 5 ? old_spec : new_spec;
    const auto per_source = PerSource(spec, 11, true, epoch);
    for (size_t s = 0; s < 3; ++s) {
      EXPECT_EQ(per_source[s].size(), MixtureQuotas(spec)[s])
          << "epoch " << epoch << " source " << s;
      streams[s].insert(streams[s].end(), per_source[s].begin(),
                        per_source[s].end());
    }
  }
  // Every source's stream goes on through the change: no pass restarted,
  // no sample skipped or repeated within a pass.
  for (size_t s = 0; s < 3; ++s) {
    for (uint64_t k = 0; k < streams[s].size(); ++k) {
      ASSERT_EQ(streams[s][k], StreamSample(old_spec, s, 11, true, k))
          << "source " << s << " position " << k;
    }
  }
  // The old spec's cursors before its epoch, and the new one's back from
  // its cursor epoch, are pure functions too.
  EXPECT_EQ(CursorAt(new_spec, 2, 6), cursors[2] + 320);
  EXPECT_EQ(CursorAt(new_spec, 0, 4), cursors[0] - 40);
  EXPECT_EQ(CursorAt(new_spec, 2, 4), 0u);  // 200 - 320, at least 0
}

// A run on 3 ranks checkpoints part-way through an epoch, and one on 2
// ranks resumes it: every entry of the epoch (every (source, sample,
// occurrence)) is delivered exactly once, padding aside.
TEST(MixtureShardTest, ResumeOnAnotherWorldSizeContinuesEverySource) {
  auto mixture = std::make_shared<const MixtureSpec>(ThreeSources(401));
  ShardSpec spec;
  spec.num_samples = TotalSamples(*mixture);
  spec.seed = 5;
  spec.shuffle = true;
  spec.batch_size = 8;
  spec.world_size = 3;
  spec.mixture = mixture;
  const uint64_t epoch = 7;
  EXPECT_EQ(EpochLength(spec), 401u);
  const std::vector<uint64_t> order = EpochOrderFor(spec, epoch);
  ASSERT_EQ(order, MixtureOrder(*mixture, 5, true, epoch));
  std::multiset<uint64_t> delivered;
  const uint64_t taken = 5;  // batches per rank before the checkpoint
  for (uint32_t rank = 0; rank < 3; ++rank) {
    spec.rank = rank;
    for (uint64_t b = 0; b < taken; ++b) {
      for (uint64_t e : BatchIndicesFromOrder(spec, order, b)) {
        delivered.insert(e);
      }
    }
  }
  const uint64_t position = GlobalPosition(spec, taken);
  ASSERT_EQ(position, 120u);
  ShardSpec resumed = spec;
  resumed.world_size = 2;
  resumed.batch_size = 12;
  resumed.start_position = position;
  resumed.rank = 0;
  const uint64_t padding = ShardSize(resumed) * 2 - (401 - position);
  std::multiset<uint64_t> second;
  for (uint32_t rank = 0; rank < 2; ++rank) {
    resumed.rank = rank;
    for (uint64_t b = 0; b < BatchesPerEpoch(resumed); ++b) {
      for (uint64_t e : BatchIndicesFromOrder(resumed, order, b)) {
        second.insert(e);
      }
    }
  }
  EXPECT_EQ(second.size(), 401 - position + padding);
  // Padding wraps to the epoch order's head; drop one of each.
  ASSERT_GT(padding, 0u);
  for (uint64_t p = 0; p < padding; ++p) {
    auto it = second.find(order[p]);
    ASSERT_NE(it, second.end());
    second.erase(it);
  }
  delivered.insert(second.begin(), second.end());
  EXPECT_EQ(delivered,
            std::multiset<uint64_t>(order.begin(), order.end()));
  std::vector<uint64_t> counts(3, 0);
  for (uint64_t e : delivered) {
    ++counts[DecodeEntry(SourceOffsets(*mixture), spec.num_samples, e).source];
  }
  EXPECT_EQ(counts, MixtureQuotas(*mixture));
}

TEST(MixtureShardTest, EpochOrderCacheKeysTheMixture) {
  auto a = std::make_shared<const MixtureSpec>(ThreeSources());
  MixtureSpec moved = ThreeSources();
  moved.sources[0].start_cursor = 3;
  auto b = std::make_shared<const MixtureSpec>(moved);
  ShardSpec spec;
  spec.num_samples = TotalSamples(*a);
  spec.mixture = a;
  EpochOrderCache cache;
  const auto first = cache.Get(spec, 0);
  spec.mixture = b;
  const auto second = cache.Get(spec, 0);
  EXPECT_EQ(*first, MixtureOrder(*a, 0, false, 0));
  EXPECT_EQ(*second, MixtureOrder(*b, 0, false, 0));
  EXPECT_NE(*first, *second);
  EXPECT_EQ(cache.computed(), 2u);
}

}  // namespace
}  // namespace batchd::common
