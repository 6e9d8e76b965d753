#include "server/storage/shard_demand.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace batchd::server {
namespace {

using ::testing::ElementsAre;

// A dataset of `shards` shards of `per_shard` samples, each `member_bytes`:
// sample i is in shard i / per_shard.
struct Layout {
  uint32_t shards = 8;
  uint64_t per_shard = 8;
  uint64_t member_bytes = 1000;

  uint64_t samples() const { return shards * per_shard; }
  uint64_t shard_bytes() const { return per_shard * member_bytes; }
  SampleLocation Locate(uint64_t sample) const {
    return {static_cast<uint32_t>(sample / per_shard), member_bytes};
  }
  std::shared_ptr<const std::vector<uint64_t>> ShardSamples() const {
    return std::make_shared<const std::vector<uint64_t>>(shards, per_shard);
  }
};

struct Job {
  uint64_t seed = 1;
  uint32_t window = 0;  // 0: per-sample shuffle
  uint64_t start_position = 0;
  uint32_t world_size = 1;
  uint32_t batch_size = 1;
};

common::ShardSpec SpecFor(const Layout& layout, const Job& job,
                          uint32_t rank) {
  common::ShardSpec spec;
  spec.num_samples = layout.samples();
  spec.seed = job.seed;
  spec.shuffle = true;
  spec.rank = rank;
  spec.world_size = job.world_size;
  spec.batch_size = job.batch_size;
  spec.start_position = job.start_position;
  spec.shuffle_window_shards = job.window;
  spec.shard_samples = layout.ShardSamples();
  return spec;
}

TEST(ShardForecastTest, NextUseReadsAndHorizon) {
  // Shard 0 at 0, 3; shard 1 at 1; shard 2 at 2, 5.
  ShardForecast forecast({{0, 3, 10}, {2, 5, 30}, {0, 0, 10}, {1, 1, 20},
                          {2, 2, 30}});
  EXPECT_EQ(forecast.NextUse(0), 0u);
  EXPECT_EQ(forecast.NextUse(1), 1u);
  EXPECT_EQ(forecast.NextUse(2), 2u);
  EXPECT_EQ(forecast.NextUse(7), ShardForecast::kNever);
  EXPECT_EQ(forecast.ReadsBefore(0, 3).count, 1u);
  EXPECT_EQ(forecast.ReadsBefore(0, 4).count, 2u);
  EXPECT_EQ(forecast.ReadsBefore(0, 4).bytes, 20u);
  EXPECT_EQ(forecast.ReadsBefore(2, ShardForecast::kNever).bytes, 60u);
  EXPECT_EQ(forecast.ReadsBefore(7, 100).count, 0u);
  EXPECT_THAT(forecast.ShardsByNextUse(), ElementsAre(0, 1, 2));
  auto hundred = [](uint32_t) -> uint64_t { return 100; };
  EXPECT_EQ(forecast.HoldHorizon(250, hundred), 2u);  // shard 2 does not fit
  EXPECT_EQ(forecast.HoldHorizon(300, hundred), ShardForecast::kNever);
  EXPECT_EQ(forecast.reads(), 5u);
  EXPECT_EQ(forecast.depth(), 5u);
}

TEST(EvictionOrderTest, FurthestNextUseFirstThenLeastRecentlyUsed) {
  std::vector<EvictionCandidate> candidates = {
      {/*next_use=*/5, /*idle_rank=*/0},
      {ShardForecast::kNever, 1},
      {40, 9},
      {ShardForecast::kNever, 3},
      {40, 2}};
  EXPECT_THAT(EvictionOrder(candidates), ElementsAre(3, 1, 2, 4, 0));
}

TEST(ChooseFetchTest, RangesOnlyWhenTheirReadsCostLessThanTheShard) {
  const FetchCosts costs{/*request_bytes=*/100, /*chunk_bytes=*/1000};
  // Whole: 4000 + 4 requests = 4400.
  EXPECT_EQ(ChooseFetch(4000, {/*count=*/2, /*bytes=*/1000}, costs),
            ShardFetch::kRanges);  // 1200
  EXPECT_EQ(ChooseFetch(4000, {4, 4000}, costs), ShardFetch::kWhole);  // 4400
  EXPECT_EQ(ChooseFetch(4000, {0, 0}, costs), ShardFetch::kRanges);
  EXPECT_EQ(ChooseFetch(4000, {30, 3000}, costs), ShardFetch::kWhole);
}

TEST(ShardDemandTest, PublishForgetAndStaleReadersAreDropped) {
  Layout layout;
  absl::Time now = absl::UnixEpoch();
  ShardDemand demand([&](uint64_t s) { return layout.Locate(s); },
                     [&] { return now; });
  const common::ShardSpec spec = SpecFor(layout, {.window = 1}, 0);
  auto order = std::make_shared<const std::vector<uint64_t>>(
      common::EpochOrderFor(spec, 0));
  demand.Publish("a", spec, order, /*next_batch=*/0);
  std::shared_ptr<const ShardForecast> f = demand.ForecastNow();
  // The rest of the epoch, and the next with this order standing in.
  EXPECT_EQ(f->reads(), 2 * layout.samples());
  // Window 1: the first shard of the permutation is read first, whole.
  const uint32_t first = layout.Locate((*order)[0]).shard;
  EXPECT_EQ(f->NextUse(first), 0u);
  EXPECT_EQ(f->ReadsBefore(first, layout.per_shard).count, layout.per_shard);

  // Behind the last publication in the same order: ignored.
  demand.Publish("a", spec, order, 5);
  demand.Publish("a", spec, order, 3);
  EXPECT_EQ(demand.ForecastNow()->reads(), 2 * layout.samples() - 5);

  // Unmoved: the same forecast. Moved, but sooner after the last build
  // than ten times what it took (the clock here stands still): the same.
  std::shared_ptr<const ShardForecast> g = demand.Forecast();
  EXPECT_EQ(demand.Forecast(), g);
  demand.Publish("a", spec, order, 6);
  EXPECT_EQ(demand.Forecast(), g);
  now += absl::Seconds(1);
  EXPECT_NE(demand.Forecast(), g);

  demand.Forget("a");
  EXPECT_EQ(demand.ForecastNow()->reads(), 0u);
  demand.Publish("b", spec, order, 0);
  now += ShardDemand::kReaderIdle + absl::Seconds(1);
  EXPECT_EQ(demand.ForecastNow()->reads(), 0u);
  EXPECT_EQ(demand.readers(), 0u);
}

// A stream's first batch is published as it is accepted, before any of its
// samples is read, and a reader new to an order is in the next forecast
// whatever the spacing; a later start in an order it already reads moves
// nothing.
TEST(ShardDemandTest, PublishStartIsSeenAtOnceAndOnlyOncePerOrder) {
  Layout layout;
  absl::Time now = absl::UnixEpoch();  // stands still: no spacing elapses
  ShardDemand demand([&](uint64_t s) { return layout.Locate(s); },
                     [&] { return now; });
  const common::ShardSpec spec = SpecFor(layout, {.window = 1}, 0);
  auto order = std::make_shared<const std::vector<uint64_t>>(
      common::EpochOrderFor(spec, 0));
  demand.Publish("a", spec, order, /*next_batch=*/0);
  std::shared_ptr<const ShardForecast> first = demand.ForecastNow();
  demand.Publish("a", spec, order, 4);
  ASSERT_EQ(demand.Forecast(), first);  // moved, but within the spacing

  demand.PublishStart("b", spec, order, /*first_batch=*/0);
  std::shared_ptr<const ShardForecast> with_b = demand.Forecast();
  EXPECT_NE(with_b, first);
  EXPECT_EQ(with_b->reads(), 2 * (2 * layout.samples()) - 4);

  // "b" advanced past 10; a start at 2 in the same order is ignored.
  demand.Publish("b", spec, order, 10);
  demand.PublishStart("b", spec, order, 2);
  EXPECT_EQ(demand.ForecastNow()->reads(),
            2 * (2 * layout.samples()) - 4 - 10);

  // The next epoch's order: a start there is taken, and rebuilt at once.
  auto next = std::make_shared<const std::vector<uint64_t>>(
      common::EpochOrderFor(spec, 1));
  std::shared_ptr<const ShardForecast> before = demand.Forecast();
  demand.PublishStart("b", spec, next, 0);
  std::shared_ptr<const ShardForecast> after = demand.Forecast();
  EXPECT_NE(after, before);
  EXPECT_EQ(after->reads(), 2 * (2 * layout.samples()) - 4);
}

// The reads of an epoch of several jobs, interleaved one sample each in
// turn (jobs are taken to run at the same rate), and the reader each comes
// from with the batch it starts.
struct Access {
  size_t reader = 0;
  uint32_t shard = 0;
  uint64_t bytes = 0;
  bool batch_start = false;
  uint64_t batch = 0;
};

struct Reader {
  std::string name;
  common::ShardSpec spec;
  std::shared_ptr<const std::vector<uint64_t>> order;
};

std::vector<Access> Interleave(const Layout& layout,
                               const std::vector<Reader>& readers) {
  std::vector<std::vector<Access>> each(readers.size());
  for (size_t r = 0; r < readers.size(); ++r) {
    const Reader& reader = readers[r];
    for (uint64_t b = 0; b < common::BatchesPerEpoch(reader.spec); ++b) {
      std::vector<uint64_t> batch =
          common::BatchIndicesFromOrder(reader.spec, *reader.order, b);
      for (size_t i = 0; i < batch.size(); ++i) {
        const SampleLocation where = layout.Locate(batch[i]);
        each[r].push_back({r, where.shard, where.bytes, i == 0, b});
      }
    }
  }
  std::vector<Access> all;
  for (size_t i = 0;; ++i) {
    bool any = false;
    for (auto& accesses : each) {
      if (i < accesses.size()) {
        all.push_back(accesses[i]);
        any = true;
      }
    }
    if (!any) break;
  }
  return all;
}

struct Outcome {
  uint64_t bytes = 0;
  uint64_t requests = 0;
  uint64_t misses = 0;
  uint64_t cost(const FetchCosts& costs) const {
    return bytes + requests * costs.request_bytes;
  }
};

enum class Policy {
  kForecast,       // Belady eviction and the cost model (what the cache does)
  kLruWhole,       // least recently used, every miss a whole shard
  kBeladyWhole,    // Belady eviction, every miss a whole shard
};

// Replays `accesses` on a cache of `capacity` bytes the way the shard cache
// decides, asking a ShardDemand fed by the readers as they advance.
// Asserts the bytes held never pass the capacity.
Outcome Simulate(const Layout& layout, const std::vector<Reader>& readers,
                 const std::vector<Access>& accesses, uint64_t capacity,
                 const FetchCosts& costs, Policy policy) {
  ShardDemand demand([&](uint64_t s) { return layout.Locate(s); });
  std::map<uint32_t, uint64_t> cached;  // shard -> last use (tick)
  Outcome out;
  uint64_t tick = 0;
  const uint64_t chunks =
      (layout.shard_bytes() + costs.chunk_bytes - 1) / costs.chunk_bytes;
  for (const Access& access : accesses) {
    ++tick;
    const Reader& reader = readers[access.reader];
    if (access.batch_start) {
      demand.Publish(reader.name, reader.spec, reader.order, access.batch);
    }
    auto hit = cached.find(access.shard);
    if (hit != cached.end()) {
      hit->second = tick;
      continue;
    }
    ++out.misses;
    std::shared_ptr<const ShardForecast> forecast = demand.ForecastNow();
    ShardFetch fetch = ShardFetch::kWhole;
    if (layout.shard_bytes() > capacity) {
      fetch = ShardFetch::kRanges;
    } else if (policy == Policy::kForecast) {
      const uint64_t horizon = forecast->HoldHorizon(
          capacity, [&](uint32_t) { return layout.shard_bytes(); });
      fetch = ChooseFetch(layout.shard_bytes(),
                          forecast->ReadsBefore(access.shard, horizon), costs);
    }
    if (fetch == ShardFetch::kRanges) {
      out.bytes += access.bytes;
      out.requests += 1;
      continue;
    }
    out.bytes += layout.shard_bytes();
    out.requests += chunks;
    while ((cached.size() + 1) * layout.shard_bytes() > capacity) {
      std::vector<uint32_t> shards;
      std::vector<EvictionCandidate> candidates;
      for (const auto& [shard, last] : cached) {
        shards.push_back(shard);
        candidates.push_back(
            {policy == Policy::kLruWhole ? ShardForecast::kNever
                                         : forecast->NextUse(shard),
             tick - last});
      }
      cached.erase(shards[EvictionOrder(candidates).front()]);
    }
    cached[access.shard] = tick;
    EXPECT_LE(cached.size() * layout.shard_bytes(), capacity);
  }
  return out;
}

// The least cost of `accesses` on a cache of `slots` whole shards, each miss
// either a member range or a whole shard (evicting any shard): exhaustive,
// memoised on (position, shards held).
uint64_t OptimalCost(const Layout& layout, const std::vector<Access>& accesses,
                     int slots, const FetchCosts& costs, bool ranges_allowed,
                     bool count_misses = false) {
  const uint64_t chunks =
      (layout.shard_bytes() + costs.chunk_bytes - 1) / costs.chunk_bytes;
  const uint64_t whole = count_misses
                             ? 1
                             : layout.shard_bytes() + chunks * costs.request_bytes;
  std::vector<absl::flat_hash_map<uint32_t, uint64_t>> memo(accesses.size() +
                                                            1);
  std::function<uint64_t(size_t, uint32_t)> best = [&](size_t pos,
                                                       uint32_t held) {
    if (pos == accesses.size()) return uint64_t{0};
    auto it = memo[pos].find(held);
    if (it != memo[pos].end()) return it->second;
    const uint32_t bit = uint32_t{1} << accesses[pos].shard;
    uint64_t cost;
    if (held & bit) {
      cost = best(pos + 1, held);
    } else {
      cost = std::numeric_limits<uint64_t>::max();
      if (ranges_allowed) {
        cost = accesses[pos].bytes + costs.request_bytes + best(pos + 1, held);
      }
      if (__builtin_popcount(held) < slots) {
        cost = std::min(cost, whole + best(pos + 1, held | bit));
      } else {
        for (uint32_t victim = held; victim != 0; victim &= victim - 1) {
          const uint32_t v = victim & (~victim + 1);
          cost = std::min(cost, whole + best(pos + 1, (held & ~v) | bit));
        }
      }
    }
    memo[pos][held] = cost;
    return cost;
  };
  return best(0, 0);
}

std::vector<Reader> Readers(const Layout& layout, const std::vector<Job>& jobs,
                            uint64_t epoch = 0) {
  std::vector<Reader> readers;
  for (size_t j = 0; j < jobs.size(); ++j) {
    for (uint32_t rank = 0; rank < jobs[j].world_size; ++rank) {
      Reader reader;
      reader.name = "job" + std::to_string(j) + "/" + std::to_string(rank);
      reader.spec = SpecFor(layout, jobs[j], rank);
      reader.order = std::make_shared<const std::vector<uint64_t>>(
          common::EpochOrderFor(reader.spec, epoch));
      readers.push_back(std::move(reader));
    }
  }
  return readers;
}

// With whole shards only, one reader and a forecast one sample at a time,
// Belady's eviction misses exactly as often as the optimum.
// A reader in its epoch's last shard (window 1): the shards it read
// earlier are read again only in the next epoch, which its current order
// stands in for. They count for eviction (NextUse) but not as known reads
// (NextKnownUse), so nothing is fetched ahead for a guessed order.
TEST(ShardDemandTest, TheNextEpochsReadsAreNotKnownUses) {
  Layout layout;
  ShardDemand demand([&](uint64_t s) { return layout.Locate(s); });
  const common::ShardSpec spec = SpecFor(layout, {.window = 1}, 0);
  auto order = std::make_shared<const std::vector<uint64_t>>(
      common::EpochOrderFor(spec, 0));
  const uint64_t last_shard_batch = layout.samples() - layout.per_shard;
  demand.Publish("a", spec, order, last_shard_batch);
  std::shared_ptr<const ShardForecast> f = demand.ForecastNow();
  const uint32_t last = layout.Locate((*order)[last_shard_batch]).shard;
  const uint32_t first = layout.Locate((*order)[0]).shard;
  EXPECT_EQ(f->NextKnownUse(last), 0u);
  EXPECT_EQ(f->NextUse(first), layout.per_shard);
  EXPECT_EQ(f->NextKnownUse(first), ShardForecast::kNever);
  // A second reader at its epoch's start reads `first` first: known.
  demand.Publish("b", spec, order, 0);
  EXPECT_EQ(demand.ForecastNow()->NextKnownUse(first), 0u);
  // A forecast built from reads alone takes them all as known.
  ShardForecast plain({{3, 7, 10}});
  EXPECT_EQ(plain.NextKnownUse(3), 7u);
}

TEST(ShardDemandSimulationTest, BeladyMissesAsFewAsTheOptimum) {
  Layout layout{/*shards=*/6, /*per_shard=*/6, /*member_bytes=*/100};
  const FetchCosts costs{/*request_bytes=*/0, /*chunk_bytes=*/1 << 20};
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    for (int slots = 1; slots <= 4; ++slots) {
      const std::vector<Reader> readers = Readers(layout, {{.seed = seed}});
      const std::vector<Access> accesses = Interleave(layout, readers);
      const Outcome belady =
          Simulate(layout, readers, accesses, slots * layout.shard_bytes(),
                   costs, Policy::kBeladyWhole);
      EXPECT_EQ(belady.misses,
                OptimalCost(layout, accesses, slots, costs,
                            /*ranges_allowed=*/false, /*count_misses=*/true))
          << "seed " << seed << ", " << slots << " slots";
    }
  }
}

