#include "common/large_buffer.h"

#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <string>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace batchd::common {
namespace {

using ::batchd::testing::StatusIs;
using ::testing::HasSubstr;

int CountMappings() {
  std::ifstream maps("/proc/self/maps");
  int lines = 0;
  for (std::string line; std::getline(maps, line);) ++lines;
  return lines;
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
  { ASSERT_OK(AllocateLargeBuffer(3 * kHugePageBytes)); }
  const int before = CountMappings();
  for (int i = 0; i < 50; ++i) {
    absl::StatusOr<LargeBuffer> buffer = AllocateLargeBuffer(5'000'000);
    ASSERT_OK(buffer);
    (*buffer)[4'999'999] = 1;
  }
  EXPECT_EQ(CountMappings(), before);
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
