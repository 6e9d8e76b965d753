#include "server/pipeline/shared_batches.h"

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "testing/daemon_process.h"
#include "testing/jpeg_synth.h"
#include "testing/status_matchers.h"

namespace batchd::server {
namespace {

// A tiny ImageFolder of synthetic JPEGs, written once.
std::shared_ptr<const Dataset> TinyDataset() {
  static std::shared_ptr<const Dataset>* dataset = [] {
    const std::string root = testing::MakeTempDir("shared-batches");
    for (int c = 0; c < 2; ++c) {
      const std::string dir = absl::StrCat(root, "/class", c);
      std::filesystem::create_directories(dir);
      for (int i = 0; i < 8; ++i) {
        tools::SynthOptions options;
        options.width = 96;
        options.height = 80;
        options.seed = c * 100 + i;
        absl::StatusOr<std::vector<uint8_t>> jpeg =
            tools::SynthesizeJpeg(options);
        EXPECT_TRUE(jpeg.ok()) << jpeg.status();
        std::ofstream(absl::StrCat(dir, "/", i, ".jpg"), std::ios::binary)
            .write(reinterpret_cast<const char*>(jpeg->data()), jpeg->size());
      }
    }
    absl::StatusOr<std::shared_ptr<const Dataset>> loaded =
        Dataset::LoadImageFolder("tiny", root);
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    return new std::shared_ptr<const Dataset>(*loaded);
  }();
  return *dataset;
}

std::shared_ptr<const ResolvedPlan> Plan(
    uint64_t seed, const std::string& job = "j",
    const std::function<void(batchd::v1::Pipeline&)>& change = nullptr) {
  batchd::v1::Plan plan;
  plan.set_dataset("tiny");
  plan.set_batch_size(4);
  plan.set_seed(seed);
  plan.set_shuffle(true);
  plan.set_job(job);
  plan.mutable_pipeline()->mutable_train()->set_size(32);
  if (change) change(*plan.mutable_pipeline());
  absl::StatusOr<std::shared_ptr<const ResolvedPlan>> resolved =
      ResolvePlan(plan, {{"tiny", TinyDataset()}}, PlanLimits{});
  EXPECT_TRUE(resolved.ok()) << resolved.status();
  return *resolved;
}

BatchCancellation NotCancelled() {
  return {std::make_shared<std::atomic<bool>>(false),
          std::make_shared<std::atomic<bool>>(false)};
}

// Waits for the batch a Get hands over.
class Received {
 public:
  SharedBatches::Done Callback() {
    return [this](std::shared_ptr<const BuiltBatch> batch) {
      batch_ = std::move(batch);
      done_.Notify();
    };
  }
  std::shared_ptr<const BuiltBatch> Wait() {
    done_.WaitForNotification();
    return batch_;
  }

 private:
  absl::Notification done_;
  std::shared_ptr<const BuiltBatch> batch_;
};

std::string Bytes(const BuiltBatch& batch) {
  return std::string(reinterpret_cast<const char*>(batch.pixels.data()),
                     batch.pixels.size());
}

class SharedBatchesTest : public ::testing::Test {
 protected:
  // Two streams of the plan with `seed` open on `shared`: its batches are
  // shared from now on.
  static void OpenTwoStreams(SharedBatches& shared, uint64_t seed) {
    shared.StreamOpened(*Plan(seed));
    shared.StreamOpened(*Plan(seed));
  }

