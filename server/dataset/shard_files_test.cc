#include "server/dataset/shard_files.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace batchd::server {
namespace {

std::string WriteTemp(const std::string& name, const std::string& bytes) {
  const char* dir = getenv("TEST_TMPDIR");
  const std::string path = absl::StrCat(dir != nullptr ? dir : "/tmp",
                                        "/shard_files_test_", getpid(), "_",
                                        name);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  return path;
}

std::string Content(int shard) {
  std::string s;
  for (int i = 0; i < 4096; ++i) s.push_back(static_cast<char>(shard * 31 + i));
  return s;
}

TEST(ShardFilesTest, ReadsRangesAndBoundsOpenFiles) {
  std::vector<std::string> paths;
  for (int i = 0; i < 5; ++i) {
    paths.push_back(WriteTemp(absl::StrCat("s", i, ".tar"), Content(i)));
  }
  ShardFiles files(paths, /*max_open=*/2);
  for (int round = 0; round < 3; ++round) {
    for (uint32_t shard = 0; shard < 5; ++shard) {
      absl::StatusOr<FileBytes> bytes = files.Read(shard, 100 + shard, 50, "m");
      ASSERT_TRUE(bytes.ok()) << bytes.status();
      EXPECT_EQ(bytes->text(), Content(shard).substr(100 + shard, 50));
      EXPECT_LE(files.open_now(), 2u);
    }
  }
  // Reading the same shard again does not open it again.
  const uint64_t opens = files.opens();
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(files.Read(4, 0, 10, "m").ok());
  EXPECT_EQ(files.opens(), opens);
  // A zero-byte member.
  absl::StatusOr<FileBytes> empty = files.Read(0, 4096, 0, "empty");
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->size(), 0u);
  for (const std::string& path : paths) unlink(path.c_str());
}

TEST(ShardFilesTest, ErrorsNameTheShardAndMember) {
  const std::string path = WriteTemp("short.tar", "0123456789");
  ShardFiles files({path, "/nonexistent/x.tar"}, 4);
  absl::StatusOr<FileBytes> past = files.Read(0, 5, 100, "k.jpg");
  EXPECT_EQ(past.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(past.status().message()),
              ::testing::AllOf(::testing::HasSubstr("short.tar"),
                               ::testing::HasSubstr("k.jpg"),
                               ::testing::HasSubstr("changed since")));
  absl::StatusOr<FileBytes> missing = files.Read(1, 0, 1, "k.jpg");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()),
              ::testing::HasSubstr("/nonexistent/x.tar"));
  EXPECT_EQ(files.Read(2, 0, 1, "k").status().code(),
            absl::StatusCode::kInvalidArgument);
  unlink(path.c_str());
}

TEST(ShardFilesTest, ConcurrentReadsWithEvictions) {
  std::vector<std::string> paths;
  for (int i = 0; i < 8; ++i) {
    paths.push_back(WriteTemp(absl::StrCat("c", i, ".tar"), Content(i)));
  }
  ShardFiles files(paths, /*max_open=*/3);
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 500; ++i) {
        const uint32_t shard = static_cast<uint32_t>((i * 7 + t) % 8);
        absl::StatusOr<FileBytes> bytes = files.Read(shard, i % 4000, 64, "m");
        if (!bytes.ok() ||
            bytes->text() != Content(shard).substr(i % 4000, 64)) {
          ++wrong;
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_LE(files.open_now(), 3u);
  for (const std::string& path : paths) unlink(path.c_str());
}

}  // namespace
}  // namespace batchd::server
