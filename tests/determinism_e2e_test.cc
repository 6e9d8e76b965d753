// End-to-end: a batch is a pure function of (plan, epoch, batch index).
// Against real daemons: the bytes do not depend on the worker count or on
// restarts, the seed changes them, NCHW is the transpose of NHWC, shards
// cover each epoch exactly once (DistributedSampler padding aside), and a
// restored loader continues byte-for-byte.
#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/loader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/daemon_process.h"
#include "testing/e2e_fixture.h"
#include "testing/e2e_helpers.h"

namespace batchd::testing {
namespace {

using batchd::client::Loader;
using batchd::client::LoaderOptions;
using batchd::client::LoaderState;
using ::testing::ElementsAre;

constexpr int kImages = 50;  // not divisible by 3 nor by the batch sizes
constexpr uint32_t kSize = 32;
constexpr uint64_t kChannels = 3;

class DeterminismTest
    : public DatasetSuite</*images=*/kImages, /*classes=*/5,
                          /*seed=*/21> {
 protected:
  static absl::StatusOr<std::unique_ptr<DaemonProcess>> StartDaemon(
      int workers) {
    return DaemonProcess::Start({"--dataset", "d=" + *dataset_, "--workers",
                                 std::to_string(workers)});
  }
};

// Pixel bytes of sample `position` of `record`.
std::string SampleBytes(const BatchRecord& record, size_t position) {
  const size_t per_sample = record.pixels.size() / record.sample_indices.size();
  return record.pixels.substr(position * per_sample, per_sample);
}

TEST_F(DeterminismTest, SameBytesForAnyWorkerCountAndAcrossRestarts) {
  const v1::Plan plan = TrainPlan("d", 8, kSize, 11);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DaemonProcess> one, StartDaemon(1));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DaemonProcess> three,
                           StartDaemon(3));

  ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> reference,
                           ReadEpochs(one->endpoint(), plan, 0, 2));
  // 2 epochs of ceil(50 / 8) = 7 batches; the last of each holds 2 samples.
  // Epoch 1's first 4 (the window) are read ahead while epoch 0 ends.
  ASSERT_EQ(reference.size(), 14u);
  EXPECT_THAT(reference[0].shape, ElementsAre(8, kSize, kSize, kChannels));
  EXPECT_THAT(reference[6].shape, ElementsAre(2, kSize, kSize, kChannels));
  EXPECT_EQ(reference[6].pixels.size(), 2 * kSize * kSize * kChannels);
  // Shuffled per epoch: epoch 1's order differs from epoch 0's.
  EXPECT_NE(reference[0].sample_indices, reference[7].sample_indices);

  ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> with_three,
                           ReadEpochs(three->endpoint(), plan, 0, 2));
  EXPECT_EQ(with_three, reference);

  // Stop and start again, twice: still the same bytes.
  for (int restart = 0; restart < 2; ++restart) {
    EXPECT_EQ(one->Stop(), 0) << one->Log();
    ASSERT_OK_AND_ASSIGN(one, StartDaemon(1));
    ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> again,
                             ReadEpochs(one->endpoint(), plan, 0, 2));
    EXPECT_EQ(again, reference) << "after restart " << restart;
  }
  EXPECT_EQ(one->Stop(), 0) << one->Log();
  EXPECT_EQ(three->Stop(), 0) << three->Log();
}

