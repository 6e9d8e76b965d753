#include "client/slot_ring.h"

#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "client/buffer.h"
#include "common/shared_region.h"
#include "testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace batchd::client {
namespace {

using ::batchd::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using Key = SlotRing::Key;
using State = SlotRing::State;

constexpr uint64_t kSlotBytes = 64;
constexpr common::EpochBatches kBatchesPerEpoch{.per_epoch = 10};

batchd::v1::BatchHeader HeaderOf(const Key& key) {
  batchd::v1::BatchHeader header;
  header.set_epoch(key.first);
  header.set_batch_index(key.second);
  header.set_total_bytes(kSlotBytes);
  return header;
}

// A ring of `window` slots (growable to `most`) on heap buffers, started at
// epoch 0.
class SlotRingTest : public ::testing::Test {
 protected:
  void Build(size_t window, size_t most, SlotRing::Options options = {},
             common::EpochBatches batches = kBatchesPerEpoch) {
    ring_ = std::make_unique<SlotRing>(allocator_.get(), options);
    ASSERT_OK(ring_->Build(kSlotBytes, batches, window, most,
                           /*shared=*/false));
  }

  // Header and every byte of `key` from daemon 0: kReady.
  void Deliver(const Key& key) {
    const int slot = ring_->Find(key);
    ASSERT_GE(slot, 0);
    ASSERT_OK(ring_->Grant(slot, nullptr));
    ASSERT_TRUE(ring_->Receive(slot, /*daemon=*/0, HeaderOf(key)));
    std::memset(ring_->data(slot), static_cast<int>(key.second), kSlotBytes);
    ring_->Complete(slot);
  }

  std::unique_ptr<BufferAllocator> allocator_ = NewHeapAllocator();
  std::unique_ptr<SlotRing> ring_;
};

TEST_F(SlotRingTest, NothingIsAskedBeforeTheFirstRetarget) {
  Build(/*window=*/3, /*most=*/3);
  EXPECT_FALSE(ring_->started());
  EXPECT_THAT(ring_->Reserve(), IsEmpty());
}

TEST_F(SlotRingTest, WindowFullReservesNoMore) {
  Build(/*window=*/3, /*most=*/3);
  EXPECT_THAT(ring_->Retarget(/*epoch=*/0, /*first_batch=*/0), IsEmpty());
  EXPECT_THAT(ring_->Reserve(),
              ElementsAre(Key{0, 0}, Key{0, 1}, Key{0, 2}));
  EXPECT_THAT(ring_->Reserve(), IsEmpty());
  EXPECT_FALSE(ring_->AnyFree());
  EXPECT_TRUE(ring_->AnyInFlight());
  for (int slot = 0; slot < 3; ++slot) {
    EXPECT_EQ(ring_->state(slot), State::kRequested);
  }
}

TEST_F(SlotRingTest, LeasedSlotIsReusedOnlyAfterRelease) {
  Build(/*window=*/2, /*most=*/2);
  ring_->Retarget(0, 0);
  ring_->Reserve();
  Deliver({0, 0});
  const int slot = ring_->Find({0, 0});
  ASSERT_EQ(ring_->state(slot), State::kReady);
  SlotRing::Lease lease = ring_->TakeReady(slot);
  EXPECT_EQ(lease.key, (Key{0, 0}));
  EXPECT_EQ(lease.slot, slot);
  EXPECT_EQ(lease.header.batch_index(), 0u);
  EXPECT_EQ(lease.data[kSlotBytes - 1], 0);
  EXPECT_EQ(ring_->next_batch(), 1u);
  EXPECT_EQ(ring_->Find({0, 0}), -1);
  // Batch 2 is in the window, but the leased slot is not free.
  EXPECT_THAT(ring_->Reserve(), IsEmpty());
  EXPECT_TRUE(ring_->Release(slot));
  EXPECT_FALSE(ring_->Release(slot));  // once
  EXPECT_THAT(ring_->Reserve(), ElementsAre(Key{0, 2}));
  EXPECT_EQ(ring_->Find({0, 2}), slot);
}

TEST_F(SlotRingTest, EverySlotLeasedIsAllLeased) {
  Build(/*window=*/2, /*most=*/4);
  ring_->Retarget(0, 0);
  ring_->Reserve();
  Deliver({0, 0});
  Deliver({0, 1});
  EXPECT_FALSE(ring_->AllLeased());
  ring_->TakeReady(ring_->Find({0, 0}));
  ring_->TakeReady(ring_->Find({0, 1}));
  // The two inactive slots do not count.
  EXPECT_TRUE(ring_->AllLeased());
  EXPECT_FALSE(ring_->AnyFree());
}

TEST_F(SlotRingTest, GrowPutsMoreSlotsInUpToTheMost) {
  Build(/*window=*/2, /*most=*/3);
  ring_->Retarget(0, 0);
  EXPECT_THAT(ring_->Reserve(), ElementsAre(Key{0, 0}, Key{0, 1}));
  EXPECT_EQ(ring_->state(2), State::kInactive);
  std::vector<std::unique_ptr<HostBuffer>> buffers;
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<std::unique_ptr<HostBuffer>> buffer =
        allocator_->Allocate(kSlotBytes);
    ASSERT_OK(buffer);
    buffers.push_back(*std::move(buffer));
  }
  EXPECT_EQ(ring_->Grow(std::move(buffers)), 1u);  // only one more fits
  EXPECT_EQ(ring_->active(), 3u);
  EXPECT_THAT(ring_->Reserve(), ElementsAre(Key{0, 2}));
  EXPECT_EQ(ring_->GrowShared(5), 0u);
}

