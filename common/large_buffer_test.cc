#include "common/large_buffer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <fstream>
#include <string>

#include "testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace batchd::common {
namespace {

using ::batchd::testing::StatusIs;
using ::testing::HasSubstr;

// Whether any page of [data, data + bytes) is mapped: msync fails with
// ENOMEM on a range with unmapped pages. (Counting /proc/self/maps lines
// would also count what a sanitizer's allocator maps meanwhile.)
bool AnyPageUnmapped(const uint8_t* data, size_t bytes) {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t start = reinterpret_cast<uintptr_t>(data) & ~(page - 1);
  const uintptr_t end = reinterpret_cast<uintptr_t>(data) + bytes;
  return msync(reinterpret_cast<void*>(start), end - start, MS_ASYNC) != 0 &&
         errno == ENOMEM;
}

TEST(LargeBufferTest, AlignedZeroedAndWritable) {
  for (size_t bytes : {size_t{1}, size_t{4096}, kHugePageBytes,
                       kHugePageBytes + 1, size_t{64} * 224 * 224 * 3}) {
    absl::StatusOr<LargeBuffer> buffer = AllocateLargeBuffer(bytes);
    ASSERT_OK(buffer);
    uint8_t* data = buffer->get();
    const size_t mapped = buffer->get_deleter().mapped_bytes;
    EXPECT_GE(mapped, bytes);
    if (bytes >= kHugePageBytes) {
      // Whole huge pages.
      EXPECT_EQ(reinterpret_cast<uintptr_t>(data) % kHugePageBytes, 0u);
      EXPECT_EQ(mapped % kHugePageBytes, 0u);
      EXPECT_LT(mapped - bytes, kHugePageBytes);
    } else {
      // Whole small pages: a tiny buffer does not cost a huge page.
      const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
      EXPECT_EQ(reinterpret_cast<uintptr_t>(data) % page, 0u);
      EXPECT_LT(mapped - bytes, page);
    }
    EXPECT_EQ(data[0], 0);
    EXPECT_EQ(data[bytes - 1], 0);
    for (size_t i = 0; i < bytes; i += 4096) data[i] = 0xab;
    data[bytes - 1] = 0xcd;
    EXPECT_EQ(data[0], bytes == 1 ? 0xcd : 0xab);
    EXPECT_EQ(data[bytes - 1], 0xcd);
  }
}

TEST(LargeBufferTest, ZeroBytesGivesAUsableBuffer) {
  absl::StatusOr<LargeBuffer> buffer = AllocateLargeBuffer(0);
  ASSERT_OK(buffer);
  EXPECT_NE(buffer->get(), nullptr);
}

TEST(LargeBufferTest, ReleasesItsMapping) {
  for (size_t bytes : {size_t{5'000'000}, 3 * kHugePageBytes, size_t{4096}}) {
    const uint8_t* data = nullptr;
    {
      absl::StatusOr<LargeBuffer> buffer = AllocateLargeBuffer(bytes);
      ASSERT_OK(buffer);
      (*buffer)[bytes - 1] = 1;
      data = buffer->get();
      EXPECT_FALSE(AnyPageUnmapped(data, bytes));
    }
    EXPECT_TRUE(AnyPageUnmapped(data, bytes)) << bytes << " bytes";
  }
}

TEST(LargeBufferTest, ImpossibleSizeIsResourceExhausted) {
  EXPECT_THAT(AllocateLargeBuffer(SIZE_MAX / 2),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("cannot map")));
  EXPECT_THAT(AllocateLargeBuffer(SIZE_MAX),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("cannot map")));
}

}  // namespace
}  // namespace batchd::common