struct Scenario {
  std::string name;
  std::vector<Job> jobs;
  // The cost allowed against the optimum. Two jobs' per-sample shuffles
  // through a cache of half the dataset or more are the known gap: the
  // optimum keeps a fixed subset of the shards whole for both jobs and
  // reads the rest by ranges; the forecast reads them all by ranges (each
  // shard's next reads are all as near), which is what one job alone would
  // fetch for each job.
  double bound = 1.25;
};

std::vector<Scenario> Scenarios() {
  std::vector<Scenario> scenarios = {
      {"per-sample shuffle", {{.seed = 3}}},
      {"two jobs, per-sample", {{.seed = 3}, {.seed = 4}}, 1.7},
      {"resume at position 20", {{.seed = 5, .start_position = 20}}},
      {"two ranks, batch 4", {{.seed = 6, .world_size = 2, .batch_size = 4}}},
  };
  for (uint32_t window : {1, 2, 4, 8}) {
    scenarios.push_back({"window " + std::to_string(window),
                         {{.seed = 7, .window = window}}});
  }
  scenarios.push_back({"two jobs, window 1 and 2",
                       {{.seed = 8, .window = 1}, {.seed = 9, .window = 2}}});
  return scenarios;
}

// The forecast's choices against the exhaustive optimum (bytes plus a cost
// per request), for each access pattern and cache size, on small cases;
// and against today's least-recently-used whole shards.
TEST(ShardDemandSimulationTest, ForecastCostIsNearTheOptimum) {
  Layout layout{/*shards=*/6, /*per_shard=*/8, /*member_bytes=*/1000};
  const FetchCosts costs{/*request_bytes=*/200, /*chunk_bytes=*/4000};
  double worst = 0;
  for (const Scenario& scenario : Scenarios()) {
    for (int slots = 1; slots <= 4; ++slots) {
      const std::vector<Reader> readers = Readers(layout, scenario.jobs);
      const std::vector<Access> accesses = Interleave(layout, readers);
      const uint64_t capacity = slots * layout.shard_bytes();
      const Outcome ours = Simulate(layout, readers, accesses, capacity,
                                    costs, Policy::kForecast);
      const Outcome lru = Simulate(layout, readers, accesses, capacity, costs,
                                   Policy::kLruWhole);
      const uint64_t optimum =
          OptimalCost(layout, accesses, slots, costs, /*ranges_allowed=*/true);
      const double ratio = static_cast<double>(ours.cost(costs)) / optimum;
      worst = std::max(worst, ratio);
      std::printf("%-26s %d/%u shards: ours %7lu  lru-whole %7lu  optimum "
                  "%7lu  ratio %.2f\n",
                  scenario.name.c_str(), slots, layout.shards,
                  ours.cost(costs), lru.cost(costs), optimum, ratio);
      EXPECT_LE(ratio, scenario.bound) << scenario.name << ", " << slots << " slots";
      EXPECT_LE(ours.cost(costs), lru.cost(costs))
          << scenario.name << ", " << slots << " slots";
    }
  }
  std::printf("worst ratio to the optimum: %.3f\n", worst);
}

