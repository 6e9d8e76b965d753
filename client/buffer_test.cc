#include "client/buffer.h"

#include <cstdint>
#include <cstring>

#include "testing/status_matchers.h"
#include "gtest/gtest.h"

namespace batchd::client {
namespace {

TEST(HeapAllocatorTest, AllocatesAlignedWritableBuffers) {
  std::unique_ptr<BufferAllocator> allocator = NewHeapAllocator();
  EXPECT_STREQ(allocator->name(), "heap");
  for (size_t bytes : {size_t{1}, size_t{63}, size_t{64}, size_t{150529}}) {
    absl::StatusOr<std::unique_ptr<HostBuffer>> buffer =
        allocator->Allocate(bytes);
    ASSERT_OK(buffer);
    EXPECT_EQ((*buffer)->size(), bytes);
    EXPECT_EQ(reinterpret_cast<uintptr_t>((*buffer)->data()) % 64, 0u);
    std::memset((*buffer)->data(), 0xab, bytes);
    EXPECT_EQ((*buffer)->data()[bytes - 1], 0xab);
  }
}

TEST(HeapAllocatorTest, ZeroBytesGivesAValidBuffer) {
  std::unique_ptr<BufferAllocator> allocator = NewHeapAllocator();
  absl::StatusOr<std::unique_ptr<HostBuffer>> buffer = allocator->Allocate(0);
  ASSERT_OK(buffer);
  EXPECT_EQ((*buffer)->size(), 0u);
  EXPECT_NE((*buffer)->data(), nullptr);
}

TEST(HeapAllocatorTest, ImpossibleSizeIsResourceExhausted) {
  std::unique_ptr<BufferAllocator> allocator = NewHeapAllocator();
  EXPECT_THAT(allocator->Allocate(SIZE_MAX),
              batchd::testing::StatusIs(absl::StatusCode::kResourceExhausted,
                                        ::testing::_));
}

}  // namespace
}  // namespace batchd::client
