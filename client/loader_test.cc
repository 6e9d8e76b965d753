#include "client/loader.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "client/buffer.h"
#include "client/loader_test_util.h"
#include "testing/fake_data_service.h"
#include "testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace batchd::client {
namespace {

// The fake service and matchers come with client/loader_test_util.h.

TEST(LoaderTest, DeliversEveryBatchInOrderWithItsBytes) {
  FakeDataService::Options fake;
  fake.batches_per_epoch = 8;
  fake.last_batch_size = 2;  // 600 bytes in 2 chunks; full batches 3 chunks
  FakeServer server(fake, FakeDataService::ServeInOrder());
  absl::StatusOr<std::unique_ptr<Loader>> loader =
      Loader::Create(OptionsFor(server));
  ASSERT_OK(loader);
  EXPECT_EQ((*loader)->window(), 4u);
  EXPECT_EQ((*loader)->batches_per_epoch(), 8u);
  EXPECT_EQ((*loader)->opened().max_batch_bytes(), 1200u);
  ASSERT_OK((*loader)->StartEpoch(0));
  ExpectRestOfEpoch(**loader, 0, 0, server.service());

  const Loader::Stats stats = (*loader)->stats();
  EXPECT_EQ(stats.batches, 8u);
  EXPECT_EQ(stats.bytes, 7 * 1200u + 600u);
  EXPECT_LE(stats.waited, stats.wall);
  EXPECT_EQ(server.service().window_violations(), 0u);

  // A second epoch on the same stream.
  ASSERT_OK((*loader)->StartEpoch(1));
  ExpectRestOfEpoch(**loader, 1, 0, server.service());
}

TEST(LoaderTest, TimelineHasOneStepPerBatchTilingTheConsumersTime) {
  FakeDataService::Options fake;
  fake.batches_per_epoch = 6;
  FakeServer server(fake, FakeDataService::ServeInOrder());
  absl::StatusOr<std::unique_ptr<Loader>> loader =
      Loader::Create(OptionsFor(server));
  ASSERT_OK(loader);
  ASSERT_OK((*loader)->StartEpoch(0));
  for (;;) {
    absl::StatusOr<Batch> batch = (*loader)->Next();
    if (absl::IsOutOfRange(batch.status())) break;
    ASSERT_OK(batch);
    (*loader)->RecordCopy(absl::Milliseconds(1));
    absl::SleepFor(absl::Milliseconds(3));
  }

  const std::vector<TimelineStep> steps = (*loader)->timeline();
  ASSERT_EQ(steps.size(), 6u);
  for (size_t i = 0; i < steps.size(); ++i) {
    EXPECT_EQ(steps[i].epoch, 0u);
    EXPECT_EQ(steps[i].batch_index, i);
    EXPECT_EQ(steps[i].copy, absl::Milliseconds(1));
    EXPECT_GE(steps[i].compute, absl::Milliseconds(2));
    if (i + 1 < steps.size()) {
      EXPECT_EQ(steps[i].start + steps[i].waited + steps[i].copy +
                    steps[i].compute,
                steps[i + 1].start);
    }
  }
  // The totals hold the steps' parts (and the epoch's end, and the ring's
  // copies).
  const Loader::Stats stats = (*loader)->stats();
  EXPECT_GE(stats.copy, absl::Milliseconds(6));
  absl::Duration waited;
  for (const TimelineStep& step : steps) waited += step.waited;
  EXPECT_LE(waited, stats.waited);
}

TEST(LoaderTest, ReportsTheTrainersWaitAndComputeToTheDaemon) {
  FakeDataService::Options fake;
  fake.batches_per_epoch = 12;
  FakeServer server(fake, FakeDataService::ServeInOrder());
  LoaderOptions options = OptionsFor(server);
  options.report_interval = absl::Milliseconds(100);
  absl::StatusOr<std::unique_ptr<Loader>> loader =
      Loader::Create(std::move(options));
  ASSERT_OK(loader);
  ASSERT_OK((*loader)->StartEpoch(0));
  // A trainer that computes 30 ms a step.
  for (int i = 0; i < 12; ++i) {
    ASSERT_OK((*loader)->Next());
    absl::SleepFor(absl::Milliseconds(30));
  }
  absl::SleepFor(absl::Milliseconds(250));  // the last step's report
  const std::vector<batchd::v1::TrainerReport> reports =
      server.service().reports();
  ASSERT_GE(reports.size(), 3u);
  double wait = 0, compute = 0;
  uint64_t batches = 0;
  for (const batchd::v1::TrainerReport& r : reports) {
    EXPECT_GE(r.wait_seconds(), 0);
    EXPECT_GE(r.compute_seconds(), 0);
    wait += r.wait_seconds();
    compute += r.compute_seconds();
    batches += r.batches();
  }
  // Every batch consumed is counted once; the compute is the sleeps (the
  // last report may hold up to one interval of idle time after them).
  EXPECT_EQ(batches, 12u);
  EXPECT_GE(compute, 0.30);
  const Loader::Stats stats = (*loader)->stats();
  EXPECT_NEAR(wait, absl::ToDoubleSeconds(stats.waited), 0.05);
  EXPECT_EQ(stats.reports_sent, reports.size());
  EXPECT_EQ(stats.reports_rejected, 0u);
}

// Serves in request order, but holds every batch whose index is
// `period`-1 modulo `period` for `pause` first, and every other for `each`:
// a daemon that keeps up on average with bursts of lateness.
FakeDataService::Script ServeWithPauses(uint64_t period, absl::Duration pause,
                                        absl::Duration each) {
  return [=](FakeStream& stream) {
    while (stream.ReadRequest()) {
      while (!stream.pending().empty()) {
        const FakeStream::Key key = stream.pending().front();
        absl::SleepFor(key.second % period == period - 1 ? pause : each);
        if (!stream.SendBatch(key)) return grpc::Status::OK;
      }
    }
    return grpc::Status::OK;
  };
}

// Reads `steps` batches (across epochs), computing `step` after each.
void Train(Loader& loader, int steps, absl::Duration step) {
  uint64_t epoch = 0;
  ASSERT_OK(loader.StartEpoch(epoch));
  for (int i = 0; i < steps; ++i) {
    absl::StatusOr<Batch> batch = loader.Next();
    if (absl::IsOutOfRange(batch.status())) {
      ASSERT_OK(loader.StartEpoch(++epoch));
      --i;
      continue;
    }
    ASSERT_OK(batch);
    absl::SleepFor(step);
  }
}

TEST(LoaderTest, AutoPrefetchGrowsTheRingForBurstyWaits) {
  FakeDataService::Options fake;
  fake.window = 32;
  fake.batches_per_epoch = 64;
  FakeServer server(fake, ServeWithPauses(8, absl::Milliseconds(120),
                                          absl::ZeroDuration()));
  LoaderOptions options = OptionsFor(server, /*prefetch=*/2);
  options.auto_prefetch = true;
  options.auto_prefetch_max_bytes = 12 * 1200;  // 12 slots of 1,200 bytes
  absl::StatusOr<std::unique_ptr<Loader>> loader =
      Loader::Create(std::move(options));
  ASSERT_OK(loader);
  EXPECT_EQ((*loader)->window(), 2u);
  // 10 ms a step: the fake keeps up on average (120 ms per 8 batches), but
  // every 8th batch makes the trainer wait.
  Train(**loader, 250, absl::Milliseconds(10));
  const Loader::Stats stats = (*loader)->stats();
  EXPECT_GT(stats.prefetch, 2u);
  EXPECT_LE(stats.prefetch, 12u);
  EXPECT_GE(stats.prefetch_grows, 1u);
  EXPECT_EQ((*loader)->window(), stats.prefetch);
  EXPECT_EQ(server.service().window_violations(), 0u);
}

TEST(LoaderTest, AutoPrefetchDoesNotGrowWhenTheDaemonIsTheLimit) {
  FakeDataService::Options fake;
  fake.window = 32;
  fake.batches_per_epoch = 64;
  // 15 ms a batch for a 2 ms step: every step waits; depth cannot help.
  FakeServer server(fake, ServeWithPauses(1000, absl::Milliseconds(15),
                                          absl::Milliseconds(15)));
  LoaderOptions options = OptionsFor(server, /*prefetch=*/2);
  options.auto_prefetch = true;
  absl::StatusOr<std::unique_ptr<Loader>> loader =
      Loader::Create(std::move(options));
  ASSERT_OK(loader);
  Train(**loader, 150, absl::Milliseconds(2));
  const Loader::Stats stats = (*loader)->stats();
  EXPECT_EQ(stats.prefetch, 2u);
  EXPECT_EQ(stats.prefetch_grows, 0u);
}

TEST(LoaderTest, SendsNoReportsWithAZeroInterval) {
  FakeServer server(FakeDataService::Options{}, FakeDataService::ServeInOrder());
  LoaderOptions options = OptionsFor(server);
  options.report_interval = absl::ZeroDuration();
  absl::StatusOr<std::unique_ptr<Loader>> loader =
      Loader::Create(std::move(options));
  ASSERT_OK(loader);
  ASSERT_OK((*loader)->StartEpoch(0));
  ASSERT_OK((*loader)->Next());
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_TRUE(server.service().reports().empty());
}

TEST(LoaderTest, SubstitutionsAreReported) {
  FakeServer server(FakeDataService::Options{}, FakeDataService::ServeInOrder());
  absl::StatusOr<std::unique_ptr<Loader>> loader =
      Loader::Create(OptionsFor(server));
  ASSERT_OK(loader);
  ASSERT_OK((*loader)->StartEpoch(0));
  ASSERT_OK((*loader)->Next());
  absl::StatusOr<Batch> batch = (*loader)->Next();
  ASSERT_OK(batch);
  ASSERT_EQ(batch->substitutions.size(), 1u);
  EXPECT_EQ(batch->substitutions[0].reason(), batchd::v1::TRUNCATED);
  EXPECT_EQ(batch->substitutions[0].original_index(), batch->sample_indices[0]);
  EXPECT_EQ(batch->substitutions[0].detail(), "fake truncation");
}

TEST(LoaderTest, ReordersBatchesThatArriveOutOfOrder) {
  FakeDataService::Options fake;
  fake.batches_per_epoch = 13;
  fake.last_batch_size = 3;
  FakeServer server(fake, FakeDataService::ServeReversedGroups(4));
  absl::StatusOr<std::unique_ptr<Loader>> loader =
      Loader::Create(OptionsFor(server));
  ASSERT_OK(loader);
  ASSERT_OK((*loader)->StartEpoch(0));
  ExpectRestOfEpoch(**loader, 0, 0, server.service());
  // The fake held back requests until four were outstanding, then answered
  // them last-first.
  EXPECT_EQ(server.service().max_outstanding(), 4u);
  EXPECT_EQ(server.service().window_violations(), 0u);
}

TEST(LoaderTest, ReassemblesBatchesFromManySmallChunks) {
  FakeDataService::Options fake;
  fake.batches_per_epoch = 5;
  fake.height = 16;
  fake.width = 17;
  fake.chunk_bytes = 7;  // 3264 bytes: 466 chunks of 7 and one of 2
  FakeServer server(fake, FakeDataService::ServeReversedGroups(3));
  absl::StatusOr<std::unique_ptr<Loader>> loader =
      Loader::Create(OptionsFor(server));
  ASSERT_OK(loader);
  ASSERT_OK((*loader)->StartEpoch(2));
  ExpectRestOfEpoch(**loader, 2, 0, server.service());
}

TEST(LoaderTest, NeverExceedsTheGrantedWindow) {
  FakeDataService::Options fake;
  fake.window = 3;  // fewer than the client asks for
  fake.batches_per_epoch = 30;
  FakeServer server(fake, FakeDataService::ServeReversedGroups(3));
  absl::StatusOr<std::unique_ptr<Loader>> loader =
      Loader::Create(OptionsFor(server, /*prefetch=*/8));
  ASSERT_OK(loader);
  EXPECT_EQ((*loader)->window(), 3u);
  ASSERT_OK((*loader)->StartEpoch(0));
  ExpectRestOfEpoch(**loader, 0, 0, server.service());
  EXPECT_EQ(server.service().max_outstanding(), 3u);
  EXPECT_EQ(server.service().window_violations(), 0u);
  EXPECT_EQ(RequestsOf(server.service(), 0).size(), 30u);
}

TEST(LoaderTest, ZeroPrefetchTakesTheServersWindow) {
  FakeDataService::Options fake;
  fake.window = 5;
  FakeServer server(fake, FakeDataService::ServeInOrder());
  absl::StatusOr<std::unique_ptr<Loader>> loader =
      Loader::Create(OptionsFor(server, /*prefetch=*/0));
  ASSERT_OK(loader);
  EXPECT_EQ((*loader)->window(), 5u);
  EXPECT_EQ((*loader)->opened().window(), 5u);
}

TEST(LoaderTest, HeldBatchKeepsItsSlotAndBytes) {
  FakeDataService::Options fake;
  fake.batches_per_epoch = 20;
  // Answers only when three batches are pending, so a loader that reused
  // the held slot would show four outstanding.
  FakeServer server(fake, FakeDataService::ServeReversedGroups(3));
  absl::StatusOr<std::unique_ptr<Loader>> loader =
      Loader::Create(OptionsFor(server, /*prefetch=*/4));
  ASSERT_OK(loader);
  ASSERT_OK((*loader)->StartEpoch(0));
  absl::StatusOr<Batch> held = (*loader)->Next();
  ASSERT_OK(held);
  server.service().ResetMaxOutstanding();
  for (uint64_t index = 1; index < 20; ++index) {
    absl::StatusOr<Batch> batch = (*loader)->Next();
    ASSERT_OK(batch);
    ExpectFakeBatch(*batch, 0, index, server.service());
    // Returned so far: `index` + 1 batches, one of them still held, so at
    // most window - 1 = 3 more may have been asked for.
    EXPECT_LE(server.service().requested_total(), index + 1 + 3);
  }
  EXPECT_EQ(server.service().max_outstanding(), 3u);
  EXPECT_EQ(server.service().window_violations(), 0u);
  // Nineteen batches went through the other three slots; the held one is
  // untouched.
  ExpectFakeBatch(*held, 0, 0, server.service());
  held->Release();
  EXPECT_EQ(held->data(), nullptr);
  EXPECT_THAT((*loader)->Next(), StatusIs(absl::StatusCode::kOutOfRange, ::testing::_));
}

TEST(LoaderTest, NextWithEverySlotHeldIsFailedPrecondition) {
  FakeServer server(FakeDataService::Options{}, FakeDataService::ServeInOrder());
  absl::StatusOr<std::unique_ptr<Loader>> loader =
      Loader::Create(OptionsFor(server, /*prefetch=*/2));
  ASSERT_OK(loader);
  ASSERT_OK((*loader)->StartEpoch(0));
  absl::StatusOr<Batch> first = (*loader)->Next();
  absl::StatusOr<Batch> second = (*loader)->Next();
  ASSERT_OK(first);
  ASSERT_OK(second);
  EXPECT_THAT((*loader)->Next(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("release one")));
  // Moving a Batch keeps the lease; destroying it ends the lease.
  Batch moved = *std::move(first);
  EXPECT_EQ(first->data(), nullptr);
  ExpectFakeBatch(moved, 0, 0, server.service());
  moved = Batch();
  absl::StatusOr<Batch> third = (*loader)->Next();
  ASSERT_OK(third);
  ExpectFakeBatch(*third, 0, 2, server.service());
}

TEST(LoaderTest, StateAndRestoreResumeInANewLoader) {
  FakeDataService::Options fake;
  fake.batches_per_epoch = 9;
  FakeServer server(fake, FakeDataService::ServeReversedGroups(2));
  LoaderState saved;
  {
    absl::StatusOr<std::unique_ptr<Loader>> loader =
        Loader::Create(OptionsFor(server));
    ASSERT_OK(loader);
    EXPECT_EQ((*loader)->state().next_batch, 0u);
    ASSERT_OK((*loader)->StartEpoch(3));
    for (uint64_t index = 0; index < 4; ++index) {
      ASSERT_OK((*loader)->Next());
    }
    saved = (*loader)->state();
  }  // destroyed with batches outstanding
  EXPECT_EQ(saved.epoch, 3u);
  EXPECT_EQ(saved.next_batch, 4u);

  absl::StatusOr<std::unique_ptr<Loader>> resumed =
      Loader::Create(OptionsFor(server));
  ASSERT_OK(resumed);
  ASSERT_OK((*resumed)->Restore(saved));
  ExpectRestOfEpoch(**resumed, 3, 4, server.service());
  EXPECT_EQ(server.service().window_violations(), 0u);
}

TEST(LoaderTest, StartEpochMidEpochDropsOutstandingBatches) {
  FakeDataService::Options fake;
  fake.batches_per_epoch = 10;
  // Each request's batches answered last first. (Groups across requests
  // could wait for a request that never comes: StartEpoch keeps the batches
  // of the new range that are already here, so it asks for fewer.)
  FakeServer server(fake, FakeDataService::ServeReversedGroups(1));
  absl::StatusOr<std::unique_ptr<Loader>> loader =
      Loader::Create(OptionsFor(server));
  ASSERT_OK(loader);
  ASSERT_OK((*loader)->StartEpoch(0));
  for (uint64_t index = 0; index < 3; ++index) ASSERT_OK((*loader)->Next());

  // Back to batch 1 of the same epoch while 3.. are outstanding or ready.
  ASSERT_OK((*loader)->Restore(LoaderState{0, 1}));
  EXPECT_EQ((*loader)->state().next_batch, 1u);
  for (uint64_t index = 1; index < 6; ++index) {
    absl::StatusOr<Batch> batch = (*loader)->Next();
    ASSERT_OK(batch);
    ExpectFakeBatch(*batch, 0, index, server.service());
  }
  // On to another epoch mid-way, holding a batch of the old one.
  absl::StatusOr<Batch> held = (*loader)->Next();
  ASSERT_OK(held);
  ASSERT_OK((*loader)->StartEpoch(1, /*first_batch=*/2));
  ExpectRestOfEpoch(**loader, 1, 2, server.service());
  ExpectFakeBatch(*held, 0, 6, server.service());
  EXPECT_EQ(server.service().window_violations(), 0u);
  EXPECT_LE(server.service().max_outstanding(), 4u);
}

TEST(LoaderTest, ReadsTheNextEpochAheadAndKeepsIt) {
  FakeDataService::Options fake;
  fake.batches_per_epoch = 6;
  FakeServer server(fake, FakeDataService::ServeReversedGroups(2));
  absl::StatusOr<std::unique_ptr<Loader>> loader =
      Loader::Create(OptionsFor(server));
  ASSERT_OK(loader);
  ASSERT_OK((*loader)->StartEpoch(0));
  ExpectRestOfEpoch(**loader, 0, 0, server.service());
  // The window's worth of epoch 1 was asked for while epoch 0 ended.
  ASSERT_TRUE(server.service().WaitForRequested(6 + 4));
  EXPECT_THAT(RequestsOf(server.service(), 1), ElementsAre(0, 1, 2, 3));

  // StartEpoch(1) takes them as they are: none is asked for again.
  ASSERT_OK((*loader)->StartEpoch(1));
  ExpectRestOfEpoch(**loader, 1, 0, server.service());
  EXPECT_THAT(RequestsOf(server.service(), 1), ElementsAre(0, 1, 2, 3, 4, 5));
  EXPECT_THAT(RequestsOf(server.service(), 0), ElementsAre(0, 1, 2, 3, 4, 5));

  // Another epoch than the one read ahead: epoch 2's batches are dropped
  // and epoch 5 comes whole and right.
  ASSERT_TRUE(server.service().WaitForRequested(12 + 4));
  ASSERT_OK((*loader)->StartEpoch(5, /*first_batch=*/1));
  ExpectRestOfEpoch(**loader, 5, 1, server.service());
  EXPECT_THAT(RequestsOf(server.service(), 5), ElementsAre(1, 2, 3, 4, 5));
  EXPECT_THAT(RequestsOf(server.service(), 2), ElementsAre(0, 1, 2, 3));
  EXPECT_EQ(server.service().window_violations(), 0u);
  EXPECT_LE(server.service().max_outstanding(), 4u);
}

TEST(LoaderTest, NothingIsReadAheadPastTheLastEpoch) {
  FakeDataService::Options fake;
  fake.batches_per_epoch = 6;
  FakeServer server(fake, FakeDataService::ServeInOrder());
  LoaderOptions options = OptionsFor(server);
  options.last_epoch = 1;
  absl::StatusOr<std::unique_ptr<Loader>> loader = Loader::Create(options);
  ASSERT_OK(loader);
  ASSERT_OK((*loader)->StartEpoch(0));
  ExpectRestOfEpoch(**loader, 0, 0, server.service());
  ASSERT_TRUE(server.service().WaitForRequested(6 + 4));  // before the last
  ASSERT_OK((*loader)->StartEpoch(1));
  ExpectRestOfEpoch(**loader, 1, 0, server.service());
  loader->reset();  // closes the stream after any request still being sent
  EXPECT_THAT(RequestsOf(server.service(), 1), ElementsAre(0, 1, 2, 3, 4, 5));
  EXPECT_EQ(server.service().requested().size(), 12u);
}

TEST(LoaderTest, WithoutNextEpochPrefetchAnEpochEndsWithNothingAhead) {
  FakeDataService::Options fake;
  fake.batches_per_epoch = 6;
  FakeServer server(fake, FakeDataService::ServeInOrder());
  LoaderOptions options = OptionsFor(server);
  options.next_epoch_prefetch = false;
  absl::StatusOr<std::unique_ptr<Loader>> loader = Loader::Create(options);
  ASSERT_OK(loader);
  ASSERT_OK((*loader)->StartEpoch(0));
  ExpectRestOfEpoch(**loader, 0, 0, server.service());
  ASSERT_OK((*loader)->StartEpoch(1));
  ExpectRestOfEpoch(**loader, 1, 0, server.service());
  // Epoch 1's batches were asked for only once it started, so each request
  // of epoch 0 came before any of epoch 1, and nothing of epoch 2 came.
  const std::vector<FakeStream::Key> requested = server.service().requested();
  ASSERT_EQ(requested.size(), 12u);
  for (size_t i = 0; i < requested.size(); ++i) {
    EXPECT_EQ(requested[i].first, i < 6 ? 0u : 1u) << "request " << i;
  }
}

TEST(LoaderTest, StartEpochValidatesArguments) {
  FakeServer server(FakeDataService::Options{}, FakeDataService::ServeInOrder());
  absl::StatusOr<std::unique_ptr<Loader>> loader =
      Loader::Create(OptionsFor(server));
  ASSERT_OK(loader);
  EXPECT_THAT((*loader)->Next(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("StartEpoch")));
  EXPECT_THAT((*loader)->StartEpoch(0, /*first_batch=*/9),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("first batch")));
  EXPECT_THAT((*loader)->StartEpoch(uint64_t{1} << 32),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("epoch")));
  ASSERT_OK((*loader)->StartEpoch(0, /*first_batch=*/8));
  EXPECT_THAT((*loader)->Next(),
              StatusIs(absl::StatusCode::kOutOfRange, ::testing::_));
}

