#include "server/pipeline/batch_buffer_pool.h"

#include <unistd.h>

#include <thread>
#include <utility>
#include <vector>

#include "testing/status_matchers.h"
#include "gtest/gtest.h"

namespace batchd::server {
namespace {

constexpr size_t kBatch = 64 * 224 * 224 * 3;
// What such a buffer maps: whole huge pages.
constexpr size_t kBatchMapped =
    (kBatch + common::kHugePageBytes - 1) / common::kHugePageBytes *
    common::kHugePageBytes;

TEST(BatchBufferPoolTest, ReusesAReleasedBufferOfTheSameSize) {
  auto pool = BatchBufferPool::Create(uint64_t{1} << 30);
  absl::StatusOr<BatchBuffer> first = pool->Acquire(kBatch);
  ASSERT_OK(first);
  EXPECT_EQ(first->size(), kBatch);
  uint8_t* const memory = first->data();
  memory[kBatch - 1] = 7;
  *first = BatchBuffer();  // released by the move-assignment
  EXPECT_EQ(pool->idle_bytes(), kBatchMapped);

  absl::StatusOr<BatchBuffer> second = pool->Acquire(kBatch);
  ASSERT_OK(second);
  EXPECT_EQ(second->data(), memory);
  EXPECT_EQ(second->data()[kBatch - 1], 7);  // not cleared: same memory
  EXPECT_EQ(pool->idle_bytes(), 0u);
}

TEST(BatchBufferPoolTest, OtherSizesGetTheirOwnBuffers) {
  auto pool = BatchBufferPool::Create(uint64_t{1} << 30);
  { ASSERT_OK(pool->Acquire(kBatch)); }
  absl::StatusOr<BatchBuffer> smaller = pool->Acquire(kBatch / 2);
  ASSERT_OK(smaller);
  EXPECT_EQ(smaller->size(), kBatch / 2);
  EXPECT_EQ(pool->idle_bytes(), kBatchMapped);  // the big one stays idle
}

TEST(BatchBufferPoolTest, KeepsAtMostMaxIdleBytesDroppingTheOldest) {
  auto pool = BatchBufferPool::Create(2 * kBatchMapped);
  std::vector<BatchBuffer> held;
  std::vector<uint8_t*> addresses;
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<BatchBuffer> buffer = pool->Acquire(kBatch);
    ASSERT_OK(buffer);
    addresses.push_back(buffer->data());
    held.push_back(*std::move(buffer));
  }
  held.clear();  // releases 0, 1, 2 in order; 0 is dropped
  EXPECT_EQ(pool->idle_bytes(), 2 * kBatchMapped);
  absl::StatusOr<BatchBuffer> a = pool->Acquire(kBatch);
  absl::StatusOr<BatchBuffer> b = pool->Acquire(kBatch);
  ASSERT_OK(a);
  ASSERT_OK(b);
  EXPECT_EQ(a->data(), addresses[2]);  // newest first
  EXPECT_EQ(b->data(), addresses[1]);
  EXPECT_EQ(pool->idle_bytes(), 0u);
}

TEST(BatchBufferPoolTest, IdleBytesCountWholePages) {
  auto pool = BatchBufferPool::Create(uint64_t{1} << 30);
  { ASSERT_OK(pool->Acquire(100)); }
  // One small page, not a huge one.
  EXPECT_EQ(pool->idle_bytes(), static_cast<uint64_t>(sysconf(_SC_PAGESIZE)));
}

TEST(BatchBufferPoolTest, ZeroIdleBytesKeepsNothing) {
  auto pool = BatchBufferPool::Create(0);
  { ASSERT_OK(pool->Acquire(kBatch)); }
  EXPECT_EQ(pool->idle_bytes(), 0u);
}

TEST(BatchBufferPoolTest, BufferOutlivesThePoolsOwner) {
  auto pool = BatchBufferPool::Create(uint64_t{1} << 30);
  absl::StatusOr<BatchBuffer> buffer = pool->Acquire(1000);
  ASSERT_OK(buffer);
  pool.reset();
  buffer->data()[999] = 1;  // still mapped
  EXPECT_EQ(buffer->data()[999], 1);
}

TEST(BatchBufferPoolTest, NoMemoryIsResourceExhaustedWithAHint) {
  auto pool = BatchBufferPool::Create(uint64_t{1} << 30);
  EXPECT_THAT(pool->Acquire(SIZE_MAX / 2),
              batchd::testing::StatusIs(
                  absl::StatusCode::kResourceExhausted,
                  ::testing::HasSubstr("lower --max_buffer_bytes")));
}

TEST(BatchBufferPoolTest, ConcurrentAcquireAndRelease) {
  auto pool = BatchBufferPool::Create(8 * 4096);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&pool, t] {
      for (int i = 0; i < 500; ++i) {
        const size_t bytes = 4096 * (1 + (i + t) % 3);
        absl::StatusOr<BatchBuffer> buffer = pool->Acquire(bytes);
        ASSERT_TRUE(buffer.ok());
        buffer->data()[0] = static_cast<uint8_t>(t);
        buffer->data()[bytes - 1] = static_cast<uint8_t>(t);
        ASSERT_EQ(buffer->data()[0], t);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_LE(pool->idle_bytes(), 8u * 4096);
}

}  // namespace
}  // namespace batchd::server
