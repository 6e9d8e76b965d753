// Remote TAR_SHARDS datasets over the fake object store: the same samples,
// labels and bytes as the local loader on the same tar files; the index
// sidecar reused on restart; a changed shard a clear error.
#include "server/dataset/remote_shards.h"

#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/dataset/dataset.h"
#include "server/dataset/fake_remote_test_util.h"
#include "server/dataset/shard_source.h"
#include "server/storage/counting_object_store.h"
#include "server/storage/fake_object_store_test_util.h"
#include "server/storage/shard_cache.h"
#include "testing/status_matchers.h"
#include "testing/tar_builder.h"

namespace batchd::server {
namespace {

namespace fs = std::filesystem;
using ::batchd::testing::StatusIs;
using ::testing::HasSubstr;

constexpr int kShards = 3;
constexpr int kSamplesPerShard = 5;
constexpr char kPrefix[] = "s3://bucket/train/";

std::string MakeTempDir() {
  const char* base = getenv("TEST_TMPDIR");
  std::string pattern =
      absl::StrCat(base != nullptr ? base : "/tmp", "/remote_shards_XXXXXX");
  EXPECT_NE(mkdtemp(pattern.data()), nullptr);
  return pattern;
}

// Image-like bytes of sample `i` of shard `s`: 60 KB, so that indexing by
// headers reads far less than the shards.
std::string ImageBytes(int s, int i) {
  std::mt19937 rng(s * 1000 + i);
  std::string bytes(60000, '\0');
  for (char& c : bytes) c = static_cast<char>(rng());
  return bytes;
}

std::string ShardBytes(int s) {
  TarBuilder tar;
  for (int i = 0; i < kSamplesPerShard; ++i) {
    const std::string key = absl::StrFormat("%03d_%03d", s, i);
    tar.AddFile(key + ".jpg", ImageBytes(s, i));
    tar.AddFile(key + ".cls", absl::StrCat((s + i) % 4));
  }
  tar.Finish();
  return tar.bytes();
}

std::string ShardUrl(int s) { return absl::StrFormat("%sshard-%02d.tar", kPrefix, s); }

class RemoteShardsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    local_dir_ = MakeTempDir();
    cache_dir_ = MakeTempDir();
    store_ = std::make_shared<FakeObjectStore>();
    for (int s = 0; s < kShards; ++s) {
      const std::string bytes = ShardBytes(s);
      WriteFileForTest(absl::StrFormat("%s/shard-%02d.tar", local_dir_, s),
                       bytes);
      store_->Put(ShardUrl(s), bytes);
    }
    WriteFileForTest(local_dir_ + "/classes.txt", "cat\ndog\nfox\nowl\n");
    store_->Put(absl::StrCat(kPrefix, "classes.txt"), "cat\ndog\nfox\nowl\n");
  }
  void TearDown() override {
    fs::remove_all(local_dir_);
    fs::remove_all(cache_dir_);
  }

  std::shared_ptr<const Dataset> LoadLocal() {
    batchd::v1::DatasetConfig config;
    config.set_name("local");
    config.set_path(local_dir_);
    config.set_index_cache("-");
    absl::StatusOr<std::shared_ptr<const Dataset>> dataset =
        LoadDataset(config);
    EXPECT_TRUE(dataset.ok()) << dataset.status();
    return dataset.ok() ? *dataset : nullptr;
  }

  RemoteOptions Remote(std::shared_ptr<ShardCache> cache) {
    RemoteOptions remote = FakeRemoteOptions(store_);
    remote.cache = std::move(cache);
    remote.cache_dir = cache_dir_;
    return remote;
  }

  absl::StatusOr<std::shared_ptr<const Dataset>> LoadRemote(
      const RemoteOptions& remote) {
    batchd::v1::DatasetConfig config;
    config.set_name("remote");
    config.set_path(kPrefix);
    return LoadDataset(config, remote);
  }

  std::shared_ptr<ShardCache> OpenCache(uint64_t bytes) {
    ShardCacheOptions options;
    options.dir = cache_dir_ + "/shards";
    options.disk_bytes = bytes;
    options.chunk_bytes = 32 << 10;
    absl::StatusOr<std::unique_ptr<ShardCache>> cache =
        ShardCache::Open(options);
    EXPECT_TRUE(cache.ok()) << cache.status();
    return cache.ok() ? std::shared_ptr<ShardCache>(*std::move(cache))
                      : nullptr;
  }