// Counts allocations and hands out heap buffers.
class CountingAllocator : public BufferAllocator {
 public:
  absl::StatusOr<std::unique_ptr<HostBuffer>> Allocate(size_t bytes) override {
    absl::StatusOr<std::unique_ptr<HostBuffer>> buffer = heap_->Allocate(bytes);
    if (buffer.ok()) {
      absl::MutexLock lock(&mu_);
      starts_.push_back((*buffer)->data());
    }
    return buffer;
  }
  const char* name() const override { return "counting"; }
  std::vector<const uint8_t*> starts() const {
    absl::MutexLock lock(&mu_);
    return starts_;
  }

 private:
  std::unique_ptr<BufferAllocator> heap_ = NewHeapAllocator();
  mutable absl::Mutex mu_;
  std::vector<const uint8_t*> starts_ ABSL_GUARDED_BY(mu_);
};

TEST(LoaderTest, AllocatesTheRingOnceThroughTheGivenAllocator) {
  FakeDataService::Options fake;
  fake.batches_per_epoch = 12;
  FakeServer server(fake, FakeDataService::ServeReversedGroups(3));
  CountingAllocator allocator;
  LoaderOptions options = OptionsFor(server, /*prefetch=*/3);
  options.allocator = &allocator;
  absl::StatusOr<std::unique_ptr<Loader>> loader =
      Loader::Create(std::move(options));
  ASSERT_OK(loader);
  for (uint64_t epoch = 0; epoch < 2; ++epoch) {
    ASSERT_OK((*loader)->StartEpoch(epoch));
    for (uint64_t index = 0; index < 12; ++index) {
      absl::StatusOr<Batch> batch = (*loader)->Next();
      ASSERT_OK(batch);
      EXPECT_THAT(allocator.starts(), ::testing::Contains(batch->data()));
    }
  }
  EXPECT_EQ(allocator.starts().size(), 3u);
}

