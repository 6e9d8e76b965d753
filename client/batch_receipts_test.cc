#include "client/batch_receipts.h"

#include "absl/status/status.h"
#include "testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace batchd::client {
namespace {

using ::batchd::testing::StatusIs;
using Key = BatchReceipts::Key;

constexpr uint64_t kMaxBatchBytes = 1000;

batchd::v1::BatchHeader Header(uint64_t epoch, uint64_t index,
                               uint64_t total_bytes) {
  batchd::v1::BatchHeader header;
  header.set_epoch(epoch);
  header.set_batch_index(index);
  header.set_total_bytes(total_bytes);
  return header;
}

common::ChunkInfo Chunk(uint64_t epoch, uint64_t index, uint64_t offset,
                        uint64_t length) {
  common::ChunkInfo chunk;
  chunk.epoch = epoch;
  chunk.batch_index = index;
  chunk.offset = offset;
  chunk.length = length;
  return chunk;
}

absl::Status Check(const BatchReceipts& receipts, int daemon,
                   const batchd::v1::BatchHeader& header, bool awaited = true,
                   bool shared_memory = false) {
  return receipts.CheckHeader(daemon, header, awaited, kMaxBatchBytes,
                              shared_memory);
}

TEST(BatchReceiptsTest, ChunksFillTheSlotInOrder) {
  BatchReceipts receipts;
  const int d = receipts.Add();
  const batchd::v1::BatchHeader header = Header(0, 3, 10);
  ASSERT_TRUE(Check(receipts, d, header).ok());
  EXPECT_FALSE(receipts.Begin(d, Key{0, 3}, 10, /*slot=*/2,
                              /*in_shared_memory=*/false));
  EXPECT_TRUE(receipts.receipt(d).active);

  absl::StatusOr<BatchReceipts::Destination> first =
      receipts.Place(d, Chunk(0, 3, 0, 6));
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->slot, 2);
  EXPECT_EQ(first->offset, 0u);
  EXPECT_FALSE(receipts.Advance(d, 6, absl::Microseconds(3)));

  absl::StatusOr<BatchReceipts::Destination> second =
      receipts.Place(d, Chunk(0, 3, 6, 4));
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->slot, 2);
  EXPECT_EQ(second->offset, 6u);
  EXPECT_TRUE(receipts.Advance(d, 4, absl::Microseconds(2)));

  EXPECT_EQ(receipts.received_bytes(), 10u);
  EXPECT_EQ(receipts.copy(), absl::Microseconds(5));
  receipts.Reset(d);
  EXPECT_FALSE(receipts.receipt(d).active);
}

TEST(BatchReceiptsTest, LosingCopyIsReadIntoScratchAndCostsNoCopyTime) {
  BatchReceipts receipts;
  const int d = receipts.Add();
  receipts.Begin(d, Key{1, 0}, 8, /*slot=*/-1, false);
  absl::StatusOr<BatchReceipts::Destination> place =
      receipts.Place(d, Chunk(1, 0, 0, 8));
  ASSERT_TRUE(place.ok());
  EXPECT_EQ(place->slot, -1);
  ASSERT_NE(place->scratch, nullptr);
  place->scratch[7] = 1;  // room for the chunk
  EXPECT_TRUE(receipts.Advance(d, 8, absl::Microseconds(9)));
  EXPECT_EQ(receipts.received_bytes(), 8u);
  EXPECT_EQ(receipts.copy(), absl::ZeroDuration());
}

TEST(BatchReceiptsTest, ScratchChunksAreAtMost4MiB) {
  BatchReceipts receipts;
  const int d = receipts.Add();
  receipts.Begin(d, Key{0, 0}, uint64_t{8} << 20, /*slot=*/-1, false);
  EXPECT_THAT(receipts.Place(d, Chunk(0, 0, 0, (uint64_t{4} << 20) + 1))
                  .status(),
              StatusIs(absl::StatusCode::kInternal,
                       "a chunk of 4194305 bytes, over the 4 MiB limit"));
}

TEST(BatchReceiptsTest, SharedMemoryHeaderCompletesTheBatch) {
  BatchReceipts receipts;
  const int d = receipts.Add();
  batchd::v1::BatchHeader header = Header(0, 1, 600);
  header.set_in_shared_memory(true);
  EXPECT_TRUE(Check(receipts, d, header, true, /*shared_memory=*/true).ok());
  EXPECT_TRUE(receipts.Begin(d, Key{0, 1}, 600, /*slot=*/0,
                             /*in_shared_memory=*/true));
  EXPECT_EQ(receipts.received_bytes(), 600u);
}

TEST(BatchReceiptsTest, EmptyBatchIsCompleteAtItsHeader) {
  BatchReceipts receipts;
  const int d = receipts.Add();
  EXPECT_TRUE(receipts.Begin(d, Key{0, 1}, 0, /*slot=*/0, false));
}