// The case, scaled down: a per-sample shuffle through a cache of a
// quarter of the dataset. Whole shards on every miss fetch the dataset many
// times over; the forecast fetches at most 1.2x the members read.
TEST(ShardDemandSimulationTest, PerSampleShuffleFetchesAboutTheMembersRead) {
  Layout layout{/*shards=*/8, /*per_shard=*/250, /*member_bytes=*/4000};
  const FetchCosts costs;  // the defaults
  const std::vector<Reader> readers = Readers(layout, {{.seed = 11}});
  const std::vector<Access> accesses = Interleave(layout, readers);
  const uint64_t dataset = layout.shards * layout.shard_bytes();
  const Outcome ours = Simulate(layout, readers, accesses, dataset / 4, costs,
                                Policy::kForecast);
  const Outcome lru = Simulate(layout, readers, accesses, dataset / 4, costs,
                               Policy::kLruWhole);
  std::printf("per-sample shuffle, cache 25%%: forecast %.2fx the dataset "
              "(%lu requests), lru-whole %.2fx\n",
              static_cast<double>(ours.bytes) / dataset, ours.requests,
              static_cast<double>(lru.bytes) / dataset);
  EXPECT_LE(ours.bytes, dataset * 12 / 10);
  EXPECT_GT(lru.bytes, dataset * 10);

  // Window 1 through the same cache: each shard once, whole.
  const std::vector<Reader> window =
      Readers(layout, {{.seed = 11, .window = 1, .batch_size = 50}});
  const Outcome shard_aware =
      Simulate(layout, window, Interleave(layout, window), dataset / 4, costs,
               Policy::kForecast);
  EXPECT_EQ(shard_aware.bytes, dataset);
}