TEST_F(SlotRingTest, AttachedSharedMemoryHoldsTheGrantedSlotsBytes) {
  ring_ = std::make_unique<SlotRing>(allocator_.get(), SlotRing::Options{});
  // Over shared memory no buffer is allocated up front.
  ASSERT_OK(ring_->Build(kSlotBytes, kBatchesPerEpoch, /*window=*/2,
                         /*most=*/4, /*shared=*/true));
  absl::StatusOr<common::SharedRegion> region =
      common::SharedRegion::Create(4 * kSlotBytes);
  ASSERT_OK(region);
  auto shared = std::make_shared<SharedRing>();
  shared->region = *std::move(region);
  shared->slot_bytes = kSlotBytes;
  shared->slots = 4;
  ring_->Retarget(0, 0);
  ring_->Reserve();
  const int slot = ring_->Find({0, 1});
  ASSERT_OK(ring_->Grant(slot, shared));
  EXPECT_EQ(ring_->data(slot), shared->slot(static_cast<uint32_t>(slot)));
  EXPECT_EQ(ring_->GrowShared(1), 1u);
  EXPECT_EQ(ring_->active(), 3u);
  // The same slot granted to a bytes stream gets a buffer of its own.
  ASSERT_OK(ring_->Grant(slot, nullptr));
  EXPECT_NE(ring_->data(slot), shared->slot(static_cast<uint32_t>(slot)));
  EXPECT_NE(ring_->data(slot), nullptr);
}

TEST_F(SlotRingTest, ReadsTheNextEpochAheadUpToTheLastEpoch) {
  SlotRing::Options options;
  options.last_epoch = 1;
  Build(/*window=*/3, /*most=*/3, options);
  ring_->Retarget(/*epoch=*/0, /*first_batch=*/9);
  EXPECT_THAT(ring_->Reserve(),
              ElementsAre(Key{0, 9}, Key{1, 0}, Key{1, 1}));
  EXPECT_EQ(ring_->Ahead(1), (Key{1, 0}));
  ring_->Retarget(/*epoch=*/1, /*first_batch=*/9);
  EXPECT_EQ(ring_->Ahead(0), (Key{1, 9}));
  EXPECT_EQ(ring_->Ahead(1), std::nullopt);  // epoch 1 is the last
}

TEST_F(SlotRingTest, AResumedEpochIsShorterAndTheNextOneWhole) {
  // An elastic resume left 2 batches of epoch 4; epoch 5 has all 10.
  Build(/*window=*/4, /*most=*/4, SlotRing::Options{},
        {.per_epoch = 10, .resumed_epoch = 4, .resumed = 2});
  EXPECT_EQ(ring_->batches_in(4), 2u);
  EXPECT_EQ(ring_->batches_in(5), 10u);
  ring_->Retarget(/*epoch=*/4, /*first_batch=*/0);
  EXPECT_THAT(ring_->Reserve(),
              ElementsAre(Key{4, 0}, Key{4, 1}, Key{5, 0}, Key{5, 1}));
  ring_->Retarget(/*epoch=*/5, /*first_batch=*/8);
  EXPECT_EQ(ring_->Ahead(1), (Key{5, 9}));
  EXPECT_EQ(ring_->Ahead(2), (Key{6, 0}));
}