  void ExpectSameAsLocal(const Dataset& remote) {
    std::shared_ptr<const Dataset> local = LoadLocal();
    ASSERT_NE(local, nullptr);
    ASSERT_EQ(remote.size(), local->size());
    EXPECT_EQ(remote.size(), kShards * kSamplesPerShard);
    EXPECT_EQ(remote.class_names(), local->class_names());
    for (uint64_t i = 0; i < local->size(); ++i) {
      const Sample& a = local->sample(i);
      const Sample& b = remote.sample(i);
      EXPECT_EQ(a.path, b.path);
      EXPECT_EQ(a.label, b.label);
      EXPECT_EQ(a.shard, b.shard);
      EXPECT_EQ(a.offset, b.offset);
      EXPECT_EQ(a.size, b.size);
      absl::StatusOr<FileBytes> want = local->ReadSample(i);
      absl::StatusOr<FileBytes> got = remote.ReadSample(i);
      ASSERT_OK(want.status());
      ASSERT_OK(got.status());
      EXPECT_EQ(got->text(), want->text()) << "sample " << i;
    }
    ASSERT_NE(remote.shards(), nullptr);
    EXPECT_EQ(remote.shards()->name(1), ShardUrl(1));
  }

  std::string local_dir_;
  std::string cache_dir_;
  std::shared_ptr<FakeObjectStore> store_;
};

TEST_F(RemoteShardsTest, SameSamplesAsLocalByRangeReads) {
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<const Dataset> dataset,
                       LoadRemote(Remote(nullptr)));
  // Indexing read headers, not the shards: one block per sample (a "cls"
  // header's block also holds its data and the next image's header), and
  // classes.txt.
  uint64_t total = 0;
  for (int s = 0; s < kShards; ++s) total += ShardBytes(s).size();
  EXPECT_LT(store_->bytes_read(), total / 4);
  EXPECT_LE(store_->reads(), kShards * (kSamplesPerShard + 2) + 1);
  EXPECT_EQ(dataset->index_stats().shards, kShards);
  EXPECT_TRUE(dataset->index_stats().cache_written);
  ExpectSameAsLocal(*dataset);
}

TEST_F(RemoteShardsTest, CountersSeeEveryStoreRequest) {
  RemoteOptions remote = Remote(OpenCache(16 << 20));
  remote.counters = std::make_shared<ObjectStoreCounters>();
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<const Dataset> dataset,
                       LoadRemote(remote));
  EXPECT_TRUE(dataset->remote());
  for (uint64_t i = 0; i < dataset->size(); ++i) {
    ASSERT_OK(dataset->ReadSample(i).status());
  }
  EXPECT_EQ(remote.counters->requests(), store_->reads());
  EXPECT_EQ(remote.counters->bytes(), store_->bytes_read());
  // Shard 2 changes after it was downloaded: the cached copy is the
  // version the index describes, and reads go on from it.
  store_->Put(ShardUrl(2), ShardBytes(2));
  ASSERT_OK(dataset->ReadSample(dataset->size() - 1).status());
  EXPECT_EQ(remote.counters->failures(), 0);
}

TEST_F(RemoteShardsTest, SameSamplesAsLocalThroughTheShardCache) {
  std::shared_ptr<ShardCache> cache = OpenCache(16 << 20);
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<const Dataset> dataset,
                       LoadRemote(Remote(cache)));
  ExpectSameAsLocal(*dataset);
  EXPECT_EQ(cache->stats().downloads, kShards);
  EXPECT_EQ(cache->stats().hits + cache->stats().misses,
            kShards * kSamplesPerShard);
}

TEST_F(RemoteShardsTest, RestartReusesTheIndexSidecarWithoutHeaderReads) {
  {
    ASSERT_OK_AND_ASSIGN(std::shared_ptr<const Dataset> first,
                         LoadRemote(Remote(nullptr)));
    EXPECT_EQ(first->index_stats().shards_from_cache, 0);
  }
  uint64_t reads_before = 0;
  for (int s = 0; s < kShards; ++s) reads_before += store_->reads_of(ShardUrl(s));
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<const Dataset> second,
                       LoadRemote(Remote(nullptr)));
  uint64_t reads_after = 0;
  for (int s = 0; s < kShards; ++s) reads_after += store_->reads_of(ShardUrl(s));
  EXPECT_EQ(reads_after, reads_before);
  EXPECT_EQ(second->index_stats().shards_from_cache, kShards);
  EXPECT_FALSE(second->index_stats().cache_written);
  ExpectSameAsLocal(*second);

  // A changed shard (new ETag) is indexed again, alone.
  store_->Put(ShardUrl(2), ShardBytes(2));
  const uint64_t reads_of_1 = store_->reads_of(ShardUrl(1));
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<const Dataset> third,
                       LoadRemote(Remote(nullptr)));
  EXPECT_EQ(third->index_stats().shards_from_cache, kShards - 1);
  EXPECT_GT(store_->reads_of(ShardUrl(2)), 0);
  EXPECT_EQ(store_->reads_of(ShardUrl(1)), reads_of_1);
}