// ImageNet's shape: 1.28M samples in 1,024 shards, 64 readers (8 jobs of 8
// ranks, batch 256). The forecast holds its bound and is built in
// milliseconds.
TEST(ShardDemandTest, ForecastAtImageNetScaleStaysBounded) {
  Layout layout{/*shards=*/1024, /*per_shard=*/1251, /*member_bytes=*/110000};
  ShardDemand demand([&](uint64_t s) { return layout.Locate(s); });
  std::vector<Reader> readers;
  for (uint64_t job = 0; job < 8; ++job) {
    std::vector<Reader> ranks = Readers(
        layout, {{.seed = job, .window = job % 2 == 0 ? 0u : 16u,
                  .world_size = 8, .batch_size = 256}});
    for (Reader& r : ranks) {
      r.name = "job" + std::to_string(job) + "/" + r.name;
      readers.push_back(std::move(r));
    }
  }
  for (const Reader& r : readers) demand.Publish(r.name, r.spec, r.order, 10);
  const auto start = std::chrono::steady_clock::now();
  std::shared_ptr<const ShardForecast> forecast = demand.ForecastNow();
  const double ms = std::chrono::duration<double, std::milli>(
                        std::chrono::steady_clock::now() - start)
                        .count();
  std::printf("64 readers, 1.28M samples, 1,024 shards: %lu reads walked "
              "(%.1f MiB), built in %.1f ms\n",
              forecast->reads(), forecast->reads() * 12.0 / (1 << 20), ms);
  EXPECT_EQ(demand.readers(), 64u);
  EXPECT_LE(forecast->reads(), ShardDemand::kMaxForecastReads);
  EXPECT_GE(forecast->reads(), ShardDemand::kMaxForecastReads - 64 * 256);
  EXPECT_EQ(forecast->depth() + 1,
            ShardDemand::kMaxForecastReads / readers.size());
}