TEST_F(SlotRingTest, WithoutNextEpochPrefetchTheWindowEndsWithTheEpoch) {
  SlotRing::Options options;
  options.next_epoch_prefetch = false;
  Build(/*window=*/3, /*most=*/3, options);
  ring_->Retarget(0, 9);
  EXPECT_THAT(ring_->Reserve(), ElementsAre(Key{0, 9}));
}

TEST_F(SlotRingTest, RetargetKeepsWhatTheNewWindowWantsAndFreesTheRest) {
  Build(/*window=*/3, /*most=*/3);
  ring_->Retarget(0, 0);
  ring_->Reserve();  // 0, 1, 2
  Deliver({0, 2});
  const int kept = ring_->Find({0, 2});
  EXPECT_THAT(ring_->Retarget(0, 2), ElementsAre(Key{0, 0}, Key{0, 1}));
  EXPECT_EQ(ring_->Find({0, 2}), kept);
  EXPECT_EQ(ring_->state(kept), State::kReady);
  EXPECT_THAT(ring_->Reserve(), ElementsAre(Key{0, 3}, Key{0, 4}));
}

TEST_F(SlotRingTest, LateChunksOfAnUnwantedBatchLandAndItsSlotIsFreedAfter) {
  Build(/*window=*/2, /*most=*/2);
  ring_->Retarget(0, 0);
  ring_->Reserve();
  const int slot = ring_->Find({0, 0});
  ASSERT_OK(ring_->Grant(slot, nullptr));
  ASSERT_TRUE(ring_->Receive(slot, /*daemon=*/1, HeaderOf({0, 0})));
  // The consumer moves on while batch 0's bytes are being written: the
  // slot stays theirs (not freed, not handed to batch 5).
  EXPECT_THAT(ring_->Retarget(0, 5), ElementsAre(Key{0, 1}));
  EXPECT_EQ(ring_->state(slot), State::kReceiving);
  EXPECT_THAT(ring_->Reserve(), ElementsAre(Key{0, 5}));
  // The late chunks still have somewhere to go...
  std::memset(ring_->data(slot), 7, kSlotBytes);
  ring_->AddCopy(slot, absl::Milliseconds(1));
  // ...and the last one frees the slot instead of making it ready.
  ring_->Complete(slot);
  EXPECT_EQ(ring_->state(slot), State::kFree);
  EXPECT_EQ(ring_->Find({0, 0}), -1);
  EXPECT_THAT(ring_->Reserve(), ElementsAre(Key{0, 6}));
}

TEST_F(SlotRingTest, AnOrphanWantedAgainIsAdopted) {
  Build(/*window=*/2, /*most=*/2);
  ring_->Retarget(0, 0);
  ring_->Reserve();
  const int slot = ring_->Find({0, 0});
  ASSERT_TRUE(ring_->Receive(slot, 0, HeaderOf({0, 0})));
  ring_->Retarget(0, 5);
  ring_->Retarget(0, 0);  // back: batch 0 is wanted again
  EXPECT_THAT(ring_->Reserve(), ElementsAre(Key{0, 1}));
  ring_->Complete(slot);
  EXPECT_EQ(ring_->state(slot), State::kReady);
}

TEST_F(SlotRingTest, RejectedBatchFailsOnceAndFreesItsSlot) {
  Build(/*window=*/2, /*most=*/2);
  ring_->Retarget(0, 0);
  ring_->Reserve();
  const int slot = ring_->Find({0, 0});
  EXPECT_TRUE(ring_->Reject(slot, absl::ResourceExhaustedError("budget")));
  EXPECT_EQ(ring_->state(slot), State::kFailed);
  EXPECT_THAT(ring_->TakeFailed(slot),
              StatusIs(absl::StatusCode::kResourceExhausted, "budget"));
  EXPECT_EQ(ring_->state(slot), State::kFree);
  EXPECT_EQ(ring_->next_batch(), 0u);  // the position stays
  EXPECT_THAT(ring_->Reserve(), ElementsAre(Key{0, 0}));
}