TEST_F(DeterminismTest, ADifferentSeedGivesDifferentBytes) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DaemonProcess> daemon,
                           StartDaemon(2));
  // Shuffled: the order changes.
  const v1::Plan plan = TrainPlan("d", 8, kSize, 11);
  v1::Plan reseeded = plan;
  reseeded.set_seed(12);
  ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> a,
                           ReadEpochs(daemon->endpoint(), plan, 0));
  ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> b,
                           ReadEpochs(daemon->endpoint(), reseeded, 0));
  ASSERT_EQ(a.size(), b.size());
  int same_order = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].sample_indices == b[i].sample_indices) ++same_order;
    EXPECT_NE(a[i].pixels, b[i].pixels) << "batch " << i;
  }
  EXPECT_EQ(same_order, 0);

  // Not shuffled: the same order, but different crops and flips.
  v1::Plan ordered = plan;
  ordered.set_shuffle(false);
  v1::Plan ordered_reseeded = ordered;
  ordered_reseeded.set_seed(12);
  ASSERT_OK_AND_ASSIGN(a, ReadEpochs(daemon->endpoint(), ordered, 0));
  ASSERT_OK_AND_ASSIGN(b,
                           ReadEpochs(daemon->endpoint(), ordered_reseeded, 0));
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].sample_indices, b[i].sample_indices);
    EXPECT_EQ(a[i].labels, b[i].labels);
    EXPECT_NE(a[i].pixels, b[i].pixels) << "batch " << i;
  }
  EXPECT_EQ(daemon->Stop(), 0) << daemon->Log();
}

TEST_F(DeterminismTest, NchwIsTheTransposeOfNhwc) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DaemonProcess> daemon,
                           StartDaemon(2));
  for (bool train : {true, false}) {
    SCOPED_TRACE(train ? "train" : "eval");
    v1::Plan nhwc = train ? TrainPlan("d", 8, kSize, 5) : EvalPlan("d", 8, 24, 5);
    v1::Plan nchw = nhwc;
    nchw.mutable_pipeline()->set_layout(v1::LAYOUT_NCHW);
    ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> a,
                             ReadEpochs(daemon->endpoint(), nhwc, 0));
    ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> b,
                             ReadEpochs(daemon->endpoint(), nchw, 0));
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].layout, v1::LAYOUT_NHWC);
      EXPECT_EQ(b[i].layout, v1::LAYOUT_NCHW);
      EXPECT_EQ(a[i].sample_indices, b[i].sample_indices);
      EXPECT_EQ(a[i].labels, b[i].labels);
      ASSERT_EQ(a[i].shape.size(), 4u);
      const uint64_t n = a[i].shape[0], h = a[i].shape[1], w = a[i].shape[2],
                     c = a[i].shape[3];
      EXPECT_EQ(c, kChannels);
      EXPECT_THAT(b[i].shape, ElementsAre(n, c, h, w));
      ASSERT_EQ(a[i].pixels.size(), n * h * w * c);
      ASSERT_EQ(b[i].pixels.size(), a[i].pixels.size());
      uint64_t mismatches = 0;
      for (uint64_t s = 0; s < n; ++s) {
        for (uint64_t y = 0; y < h; ++y) {
          for (uint64_t x = 0; x < w; ++x) {
            for (uint64_t ch = 0; ch < c; ++ch) {
              if (a[i].pixels[((s * h + y) * w + x) * c + ch] !=
                  b[i].pixels[((s * c + ch) * h + y) * w + x]) {
                ++mismatches;
              }
            }
          }
        }
      }
      EXPECT_EQ(mismatches, 0u) << "batch " << i;
    }
  }
  EXPECT_EQ(daemon->Stop(), 0) << daemon->Log();
}

// Reads epoch `epoch` of `plan` as every rank of `world_size` at once (one
// thread and Loader per rank). Returns per-rank records and
// batches_per_epoch.
struct RankResult {
  std::vector<BatchRecord> records;
  uint64_t batches_per_epoch = 0;
  absl::Status status;
};
std::vector<RankResult> ReadAllRanks(const std::string& endpoint,
                                     v1::Plan plan, uint32_t world_size,
                                     uint64_t epoch) {
  std::vector<RankResult> results(world_size);
  std::vector<std::thread> threads;
  for (uint32_t rank = 0; rank < world_size; ++rank) {
    threads.emplace_back([&, rank] {
      LoaderOptions options;
      options.endpoint = endpoint;
      options.plan = plan;
      options.plan.set_rank(rank);
      options.plan.set_world_size(world_size);
      options.prefetch = 3;
      RankResult& result = results[rank];
      absl::StatusOr<std::unique_ptr<Loader>> loader =
          Loader::Create(std::move(options));
      if (!loader.ok()) {
        result.status = loader.status();
        return;
      }
      result.batches_per_epoch = (*loader)->batches_per_epoch();
      result.status = (*loader)->StartEpoch(epoch);
      if (!result.status.ok()) return;
      absl::StatusOr<std::vector<BatchRecord>> records = ReadFrom(**loader);
      if (!records.ok()) {
        result.status = records.status();
        return;
      }
      result.records = *std::move(records);
    });
  }
  for (std::thread& t : threads) t.join();
  return results;
}