// Readers publishing from several threads while others take forecasts
// (the pipeline's workers and the cache's readers do this; TSan checks it).
TEST(ShardDemandTest, PublishAndForecastFromManyThreads) {
  Layout layout{/*shards=*/16, /*per_shard=*/64, /*member_bytes=*/1000};
  ShardDemand demand([&](uint64_t s) { return layout.Locate(s); });
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      const std::vector<Reader> readers =
          Readers(layout, {{.seed = static_cast<uint64_t>(t), .batch_size = 8}});
      for (uint64_t batch = 0; batch < 128; ++batch) {
        demand.Publish("reader" + std::to_string(t), readers[0].spec,
                       readers[0].order, batch);
      }
      demand.Forget("reader" + std::to_string(t));
    });
  }
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        std::shared_ptr<const ShardForecast> forecast = demand.Forecast();
        EXPECT_LE(forecast->reads(), 4 * 2 * layout.samples());
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(demand.readers(), 0u);
  EXPECT_EQ(demand.ForecastNow()->reads(), 0u);
}

// After a resume part-way into an epoch, the epoch that stands in for the
// next is whole: every shard's reads, not the resumed part's twice.
TEST(ShardDemandTest, AResumedReadersNextEpochIsWhole) {
  Layout layout;
  ShardDemand demand([&](uint64_t s) { return layout.Locate(s); });
  Job job{.seed = 3, .window = 1};
  job.start_position = layout.samples() / 2;
  const common::ShardSpec spec = SpecFor(layout, job, 0);
  auto order = std::make_shared<const std::vector<uint64_t>>(
      common::EpochOrderFor(spec, 0));
  demand.Publish("resumed", spec, order, 0);
  std::shared_ptr<const ShardForecast> forecast = demand.ForecastNow();
  EXPECT_EQ(forecast->reads(), layout.samples() / 2 + layout.samples());
  for (uint32_t shard = 0; shard < layout.shards; ++shard) {
    EXPECT_GE(forecast->ReadsBefore(shard, ShardForecast::kNever).count,
              layout.per_shard)
        << "shard " << shard;
  }
}

