// Shared by the shard cache's tests (shard_cache_test.cc, the cache's
// files, bound and RAM tier; shard_cache_forecast_test.cc, its choices by
// the plans' forecast): shards of random bytes in a FakeObjectStore, a
// temporary cache directory, and a fixture over both.
#ifndef BATCHD_SERVER_STORAGE_SHARD_CACHE_TEST_UTIL_H_
#define BATCHD_SERVER_STORAGE_SHARD_CACHE_TEST_UTIL_H_

#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "server/storage/fake_object_store_test_util.h"
#include "server/storage/shard_cache.h"
#include "testing/status_matchers.h"

namespace batchd::server::shard_cache_testing {

namespace fs = std::filesystem;

inline constexpr uint64_t kShardBytes = 64 << 10;

inline std::string MakeTempDir() {
  const char* base = getenv("TEST_TMPDIR");
  std::string pattern =
      absl::StrCat(base != nullptr ? base : "/tmp", "/shard_cache_XXXXXX");
  EXPECT_NE(mkdtemp(pattern.data()), nullptr);
  return pattern;
}

inline std::string RandomBytes(uint64_t size, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string bytes(size, '\0');
  for (char& c : bytes) c = static_cast<char>(rng());
  return bytes;
}

inline std::string Url(int i) {
  return absl::StrFormat("s3://bucket/shard-%03d.tar", i);
}

// Bytes of every file in `dir` (shards, temporary files) now. Counted by
// inode: a listing that races a rename may show one file under both names.
inline uint64_t BytesOnDisk(const std::string& dir) {
  std::set<ino_t> seen;
  uint64_t total = 0;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    struct stat st;
    if (::stat(it->path().c_str(), &st) == 0 && seen.insert(st.st_ino).second) {
      total += st.st_size;
    }
  }
  return total;
}

inline size_t FilesIn(const std::string& dir) {
  size_t count = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    (void)entry;
    ++count;
  }
  return count;
}

class ShardCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir();
    store_ = std::make_shared<FakeObjectStore>();
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Puts `count` shards of kShardBytes; returns their infos.
  std::vector<ObjectInfo> PutShards(int count) {
    std::vector<ObjectInfo> infos;
    for (int i = 0; i < count; ++i) {
      store_->Put(Url(i), RandomBytes(kShardBytes, i));
      infos.push_back(*store_->Stat(Url(i)));
    }
    return infos;
  }

  ShardCacheOptions Options(uint64_t disk_bytes) {
    ShardCacheOptions options;
    options.dir = dir_;
    options.disk_bytes = disk_bytes;
    options.chunk_bytes = 16 << 10;
    return options;
  }

  // Reads [offset, offset + size) through `cache` and checks the bytes.
  void ExpectRead(ShardCache& cache, const ObjectInfo& info, int seed,
                  uint64_t offset, uint64_t size) {
    std::string got(size, '\0');
    ASSERT_OK(cache.Read(store_, info, offset, size,
                         reinterpret_cast<uint8_t*>(got.data())));
    EXPECT_EQ(got, RandomBytes(kShardBytes, seed).substr(offset, size));
  }

  std::string dir_;
  std::shared_ptr<FakeObjectStore> store_;
};

}  // namespace batchd::server::shard_cache_testing

#endif  // BATCHD_SERVER_STORAGE_SHARD_CACHE_TEST_UTIL_H_