TEST_F(DeterminismTest, ShardsCoverEachEpochExactlyOnce) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DaemonProcess> daemon,
                           StartDaemon(2));
  constexpr uint32_t kBatch = 4;
  for (uint32_t world_size : {1u, 3u}) {
    SCOPED_TRACE(absl::StrCat("world_size ", world_size));
    const v1::Plan plan = TrainPlan("d", kBatch, kSize, 8);
    const uint64_t per_rank = (kImages + world_size - 1) / world_size;
    const uint64_t pad = per_rank * world_size - kImages;
    std::vector<RankResult> full =
        ReadAllRanks(daemon->endpoint(), plan, world_size, 1);

    std::map<uint64_t, int> count;
    for (uint32_t rank = 0; rank < world_size; ++rank) {
      const RankResult& r = full[rank];
      ASSERT_TRUE(r.status.ok()) << "rank " << rank << ": " << r.status;
      EXPECT_EQ(r.batches_per_epoch, (per_rank + kBatch - 1) / kBatch);
      ASSERT_EQ(r.records.size(), r.batches_per_epoch) << "rank " << rank;
      uint64_t samples = 0;
      for (size_t b = 0; b < r.records.size(); ++b) {
        EXPECT_EQ(r.records[b].batch_index, b);
        EXPECT_EQ(r.records[b].epoch, 1u);
        const uint64_t expected =
            std::min<uint64_t>(kBatch, per_rank - b * kBatch);
        EXPECT_EQ(r.records[b].sample_indices.size(), expected);
        for (uint64_t s : r.records[b].sample_indices) ++count[s];
        samples += r.records[b].sample_indices.size();
      }
      EXPECT_EQ(samples, per_rank);
    }
    // Every sample at least once; the only duplicates are the padding.
    EXPECT_EQ(count.size(), static_cast<size_t>(kImages));
    EXPECT_EQ(count.begin()->first, 0u);
    EXPECT_EQ(count.rbegin()->first, static_cast<uint64_t>(kImages - 1));
    uint64_t extra = 0;
    for (const auto& [sample, n] : count) extra += n - 1;
    EXPECT_EQ(extra, pad);

    if (world_size == 3) {
      // 50 = 3 * 17 - 1: the padding repeats the epoch order's head, the
      // first sample of rank 0, as the last sample of rank 2 (position 50 of
      // the padded order), with the same pixels (augmentation is keyed by
      // sample, not position).
      ASSERT_EQ(pad, 1u);
      const BatchRecord& head = full[0].records.front();
      const BatchRecord& tail = full[2].records.back();
      const uint64_t head_sample = head.sample_indices.front();
      EXPECT_EQ(count[head_sample], 2);
      EXPECT_EQ(tail.sample_indices.back(), head_sample);
      EXPECT_EQ(SampleBytes(head, 0),
                SampleBytes(tail, tail.sample_indices.size() - 1));
    }

    // drop_last drops each rank's partial last batch and nothing else: the
    // batches are exactly the full ones of the run above.
    v1::Plan dropping = plan;
    dropping.set_drop_last(true);
    std::vector<RankResult> dropped =
        ReadAllRanks(daemon->endpoint(), dropping, world_size, 1);
    for (uint32_t rank = 0; rank < world_size; ++rank) {
      const RankResult& r = dropped[rank];
      ASSERT_TRUE(r.status.ok()) << "rank " << rank << ": " << r.status;
      EXPECT_EQ(r.batches_per_epoch, per_rank / kBatch);
      ASSERT_EQ(r.records.size(), r.batches_per_epoch);
      ASSERT_LE(r.records.size(), full[rank].records.size());
      for (size_t b = 0; b < r.records.size(); ++b) {
        EXPECT_EQ(r.records[b].sample_indices.size(), kBatch);
        EXPECT_EQ(r.records[b], full[rank].records[b])
            << "rank " << rank << " batch " << b;
      }
    }
  }
  EXPECT_EQ(daemon->Stop(), 0) << daemon->Log();
}