TEST(BatchReceiptsTest, HeaderProtocolErrors) {
  BatchReceipts receipts;
  const int d = receipts.Add();
  EXPECT_THAT(Check(receipts, d, Header(0, 4, 10), /*awaited=*/false),
              StatusIs(absl::StatusCode::kInternal,
                       "header of batch 4 of epoch 0, which is not awaited"));
  EXPECT_THAT(Check(receipts, d, Header(0, 4, 1001)),
              StatusIs(absl::StatusCode::kInternal,
                       "batch 4 of epoch 0 has 1001 bytes, more than "
                       "max_batch_bytes 1000"));
  batchd::v1::BatchHeader shared = Header(0, 4, 10);
  shared.set_in_shared_memory(true);
  EXPECT_THAT(Check(receipts, d, shared),
              StatusIs(absl::StatusCode::kInternal,
                       "batch 4 of epoch 0 is in shared memory, which this "
                       "stream has not attached"));
  EXPECT_THAT(Check(receipts, d, Header(0, 4, 10), true,
                    /*shared_memory=*/true),
              StatusIs(absl::StatusCode::kInternal,
                       "batch 4 of epoch 0 comes as bytes on a stream with "
                       "shared memory attached"));
  batchd::v1::BatchHeader shaped = Header(0, 4, 12);
  shaped.add_shape(2);
  shaped.add_shape(5);
  EXPECT_THAT(Check(receipts, d, shaped),
              StatusIs(absl::StatusCode::kInternal,
                       "batch 4 of epoch 0 has shape with 10 elements but 12 "
                       "bytes"));
  shaped.set_total_bytes(10);
  EXPECT_TRUE(Check(receipts, d, shaped).ok());
  batchd::v1::BatchHeader huge = Header(0, 4, 10);
  huge.add_shape(uint64_t{1} << 40);
  huge.add_shape(uint64_t{1} << 40);
  EXPECT_THAT(Check(receipts, d, huge),
              StatusIs(absl::StatusCode::kInternal, "shape overflows"));

  // A header while another batch is incomplete.
  receipts.Begin(d, Key{0, 2}, 10, /*slot=*/0, false);
  EXPECT_THAT(Check(receipts, d, Header(0, 4, 10)),
              StatusIs(absl::StatusCode::kInternal,
                       "header of batch 4 of epoch 0 while batch 2 of epoch 0 "
                       "is incomplete"));
}

// Plan.views: the views' blocks tile the pixels, in order.
TEST(BatchReceiptsTest, ViewsMustTileThePixels) {
  BatchReceipts receipts;
  const int d = receipts.Add();
  auto add_view = [](batchd::v1::BatchHeader& header, uint64_t offset,
                     uint64_t n, uint64_t side) {
    batchd::v1::ViewShape* view = header.add_views();
    for (uint64_t dim : {n, side, side, uint64_t{3}}) view->add_shape(dim);
    view->set_offset(offset);
  };
  // 2 samples: 2 views of 4x4 (96 bytes each), 1 of 2x2 (24 bytes).
  batchd::v1::BatchHeader header = Header(0, 1, 216);
  header.add_shape(216);
  add_view(header, 0, 2, 4);
  add_view(header, 96, 2, 4);
  add_view(header, 192, 2, 2);
  EXPECT_TRUE(Check(receipts, d, header).ok());
  batchd::v1::BatchHeader gap = header;
  gap.mutable_views(1)->set_offset(100);
  EXPECT_THAT(Check(receipts, d, gap),
              StatusIs(absl::StatusCode::kInternal,
                       "batch 1 of epoch 0 has a view at offset 100 where the "
                       "previous one ends at 96"));
  batchd::v1::BatchHeader short_views = header;
  short_views.mutable_views()->RemoveLast();
  EXPECT_THAT(Check(receipts, d, short_views),
              StatusIs(absl::StatusCode::kInternal,
                       "batch 1 of epoch 0 has views of 192 bytes but 216 "
                       "bytes of pixels"));
}

TEST(BatchReceiptsTest, ChunkProtocolErrors) {
  BatchReceipts receipts;
  const int d = receipts.Add();
  EXPECT_THAT(receipts.Place(d, Chunk(0, 2, 0, 4)).status(),
              StatusIs(absl::StatusCode::kInternal,
                       "chunk of batch 2 of epoch 0, which is not the batch "
                       "being received"));
  receipts.Begin(d, Key{0, 2}, 10, /*slot=*/1, false);
  EXPECT_THAT(receipts.Place(d, Chunk(0, 3, 0, 4)).status(),
              StatusIs(absl::StatusCode::kInternal,
                       "chunk of batch 3 of epoch 0, which is not the batch "
                       "being received"));
  EXPECT_THAT(receipts.Place(d, Chunk(0, 2, 4, 4)).status(),
              StatusIs(absl::StatusCode::kInternal,
                       "chunk of batch 2 of epoch 0 at offset 4; expected "
                       "offset 0"));
  EXPECT_THAT(receipts.Place(d, Chunk(0, 2, 0, 11)).status(),
              StatusIs(absl::StatusCode::kInternal,
                       "chunk of batch 2 of epoch 0 at offset 0 with 11 bytes "
                       "overflows the batch's 10 bytes"));
}

TEST(BatchReceiptsTest, DaemonsReceiveIndependently) {
  BatchReceipts receipts;
  const int a = receipts.Add();
  const int b = receipts.Add();
  receipts.Begin(a, Key{0, 0}, 4, /*slot=*/0, false);
  EXPECT_TRUE(Check(receipts, b, Header(0, 1, 4)).ok());
  receipts.Begin(b, Key{0, 1}, 4, /*slot=*/1, false);
  EXPECT_TRUE(receipts.Advance(b, 4, absl::ZeroDuration()));
  EXPECT_EQ(receipts.receipt(a).received, 0u);
  EXPECT_EQ(receipts.receipt(b).received, 4u);
}

}  // namespace
}  // namespace batchd::client