TEST(ShardDemandTest, ReadersBeyondTheBoundDropTheLeastRecentlyAdvanced) {
  Layout layout;
  absl::Time now = absl::UnixEpoch();
  ShardDemand demand([&](uint64_t s) { return layout.Locate(s); },
                     [&] { return now; });
  const common::ShardSpec spec = SpecFor(layout, {}, 0);
  auto order = std::make_shared<const std::vector<uint64_t>>(
      common::EpochOrderFor(spec, 0));
  for (size_t i = 0; i < ShardDemand::kMaxReaders + 10; ++i) {
    now += absl::Milliseconds(1);
    demand.Publish("r" + std::to_string(i), spec, order, 0);
  }
  EXPECT_EQ(demand.readers(), ShardDemand::kMaxReaders);
  EXPECT_LE(demand.ForecastNow()->reads(), ShardDemand::kMaxForecastReads);
}

// Seen from a later point, the shards read only before it are gone: the
// horizon is that of the shards read from then on.
TEST(ShardForecastTest, HoldHorizonFromALaterPointForgetsEarlierShards) {
  // Shard 0 at distances 0-3, shard 1 at 4-7, shard 2 at 8-11; 10 bytes each.
  std::vector<ShardForecast::Read> reads;
  for (uint32_t d = 0; d < 12; ++d) reads.push_back({d / 4, d, 10});
  const ShardForecast forecast(reads);
  auto bytes = [](uint32_t) { return uint64_t{100}; };
  // Room for one shard: from now, shard 1 comes after shard 0 and is past
  // the horizon; from its first read, it is the first held.
  EXPECT_EQ(forecast.HoldHorizon(100, bytes), 4u);
  EXPECT_EQ(forecast.HoldHorizonFrom(0, 100, bytes), 4u);
  EXPECT_EQ(forecast.HoldHorizonFrom(4, 100, bytes), 8u);
  EXPECT_EQ(forecast.HoldHorizonFrom(6, 100, bytes), 8u);
  EXPECT_EQ(forecast.HoldHorizonFrom(8, 100, bytes), ShardForecast::kNever);
  EXPECT_EQ(forecast.HoldHorizonFrom(12, 100, bytes), ShardForecast::kNever);
  const ShardReads between = forecast.ReadsBetween(1, 4, 8);
  EXPECT_EQ(between.count, 4u);
  EXPECT_EQ(between.bytes, 40u);
  EXPECT_EQ(forecast.ReadsBetween(1, 6, 8).count, 2u);
  EXPECT_EQ(forecast.ReadsBetween(1, 0, 4).count, 0u);
}

}  // namespace
}  // namespace batchd::server