TEST_F(DeterminismTest, RestoredLoaderContinuesByteForByte) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DaemonProcess> daemon,
                           StartDaemon(2));
  const v1::Plan plan = TrainPlan("d", 5, kSize, 3);
  constexpr uint64_t kEpoch = 1;
  ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> reference,
                           ReadEpochs(daemon->endpoint(), plan, kEpoch));
  ASSERT_EQ(reference.size(), 10u);

  for (uint64_t k : {0, 1, 4, 9, 10}) {
    SCOPED_TRACE(absl::StrCat("k = ", k));
    LoaderState state;
    std::vector<BatchRecord> head;
    {
      LoaderOptions options;
      options.endpoint = daemon->endpoint();
      options.plan = plan;
      options.prefetch = 4;
      ASSERT_OK_AND_ASSIGN(std::unique_ptr<Loader> loader,
                               Loader::Create(std::move(options)));
      ASSERT_TRUE(loader->StartEpoch(kEpoch).ok());
      ASSERT_OK_AND_ASSIGN(head, ReadFrom(*loader, k));
      state = loader->state();
      // Destroyed with batches still outstanding.
    }
    ASSERT_EQ(head.size(), k);
    EXPECT_EQ(state.epoch, kEpoch);
    EXPECT_EQ(state.next_batch, k);

    LoaderOptions options;
    options.endpoint = daemon->endpoint();
    options.plan = plan;
    options.prefetch = 2;  // a different ring size must not matter
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Loader> loader,
                             Loader::Create(std::move(options)));
    ASSERT_TRUE(loader->Restore(state).ok());
    ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> tail, ReadFrom(*loader));
    ASSERT_EQ(tail.size(), reference.size() - k);
    for (size_t i = 0; i < k; ++i) EXPECT_EQ(head[i], reference[i]);
    for (size_t i = 0; i < tail.size(); ++i) {
      EXPECT_EQ(tail[i], reference[k + i]) << "tail batch " << i;
    }
    EXPECT_EQ(loader->state().next_batch, reference.size());
  }
  EXPECT_EQ(daemon->Stop(), 0) << daemon->Log();
}