TEST(LoaderTest, BatchOutlivesItsLoader) {
  FakeServer server(FakeDataService::Options{}, FakeDataService::ServeInOrder());
  Batch batch;
  {
    absl::StatusOr<std::unique_ptr<Loader>> loader =
        Loader::Create(OptionsFor(server));
    ASSERT_OK(loader);
    ASSERT_OK((*loader)->StartEpoch(0));
    absl::StatusOr<Batch> next = (*loader)->Next();
    ASSERT_OK(next);
    batch = *std::move(next);
  }
  ExpectFakeBatch(batch, 0, 0, server.service());
}

TEST(LoaderTest, ConsumerReleasingBatchesOnAnotherThread) {
  FakeDataService::Options fake;
  fake.batches_per_epoch = 40;
  FakeServer server(fake, FakeDataService::ServeReversedGroups(2));
  absl::StatusOr<std::unique_ptr<Loader>> loader =
      Loader::Create(OptionsFor(server, /*prefetch=*/3));
  ASSERT_OK(loader);
  ASSERT_OK((*loader)->StartEpoch(0));
  absl::Mutex mu;
  std::vector<Batch> handoff;  // protected by mu
  uint64_t released = 0;       // protected by mu
  bool done = false;           // protected by mu
  std::thread releaser([&] {
    for (;;) {
      std::vector<Batch> batches;
      {
        absl::MutexLock lock(&mu);
        auto ready = [&] { return !handoff.empty() || done; };
        mu.Await(absl::Condition(&ready));
        if (handoff.empty()) return;
        batches.swap(handoff);
      }
      const uint64_t n = batches.size();
      batches.clear();  // returns the slots, from this thread
      absl::MutexLock lock(&mu);
      released += n;
    }
  });
  for (uint64_t index = 0; index < 40; ++index) {
    {
      // Keep a slot free for the next batch.
      absl::MutexLock lock(&mu);
      auto slot_free = [&] { return index - released < 3; };
      mu.Await(absl::Condition(&slot_free));
    }
    absl::StatusOr<Batch> batch = (*loader)->Next();
    if (!batch.ok()) {
      ADD_FAILURE() << batch.status();
      break;
    }
    ExpectFakeBatch(*batch, 0, index, server.service());
    absl::MutexLock lock(&mu);
    handoff.push_back(*std::move(batch));
  }
  {
    absl::MutexLock lock(&mu);
    done = true;
  }
  releaser.join();
  EXPECT_THAT((*loader)->Next(),
              StatusIs(absl::StatusCode::kOutOfRange, ::testing::_));
  EXPECT_EQ(server.service().window_violations(), 0u);
}

}  // namespace
}  // namespace batchd::client