TEST_F(RemoteShardsTest, ChangedShardIsFailedPreconditionNamingTheUrl) {
  for (bool with_cache : {false, true}) {
    SCOPED_TRACE(with_cache ? "through the cache" : "range reads");
    std::shared_ptr<ShardCache> cache =
        with_cache ? OpenCache(16 << 20) : nullptr;
    ASSERT_OK_AND_ASSIGN(std::shared_ptr<const Dataset> dataset,
                         LoadRemote(Remote(cache)));
    // Shard 1 is replaced after indexing, before any sample of it is read.
    store_->Put(ShardUrl(1), ShardBytes(1));
    const uint64_t in_shard_1 = kSamplesPerShard + 2;
    ASSERT_EQ(dataset->sample(in_shard_1).shard, 1);
    const int reads_before = store_->reads_of(ShardUrl(1));
    int reads_after_first = 0;
    for (int attempt = 0; attempt < 2; ++attempt) {
      EXPECT_THAT(dataset->ReadSample(in_shard_1),
                  StatusIs(absl::StatusCode::kFailedPrecondition,
                           HasSubstr(ShardUrl(1))));
      if (attempt == 0) reads_after_first = store_->reads_of(ShardUrl(1));
    }
    // The first read found the change and marked the shard: the second
    // asked the store nothing (nor does a prefetch).
    EXPECT_GT(reads_after_first, reads_before);
    EXPECT_EQ(store_->reads_of(ShardUrl(1)), reads_after_first);
    dataset->shards()->Prefetch(1);
    // Other shards still read.
    ASSERT_OK(dataset->ReadSample(0).status());
    const auto* source = dynamic_cast<const RemoteShards*>(dataset->shards());
    ASSERT_NE(source, nullptr);
    EXPECT_EQ(source->counts().changed_shard_errors, 2);
    if (cache != nullptr) EXPECT_FALSE(cache->Contains(source->object(1)));
    fs::remove_all(cache_dir_);
    fs::create_directories(cache_dir_);
  }
}

TEST_F(RemoteShardsTest, PrefetchDownloadsTheShardsOfUpcomingSamples) {
  std::shared_ptr<ShardCache> cache = OpenCache(16 << 20);
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<const Dataset> dataset,
                       LoadRemote(Remote(cache)));
  const auto* source = dynamic_cast<const RemoteShards*>(dataset->shards());
  ASSERT_NE(source, nullptr);
  const std::vector<uint64_t> upcoming = {kSamplesPerShard, 2 * kSamplesPerShard + 1,
                                          kSamplesPerShard + 3, 9999};
  dataset->Prefetch(upcoming);
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (!(cache->Contains(source->object(1)) &&
           cache->Contains(source->object(2))) &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_TRUE(cache->Contains(source->object(1)));
  EXPECT_TRUE(cache->Contains(source->object(2)));
  EXPECT_FALSE(cache->Contains(source->object(0)));
  const uint64_t reads = store_->reads();
  ASSERT_OK(dataset->ReadSample(kSamplesPerShard).status());
  EXPECT_EQ(store_->reads(), reads);
  EXPECT_EQ(cache->stats().prefetches, 2);
}

TEST_F(RemoteShardsTest, LocalDatasetPrefetchIsANoOp) {
  std::shared_ptr<const Dataset> local = LoadLocal();
  ASSERT_NE(local, nullptr);
  local->Prefetch(std::vector<uint64_t>{0, 1, 2});
  EXPECT_EQ(local->size(), kShards * kSamplesPerShard);
}

TEST_F(RemoteShardsTest, RemotePathsAreTarShardsOnly) {
  batchd::v1::DatasetConfig config;
  config.set_name("remote");
  config.set_path(kPrefix);
  config.set_format(batchd::v1::DatasetConfig::IMAGE_FOLDER);
  EXPECT_THAT(LoadDataset(config, Remote(nullptr)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("TAR_SHARDS only")));
}

TEST(ObjectReadAtTest, ReadsBlocksAndClampsAtTheEnd) {
  FakeObjectStore store;
  std::string bytes(10000, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 7);
  store.Put("https://h/x.tar", bytes);
  ASSERT_OK_AND_ASSIGN(ObjectInfo info, store.Stat("https://h/x.tar"));
  ObjectReadAt reader(store, info, /*block_bytes=*/4096);
  char out[600];
  ASSERT_OK_AND_ASSIGN(size_t got, reader.Read(100, out, 512));
  EXPECT_EQ(got, 512);
  EXPECT_EQ(std::string(out, 512), bytes.substr(100, 512));
  ASSERT_OK_AND_ASSIGN(got, reader.Read(612, out, 512));  // same block
  EXPECT_EQ(std::string(out, 512), bytes.substr(612, 512));
  EXPECT_EQ(reader.requests(), 1);
  ASSERT_OK_AND_ASSIGN(got, reader.Read(9800, out, 512));
  EXPECT_EQ(got, 200);
  EXPECT_EQ(std::string(out, 200), bytes.substr(9800));
  ASSERT_OK_AND_ASSIGN(got, reader.Read(10000, out, 512));
  EXPECT_EQ(got, 0);
}

}  // namespace
}  // namespace batchd::server