// The C++ side of an elastic resume: two ranks take 3 batches each in
// lockstep, their state's global position opens the plan again on three
// ranks (Plan.resume), and the three deliver every remaining sample exactly
// once, plus one sample of padding (the epoch's head), with the bytes a
// single rank gives each sample.
TEST_F(DeterminismTest, ElasticResumeOnThreeRanksDeliversTheRestOnce) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DaemonProcess> daemon,
                       StartDaemon(2));
  const v1::Plan plan = TrainPlan("d", 4, kSize, 17);
  constexpr uint64_t kEpoch = 2;
  ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> whole,
                       ReadEpochs(daemon->endpoint(), plan, kEpoch));
  std::map<uint64_t, std::string> reference;  // sample -> its bytes
  std::vector<uint64_t> order;
  for (const BatchRecord& record : whole) {
    for (size_t i = 0; i < record.sample_indices.size(); ++i) {
      reference[record.sample_indices[i]] = SampleBytes(record, i);
      order.push_back(record.sample_indices[i]);
    }
  }
  ASSERT_EQ(order.size(), static_cast<size_t>(kImages));

  auto open = [&](uint32_t rank, uint32_t world_size, uint64_t position) {
    LoaderOptions options;
    options.endpoint = daemon->endpoint();
    options.plan = plan;
    options.plan.set_rank(rank);
    options.plan.set_world_size(world_size);
    if (position > 0) {
      options.plan.mutable_resume()->set_epoch(kEpoch);
      options.plan.mutable_resume()->set_position(position);
    }
    options.last_epoch = kEpoch;
    return Loader::Create(std::move(options));
  };
  std::multiset<uint64_t> seen;
  auto take = [&](const std::vector<BatchRecord>& records) {
    for (const BatchRecord& record : records) {
      for (size_t i = 0; i < record.sample_indices.size(); ++i) {
        const uint64_t sample = record.sample_indices[i];
        seen.insert(sample);
        EXPECT_EQ(SampleBytes(record, i), reference[sample])
            << "sample " << sample;
      }
    }
  };
  uint64_t position = 0;
  for (uint32_t rank = 0; rank < 2; ++rank) {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Loader> loader, open(rank, 2, 0));
    ASSERT_OK(loader->StartEpoch(kEpoch));
    ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> head, ReadFrom(*loader, 3));
    take(head);
    const LoaderState state = loader->state();
    EXPECT_EQ(state.next_batch, 3u);
    position = state.position;
  }
  ASSERT_EQ(position, 3u * 4 * 2);
  EXPECT_EQ(seen, std::multiset<uint64_t>(order.begin(), order.begin() + 24));

  for (uint32_t rank = 0; rank < 3; ++rank) {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Loader> loader,
                         open(rank, 3, position));
    // 26 samples left: 9 per rank, in batches of 4, 4 and 1.
    EXPECT_EQ(loader->opened().resumed_epoch_batches(), 3u);
    ASSERT_OK(loader->StartEpoch(kEpoch));
    ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> rest, ReadFrom(*loader));
    EXPECT_EQ(rest.size(), 3u);
    take(rest);
    EXPECT_EQ(loader->state().position, static_cast<uint64_t>(kImages));
  }
  std::multiset<uint64_t> expected(order.begin(), order.end());
  expected.insert(order[0]);  // the padding: 27 places for 26 samples
  EXPECT_EQ(seen, expected);
  EXPECT_EQ(daemon->Stop(), 0) << daemon->Log();
}

TEST_F(DeterminismTest, RestartingOnTheSameLoaderDiscardsOutstandingBatches) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DaemonProcess> daemon,
                           StartDaemon(2));
  const v1::Plan plan = TrainPlan("d", 5, kSize, 3);
  ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> reference,
                           ReadEpochs(daemon->endpoint(), plan, 0, 2));
  ASSERT_EQ(reference.size(), 20u);
  {
    LoaderOptions options;
    options.endpoint = daemon->endpoint();
    options.plan = plan;
    options.prefetch = 4;
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Loader> loader,
                             Loader::Create(std::move(options)));
    // Epoch 1, batches 0..2 read and 3.. in flight; then back to batch 2
    // (already received), then to epoch 0 in the middle, then epoch 1 again
    // from the end of what is in flight.
    ASSERT_TRUE(loader->StartEpoch(1).ok());
    ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> got,
                             ReadFrom(*loader, 3));
    ASSERT_EQ(got.size(), 3u);
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(got[i], reference[10 + i]);

    ASSERT_TRUE(loader->StartEpoch(1, 2).ok());
    ASSERT_OK_AND_ASSIGN(got, ReadFrom(*loader, 2));
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[0], reference[12]);
    EXPECT_EQ(got[1], reference[13]);

    ASSERT_TRUE(loader->StartEpoch(0, 6).ok());
    ASSERT_OK_AND_ASSIGN(got, ReadFrom(*loader));
    ASSERT_EQ(got.size(), 4u);
    for (size_t i = 0; i < 4; ++i) EXPECT_EQ(got[i], reference[6 + i]);

    ASSERT_TRUE(loader->Restore({1, 7}).ok());
    ASSERT_OK_AND_ASSIGN(got, ReadFrom(*loader));
    ASSERT_EQ(got.size(), 3u);
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(got[i], reference[17 + i]);
  }
  EXPECT_EQ(daemon->Stop(), 0) << daemon->Log();
}

}  // namespace
}  // namespace batchd::testing