TEST_F(SlotRingTest, RejectionOfAnOrphanFreesItsSlot) {
  Build(/*window=*/2, /*most=*/2);
  ring_->Retarget(0, 0);
  ring_->Reserve();
  auto shared = std::make_shared<SharedRing>();  // a grant in shared memory
  const int slot = ring_->Find({0, 1});
  ASSERT_OK(ring_->Grant(slot, shared));
  ring_->Retarget(0, 5);
  ASSERT_EQ(ring_->state(slot), State::kRequested);  // orphaned, still granted
  EXPECT_FALSE(ring_->Reject(slot, absl::CancelledError("cancelled")));
  EXPECT_EQ(ring_->state(slot), State::kFree);
}

TEST_F(SlotRingTest, LostDaemonsBatchStartsOver) {
  Build(/*window=*/2, /*most=*/2);
  ring_->Retarget(0, 0);
  ring_->Reserve();
  const int slot = ring_->Find({0, 0});
  ASSERT_TRUE(ring_->Receive(slot, 0, HeaderOf({0, 0})));
  ring_->Restart({0, 0});
  EXPECT_EQ(ring_->state(slot), State::kRequested);
  EXPECT_EQ(ring_->Find({0, 0}), slot);
  // A second header for it (from another daemon) is accepted.
  EXPECT_TRUE(ring_->Receive(slot, 1, HeaderOf({0, 0})));
  EXPECT_FALSE(ring_->Receive(slot, 1, HeaderOf({0, 0})));
}

TEST_F(SlotRingTest, CancelledSharedMemoryGrantsAreFreedWhenTheirStreamEnds) {
  Build(/*window=*/3, /*most=*/3);
  ring_->Retarget(0, 0);
  ring_->Reserve();
  auto lost = std::make_shared<SharedRing>();
  auto other = std::make_shared<SharedRing>();
  ASSERT_OK(ring_->Grant(ring_->Find({0, 0}), lost));
  ASSERT_OK(ring_->Grant(ring_->Find({0, 1}), lost));
  ASSERT_OK(ring_->Grant(ring_->Find({0, 2}), other));
  // Moving on does not free them: the daemon's workers may still write.
  ring_->Retarget(0, 1);
  EXPECT_EQ(ring_->state(ring_->Find({0, 0})), State::kRequested);
  // Batch 1 is wanted again (not an orphan); batch 0 is freed with the
  // stream whose ring it was granted in.
  EXPECT_THAT(ring_->Reserve(), IsEmpty());
  EXPECT_THAT(ring_->DropOrphanGrants(lost.get()), ElementsAre(Key{0, 0}));
  EXPECT_EQ(ring_->Find({0, 0}), -1);
  EXPECT_GE(ring_->Find({0, 1}), 0);
  EXPECT_THAT(ring_->DropOrphanGrants(other.get()), IsEmpty());
}

// Hands out buffers one byte short.
class ShortAllocator : public BufferAllocator {
 public:
  absl::StatusOr<std::unique_ptr<HostBuffer>> Allocate(size_t bytes) override {
    return heap_->Allocate(bytes - 1);
  }
  const char* name() const override { return "short"; }

 private:
  std::unique_ptr<BufferAllocator> heap_ = NewHeapAllocator();
};

TEST(SlotRingBuildTest, ShortBufferIsInternal) {
  ShortAllocator allocator;
  SlotRing ring(&allocator, SlotRing::Options{});
  EXPECT_THAT(ring.Build(/*slot_bytes=*/1 << 20, kBatchesPerEpoch, 2, 2,
                         /*shared=*/false),
              StatusIs(absl::StatusCode::kInternal, ::testing::_));
}

TEST(SizeRingTest, CapsAtTheGrantsAndGrowsWithinTheMemoryCap) {
  batchd::v1::PlanOpened opened;
  opened.set_window(4);
  opened.set_max_batch_bytes(100);
  // One daemon: prefetch beyond its window would never fill.
  EXPECT_EQ(SizeRing(8, false, 0, opened, 1).window, 4u);
  // Zero prefetch takes the grants of every daemon.
  EXPECT_EQ(SizeRing(0, false, 0, opened, 3).window, 12u);
  const RingSize grow = SizeRing(2, true, /*max_bytes=*/1000, opened, 2);
  EXPECT_EQ(grow.window, 2u);
  EXPECT_EQ(grow.most, 8u);  // 10 fit in memory, 8 are granted
}

}  // namespace
}  // namespace batchd::client
