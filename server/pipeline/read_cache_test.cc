#include "server/pipeline/read_cache.h"

#include <atomic>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "testing/daemon_process.h"

namespace batchd::server {
namespace {

// Files of `size` bytes each, whose bytes say which file they are.
std::vector<std::string> Files(int count, size_t size) {
  const std::string dir = testing::MakeTempDir("read-cache");
  std::vector<std::string> paths;
  for (int i = 0; i < count; ++i) {
    paths.push_back(absl::StrCat(dir, "/", i));
    std::ofstream(paths.back(), std::ios::binary)
        << std::string(size, static_cast<char>('a' + i % 26));
  }
  return paths;
}

TEST(ReadCacheTest, SecondReadIsAHitWithTheSameBytes) {
  const std::vector<std::string> files = Files(1, 100);
  ReadCache cache(1000);
  int reads = 0;
  auto read = [&] {
    ++reads;
    return ReadFileBytes(files[0]);
  };
  absl::StatusOr<FileBytes> first = cache.Read({"d", 0}, read);
  absl::StatusOr<FileBytes> second = cache.Read({"d", 0}, read);
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(reads, 1);
  EXPECT_EQ(first->text(), second->text());
  EXPECT_EQ(cache.counts().hits, 1u);
  EXPECT_EQ(cache.counts().misses, 1u);
  EXPECT_EQ(cache.counts().bytes, 100u);
}

// A dataset 4x the cache, read twice in order: the bound holds after every
// read, and LRU keeps nothing useful for a sequential scan.
TEST(ReadCacheTest, BoundHoldsForADatasetFourTimesTheCache) {
  const std::vector<std::string> files = Files(40, 1000);
  ReadCache cache(10'000);
  for (int pass = 0; pass < 2; ++pass) {
    for (int i = 0; i < 40; ++i) {
      absl::StatusOr<FileBytes> bytes =
          cache.Read({"d", uint64_t(i)}, [&] { return ReadFileBytes(files[i]); });
      ASSERT_TRUE(bytes.ok());
      EXPECT_EQ(bytes->text()[0], 'a' + i % 26);
      EXPECT_LE(cache.counts().bytes, 10'000u);
    }
  }
  EXPECT_EQ(cache.counts().misses, 80u);
  EXPECT_EQ(cache.counts().evictions, 70u);
}

TEST(ReadCacheTest, ConcurrentReadsOfOneSampleReadItOnce) {
  const std::vector<std::string> files = Files(1, 100);
  ReadCache cache(1000);
  std::atomic<int> reads{0};
  absl::Notification release;
  auto slow_read = [&] {
    ++reads;
    release.WaitForNotification();  // the others arrive meanwhile
    return ReadFileBytes(files[0]);
  };
  std::vector<std::thread> threads;
  std::vector<std::string> got(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      absl::StatusOr<FileBytes> bytes = cache.Read({"d", 7}, slow_read);
      if (bytes.ok()) got[t] = std::string(bytes->text());
    });
  }
  while (cache.counts().coalesced < 3) absl::SleepFor(absl::Milliseconds(1));
  release.Notify();
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(reads.load(), 1);
  for (const std::string& bytes : got) EXPECT_EQ(bytes, std::string(100, 'a'));
}

// Errors reach every waiter and are not kept; too-large samples are read
// and not kept.
TEST(ReadCacheTest, ErrorsAndOversizedSamplesAreNotKept) {
  const std::vector<std::string> files = Files(1, 2000);
  ReadCache cache(1000);
  int reads = 0;
  auto missing = [&]() -> absl::StatusOr<FileBytes> {
    ++reads;
    return absl::NotFoundError("gone");
  };
  EXPECT_EQ(cache.Read({"d", 1}, missing).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(cache.Read({"d", 1}, missing).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(reads, 2);
  absl::StatusOr<FileBytes> big =
      cache.Read({"d", 2}, [&] { return ReadFileBytes(files[0]); });
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big->size(), 2000u);
  EXPECT_EQ(cache.counts().bytes, 0u);
}

}  // namespace
}  // namespace batchd::server
