#include "server/dataset/index_cache.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace batchd::server {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/index_cache_test_" +
         std::to_string(getpid()) + "_" + name;
}

std::vector<CachedShard> Example() {
  CachedShard a;
  a.path = "/data/a.tar";
  a.size = 123456;
  a.validator = LocalValidator(1700000000123456789);
  a.image_extensions = "webp;jpg";
  a.index.samples = {{"x/000001.jpg", 512, 1000, 3, {{"txt", 1600, 20}}},
                     {"000002.png", 2048, 7, 0},
                     {"000003", 0, 0, 5, {}, /*has_image=*/false}};
  a.index.unlabeled = {{"000004.jpg", 4096, 900, kNoLabel,
                        {{"json", 5120, 30}, {"txt", 5632, 12}}}};
  a.index.skipped_no_class = 2;
  a.index.skipped_example = "key 'y': no cls member";
  CachedShard b;
  b.path = "/data/b.tar";
  b.index.damage = "'b.tar': bad header checksum at offset 0";
  return {a, b};
}

TEST(IndexCacheTest, RoundTrip) {
  const std::string path = TempPath("roundtrip");
  ASSERT_TRUE(WriteIndexCache(path, Example()).ok());
  absl::StatusOr<std::vector<CachedShard>> read = ReadIndexCache(path);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->size(), 2u);
  const CachedShard& a = (*read)[0];
  EXPECT_EQ(a.path, "/data/a.tar");
  EXPECT_EQ(a.size, 123456u);
  EXPECT_EQ(a.validator, "mtime:1700000000123456789");
  EXPECT_NE(LocalValidator(1), RemoteValidator("1"));
  EXPECT_EQ(a.image_extensions, "webp;jpg");
  ASSERT_EQ(a.index.samples.size(), 3u);
  EXPECT_TRUE(a.index.samples[0].has_image);
  EXPECT_EQ(a.index.samples[2].member, "000003");
  EXPECT_FALSE(a.index.samples[2].has_image);
  EXPECT_EQ(a.index.samples[2].label, 5);
  EXPECT_EQ(a.index.samples[0].member, "x/000001.jpg");
  EXPECT_EQ(a.index.samples[0].offset, 512u);
  EXPECT_EQ(a.index.samples[0].size, 1000u);
  EXPECT_EQ(a.index.samples[0].label, 3);
  ASSERT_EQ(a.index.samples[0].others.size(), 1u);
  EXPECT_EQ(a.index.samples[0].others[0].extension, "txt");
  EXPECT_EQ(a.index.samples[0].others[0].offset, 1600u);
  EXPECT_EQ(a.index.samples[0].others[0].size, 20u);
  ASSERT_EQ(a.index.unlabeled.size(), 1u);
  EXPECT_EQ(a.index.unlabeled[0].label, kNoLabel);
  ASSERT_EQ(a.index.unlabeled[0].others.size(), 2u);
  EXPECT_EQ(a.index.unlabeled[0].others[1].extension, "txt");
  EXPECT_EQ(a.index.skipped_no_class, 2u);
  EXPECT_EQ(a.index.skipped_example, "key 'y': no cls member");
  EXPECT_EQ((*read)[1].index.damage, "'b.tar': bad header checksum at offset 0");
  EXPECT_TRUE((*read)[1].index.samples.empty());
  unlink(path.c_str());
}

TEST(IndexCacheTest, MissingIsNotFound) {
  EXPECT_EQ(ReadIndexCache(TempPath("missing")).status().code(),
            absl::StatusCode::kNotFound);
}

// Every truncation and every single-byte change of a cache is rejected as
// a whole (DATA_LOSS), never half-used and never a crash.
TEST(IndexCacheTest, DamagedCachesAreRejected) {
  const std::string path = TempPath("damaged");
  ASSERT_TRUE(WriteIndexCache(path, Example()).ok());
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string good = buffer.str();
  auto write = [&](const std::string& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << bytes;
  };
  for (size_t cut = 0; cut < good.size(); ++cut) {
    write(good.substr(0, cut));
    EXPECT_EQ(ReadIndexCache(path).status().code(),
              absl::StatusCode::kDataLoss)
        << "cut at " << cut;
  }
  for (size_t i = 0; i < good.size(); ++i) {
    std::string bad = good;
    bad[i] ^= 0x5a;
    write(bad);
    EXPECT_EQ(ReadIndexCache(path).status().code(),
              absl::StatusCode::kDataLoss)
        << "byte " << i;
  }
  unlink(path.c_str());
}

TEST(IndexCacheTest, UnwritableDirectoryIsAnError) {
  const absl::Status status =
      WriteIndexCache("/nonexistent-dir/cache", Example());
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(status.message()),
              ::testing::HasSubstr("/nonexistent-dir/cache"));
}

}  // namespace
}  // namespace batchd::server