  Pipeline pipeline_{PipelineOptions{.workers = 2}};
};

// With one stream a plan's batches are its own: built every time, kept by
// nobody.
TEST_F(SharedBatchesTest, LoneStreamBuildsItsOwn) {
  SharedBatches shared(&pipeline_, {.retention_bytes = 1 << 20});
  shared.StreamOpened(*Plan(7));
  Received first, second;
  EXPECT_OK(
      shared.Get(Plan(7), 0, 1, NotCancelled(), first.Callback(), /*slot=*/{}));
  std::shared_ptr<const BuiltBatch> a = first.Wait();
  EXPECT_OK(shared.Get(Plan(7), 0, 1, NotCancelled(), second.Callback(),
                       /*slot=*/{}));
  std::shared_ptr<const BuiltBatch> b = second.Wait();
  EXPECT_NE(a, b);
  EXPECT_EQ(Bytes(*a), Bytes(*b));
  EXPECT_EQ(shared.counts().begin()->second.built, 2u);
  EXPECT_EQ(shared.retained_bytes(), 0u);
  // A second stream of the plan: from now on shared.
  shared.StreamOpened(*Plan(7, "other-job"));
  Received third, fourth;
  EXPECT_OK(
      shared.Get(Plan(7), 0, 1, NotCancelled(), third.Callback(), /*slot=*/{}));
  std::shared_ptr<const BuiltBatch> c = third.Wait();
  EXPECT_OK(shared.Get(Plan(7), 0, 1, NotCancelled(), fourth.Callback(),
                       /*slot=*/{}));
  EXPECT_EQ(fourth.Wait(), c);
  shared.StreamClosed(*Plan(7));
  Received fifth;
  EXPECT_OK(
      shared.Get(Plan(7), 0, 1, NotCancelled(), fifth.Callback(), /*slot=*/{}));
  EXPECT_NE(fifth.Wait(), c);  // alone again
}

TEST_F(SharedBatchesTest, SecondRequestAttachesToTheRunningBuild) {
  SharedBatches shared(&pipeline_, {.retention_bytes = 0});
  OpenTwoStreams(shared, 7);
  const auto plan_a = Plan(/*seed=*/7, "job-a");
  const auto plan_b = Plan(/*seed=*/7, "job-b");  // same bytes, other job
  ASSERT_EQ(plan_a->fingerprint, plan_b->fingerprint);
  Received a, b;
  EXPECT_OK(
      shared.Get(plan_a, 0, 1, NotCancelled(), a.Callback(), /*slot=*/{}));
  EXPECT_OK(
      shared.Get(plan_b, 0, 1, NotCancelled(), b.Callback(), /*slot=*/{}));
  std::shared_ptr<const BuiltBatch> batch_a = a.Wait(), batch_b = b.Wait();
  ASSERT_NE(batch_a, nullptr);
  // One build, one buffer: both streams got the same object. (The second
  // Get may come after the build finished, when it rebuilds: retention 0.)
  const SharingCounts counts = shared.counts().begin()->second;
  EXPECT_EQ(counts.built + counts.attached, 2u);
  if (counts.attached == 1) EXPECT_EQ(batch_a, batch_b);
  EXPECT_EQ(Bytes(*batch_a), Bytes(*batch_b));
  EXPECT_EQ(shared.retained_bytes(), 0u);
}

TEST_F(SharedBatchesTest, RetainedBatchServesALaterRequestInline) {
  SharedBatches shared(&pipeline_, {.retention_bytes = 1 << 20});
  OpenTwoStreams(shared, 7);
  Received first;
  EXPECT_OK(
      shared.Get(Plan(7), 2, 3, NotCancelled(), first.Callback(), /*slot=*/{}));
  std::shared_ptr<const BuiltBatch> built = first.Wait();
  ASSERT_NE(built, nullptr);
  EXPECT_EQ(shared.retained_bytes(), built->pixels.size());
  std::shared_ptr<const BuiltBatch> later;
  EXPECT_OK(shared.Get(
      Plan(7, "late-job"), 2, 3, NotCancelled(),
      [&](std::shared_ptr<const BuiltBatch> b) { later = std::move(b); },
      /*slot=*/{}));
  EXPECT_EQ(later, built);  // called before Get returned
  EXPECT_EQ(shared.counts().begin()->second.retained, 1u);
}

TEST_F(SharedBatchesTest, DifferentPlansNeverShare) {
  SharedBatches shared(&pipeline_, {.retention_bytes = 1 << 20});
  OpenTwoStreams(shared, 7);
  OpenTwoStreams(shared, 8);
  Received a, b;
  EXPECT_OK(
      shared.Get(Plan(7), 0, 0, NotCancelled(), a.Callback(), /*slot=*/{}));
  EXPECT_OK(
      shared.Get(Plan(8), 0, 0, NotCancelled(), b.Callback(), /*slot=*/{}));
  std::shared_ptr<const BuiltBatch> batch_a = a.Wait(), batch_b = b.Wait();
  EXPECT_NE(batch_a, batch_b);
  EXPECT_NE(Bytes(*batch_a), Bytes(*batch_b));
  EXPECT_EQ(shared.counts().size(), 2u);
}

// Pipeline.erasing and Pipeline.mix leave the pixels alone but change the
// batch the trainer gets (its header's erased rectangles and mix): plans
// that differ only there never share a build, and a shared build carries
// its plan's parameters to every stream.
TEST_F(SharedBatchesTest, ErasingAndMixSplitTheSharing) {
  auto erase = [](batchd::v1::Pipeline& p) {
    p.mutable_erasing()->set_p(1.0f);
  };
  auto erase_mix = [](batchd::v1::Pipeline& p) {
    p.mutable_erasing()->set_p(1.0f);
    p.mutable_mix()->set_cutmix_alpha(1.0f);
    p.mutable_mix()->set_num_classes(2);
  };
  SharedBatches shared(&pipeline_, {.retention_bytes = 1 << 20});
  for (const auto& change :
       std::vector<std::function<void(batchd::v1::Pipeline&)>>{
           nullptr, erase, erase_mix}) {
    shared.StreamOpened(*Plan(7, "a", change));
    shared.StreamOpened(*Plan(7, "b", change));
  }
  Received plain, erased, erased_a, erased_b;
  EXPECT_OK(shared.Get(Plan(7), 0, 0, NotCancelled(), plain.Callback(), {}));
  EXPECT_OK(shared.Get(Plan(7, "a", erase), 0, 0, NotCancelled(),
                       erased.Callback(), {}));
  EXPECT_OK(shared.Get(Plan(7, "a", erase_mix), 0, 0, NotCancelled(),
                       erased_a.Callback(), {}));
  std::shared_ptr<const BuiltBatch> first = erased_a.Wait();
  EXPECT_OK(shared.Get(Plan(7, "b", erase_mix), 0, 0, NotCancelled(),
                       erased_b.Callback(), {}));
  std::shared_ptr<const BuiltBatch> batch_plain = plain.Wait();
  std::shared_ptr<const BuiltBatch> batch_erased = erased.Wait();
  std::shared_ptr<const BuiltBatch> second = erased_b.Wait();
  // Three plans, three builds; the daemon's pixels are the same.
  EXPECT_EQ(shared.counts().size(), 3u);
  EXPECT_NE(batch_plain, batch_erased);
  EXPECT_EQ(Bytes(*batch_plain), Bytes(*batch_erased));
  EXPECT_TRUE(batch_plain->erased.empty());
  EXPECT_FALSE(batch_plain->mix.has_value());
  EXPECT_EQ(batch_erased->erased.size(), 4u);  // p = 1
  EXPECT_FALSE(batch_erased->mix.has_value());
  // Two jobs of one plan share the build, rectangles and mix included.
  EXPECT_EQ(first, second);
  ASSERT_TRUE(second->mix.has_value());
  EXPECT_EQ(second->mix->kind(), batchd::v1::BatchMix::KIND_CUTMIX);
  EXPECT_EQ(second->erased.size(), 4u);
}

// Past the retention a batch is dropped oldest first; asked again it is
// rebuilt, with the same bytes.
TEST_F(SharedBatchesTest, EvictedBatchIsRebuiltIdentically) {
  const uint64_t batch_bytes = 4 * 32 * 32 * 3;
  SharedBatches shared(&pipeline_, {.retention_bytes = 2 * batch_bytes});
  OpenTwoStreams(shared, 7);
  std::vector<std::string> first_bytes;
  for (uint64_t index = 0; index < 4; ++index) {
    Received r;
    EXPECT_OK(shared.Get(Plan(7), 0, index, NotCancelled(), r.Callback(),
                         /*slot=*/{}));
    first_bytes.push_back(Bytes(*r.Wait()));
    EXPECT_LE(shared.retained_bytes(), 2 * batch_bytes);
  }
  EXPECT_EQ(shared.evictions(), 2u);
  Received again;
  EXPECT_OK(
      shared.Get(Plan(7), 0, 0, NotCancelled(), again.Callback(), /*slot=*/{}));
  EXPECT_EQ(Bytes(*again.Wait()), first_bytes[0]);
  EXPECT_EQ(shared.counts().begin()->second.built, 5u);
}

// The build carries its first requester's cancellation; when that one
// withdraws, a second requester still gets the batch.
TEST_F(SharedBatchesTest, WithdrawnFirstRequesterLeavesTheOthersServed) {
  SharedBatches shared(&pipeline_, {.retention_bytes = 1 << 20});
  OpenTwoStreams(shared, 9);
  BatchCancellation withdrawn = NotCancelled();
  auto withdrawn_flag =
      std::const_pointer_cast<std::atomic<bool>>(withdrawn.batch);
  withdrawn_flag->store(true);  // withdrawn before any work ran
  Received first, second;
  EXPECT_OK(
      shared.Get(Plan(9), 0, 2, withdrawn, first.Callback(), /*slot=*/{}));
  EXPECT_OK(shared.Get(Plan(9), 0, 2, NotCancelled(), second.Callback(),
                       /*slot=*/{}));
  std::shared_ptr<const BuiltBatch> got = second.Wait();
  first.Wait();  // answered, batch or not
  ASSERT_NE(got, nullptr);
  Received alone;
  SharedBatches unshared(&pipeline_, {.retention_bytes = 0});
  EXPECT_OK(unshared.Get(Plan(9), 0, 2, NotCancelled(), alone.Callback(),
                         /*slot=*/{}));
  EXPECT_EQ(Bytes(*got), Bytes(*alone.Wait()));
}

// Many threads asking for overlapping batches of one plan: every answer
// has the bytes of a lone build (ThreadSanitizer runs this).
TEST_F(SharedBatchesTest, ConcurrentRequestsGetIdenticalBytes) {
  SharedBatches shared(&pipeline_, {.retention_bytes = 8 * 4 * 32 * 32 * 3});
  OpenTwoStreams(shared, 11);
  std::vector<std::string> expected;
  {
    SharedBatches reference(&pipeline_, {.retention_bytes = 0});
    for (uint64_t index = 0; index < 4; ++index) {
      Received r;
      EXPECT_OK(reference.Get(Plan(11), 1, index, NotCancelled(), r.Callback(),
                              /*slot=*/{}));
      expected.push_back(Bytes(*r.Wait()));
    }
  }
  constexpr int kThreads = 4;
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 3; ++round) {
        for (uint64_t i = 0; i < 4; ++i) {
          const uint64_t index = (i + t) % 4;
          Received r;
          EXPECT_OK(shared.Get(Plan(11, absl::StrCat("job-", t)), 1, index,
                               NotCancelled(), r.Callback(), /*slot=*/{}));
          if (Bytes(*r.Wait()) != expected[index]) ++mismatches;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(mismatches.load(), 0);
  const SharingCounts counts = shared.counts().begin()->second;
  EXPECT_EQ(counts.built + counts.attached + counts.retained,
            uint64_t{kThreads} * 3 * 4);
  EXPECT_EQ(counts.built, 4u);  // everything fits the retention
}

}  // namespace
}  // namespace batchd::server
