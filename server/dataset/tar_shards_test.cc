// Dataset::LoadTarShards through LoadDataset: shard lists, format
// inference, the sidecar index cache, classes.txt, damaged shards, reads.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/dataset/dataset.h"
#include "server/dataset/shard_files.h"
#include "testing/status_matchers.h"
#include "testing/tar_builder.h"

namespace batchd::server {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string MakeTempDir() {
  const char* base = getenv("TEST_TMPDIR");
  std::string pattern =
      absl::StrCat(base != nullptr ? base : "/tmp", "/tar_shards_XXXXXX");
  char* dir = mkdtemp(pattern.data());
  EXPECT_NE(dir, nullptr);
  return pattern;
}

// The image bytes of sample `i` of shard `s`.
std::string ImageBytes(int s, int i) { return absl::StrFormat("img-%d-%d", s, i); }

// A shard with `count` samples "<s>_<i>.jpg" + ".cls" (label (s + i) % 3).
std::string ShardBytes(int s, int count) {
  TarBuilder tar;
  for (int i = 0; i < count; ++i) {
    const std::string key = absl::StrFormat("%03d_%03d", s, i);
    tar.AddFile(key + ".jpg", ImageBytes(s, i));
    tar.AddFile(key + ".cls", absl::StrCat((s + i) % 3));
  }
  tar.Finish();
  return tar.bytes();
}

absl::StatusOr<std::shared_ptr<const Dataset>> Load(
    const std::string& path, batchd::v1::DatasetConfig config = {}) {
  config.set_name("d");
  config.set_path(path);
  return LoadDataset(config);
}

std::string Bytes(const Dataset& dataset, uint64_t index) {
  absl::StatusOr<FileBytes> bytes = dataset.ReadSample(index);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return bytes.ok() ? std::string(bytes->text()) : "";
}

class TarShardsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir();
    for (int s = 0; s < 3; ++s) {
      WriteFileForTest(Shard(s), ShardBytes(s, 4));
    }
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Shard(int s) const {
    return absl::StrFormat("%s/shard-%02d.tar", dir_, s);
  }
  std::string dir_;
};

TEST_F(TarShardsTest, DirectoryOfShardsInShardThenMemberOrder) {
  absl::StatusOr<std::shared_ptr<const Dataset>> dataset = Load(dir_);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  const Dataset& d = **dataset;
  ASSERT_EQ(d.size(), 12u);
  for (int s = 0; s < 3; ++s) {
    for (int i = 0; i < 4; ++i) {
      const uint64_t index = s * 4 + i;
      EXPECT_EQ(d.sample(index).path, absl::StrFormat("%03d_%03d.jpg", s, i));
      EXPECT_EQ(d.sample(index).label, (s + i) % 3);
      EXPECT_EQ(d.sample(index).shard, static_cast<uint32_t>(s));
      EXPECT_EQ(Bytes(d, index), ImageBytes(s, i));
    }
  }
  EXPECT_THAT(d.class_names(), ElementsAre("0", "1", "2"));
  EXPECT_EQ(d.index_stats().shards, 3u);
  EXPECT_EQ(d.index_stats().damaged_shards, 0u);
  EXPECT_EQ(d.index_stats().skipped_samples, 0u);
}

TEST_F(TarShardsTest, ClassesTxtNamesTheClassesAndBoundsTheLabels) {
  WriteFileForTest(dir_ + "/classes.txt", "cat\ndog\n");
  absl::StatusOr<std::shared_ptr<const Dataset>> dataset = Load(dir_);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_THAT((*dataset)->class_names(), ElementsAre("cat", "dog"));
  // Label 2 has no name: those 4 samples are skipped and counted.
  EXPECT_EQ((*dataset)->size(), 8u);
  EXPECT_EQ((*dataset)->index_stats().skipped_samples, 4u);
  for (uint64_t i = 0; i < (*dataset)->size(); ++i) {
    EXPECT_LT((*dataset)->sample(i).label, 2);
  }
  WriteFileForTest(dir_ + "/classes.txt", "cat\n\ndog\n");
  EXPECT_THAT(Load(dir_).status().message(),
              HasSubstr("classes.txt:2: empty class name"));
}

TEST_F(TarShardsTest, SidecarCacheIsReusedAndInvalidatedPerShard) {
  absl::StatusOr<std::shared_ptr<const Dataset>> cold = Load(dir_);
  ASSERT_TRUE(cold.ok()) << cold.status();
  EXPECT_EQ((*cold)->index_stats().shards_from_cache, 0u);
  EXPECT_TRUE((*cold)->index_stats().cache_written);

  absl::StatusOr<std::shared_ptr<const Dataset>> warm = Load(dir_);
  ASSERT_TRUE(warm.ok()) << warm.status();
  EXPECT_EQ((*warm)->index_stats().shards_from_cache, 3u);
  EXPECT_FALSE((*warm)->index_stats().cache_written);
  ASSERT_EQ((*warm)->size(), 12u);
  for (uint64_t i = 0; i < 12; ++i) {
    EXPECT_EQ((*warm)->sample(i).offset, (*cold)->sample(i).offset);
    EXPECT_EQ(Bytes(**warm, i), Bytes(**cold, i));
  }

  // Shard 1 changes: 6 samples now. Only it is re-indexed.
  WriteFileForTest(Shard(1), ShardBytes(1, 6));
  struct timespec times[2] = {{0, UTIME_NOW}, {1, 0}};
  ASSERT_EQ(utimensat(AT_FDCWD, Shard(1).c_str(), times, 0), 0);
  absl::StatusOr<std::shared_ptr<const Dataset>> changed = Load(dir_);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_EQ((*changed)->index_stats().shards_from_cache, 2u);
  EXPECT_TRUE((*changed)->index_stats().cache_written);
  ASSERT_EQ((*changed)->size(), 14u);
  EXPECT_EQ(Bytes(**changed, 4 + 5), ImageBytes(1, 5));

  // A damaged cache is ignored and rewritten.
  for (const fs::directory_entry& entry : fs::directory_iterator(dir_)) {
    if (entry.path().filename().string().rfind(".batchd-index-", 0) == 0) {
      WriteFileForTest(entry.path().string(), "BATCHDIX garbage");
    }
  }
  absl::StatusOr<std::shared_ptr<const Dataset>> rebuilt = Load(dir_);
  ASSERT_TRUE(rebuilt.ok()) << rebuilt.status();
  EXPECT_EQ((*rebuilt)->index_stats().shards_from_cache, 0u);
  EXPECT_EQ((*rebuilt)->size(), 14u);
  EXPECT_EQ(Load(dir_).value()->index_stats().shards_from_cache, 3u);
}

TEST_F(TarShardsTest, ImageExtensionsPickTheMemberAndKeyTheCache) {
  // A fourth shard: webp and jpg for one key, only webp for another, and a
  // key with a class and no image at all.
  TarBuilder tar;
  tar.AddFile("k1.jpg", "k1-jpg");
  tar.AddFile("k1.webp", "k1-webp");
  tar.AddFile("k1.cls", "0");
  tar.AddFile("k2.webp", "k2-webp");
  tar.AddFile("k2.cls", "1");
  tar.AddFile("k3.txt", "a caption, no image");
  tar.AddFile("k3.cls", "2");
  tar.Finish();
  WriteFileForTest(Shard(3), tar.bytes());
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<const Dataset> d, Load(dir_));
  ASSERT_EQ(d->size(), 15u);
  EXPECT_EQ(Bytes(*d, 12), "k1-jpg");
  EXPECT_EQ(Bytes(*d, 13), "k2-webp");
  EXPECT_FALSE(d->sample(14).has_image);
  EXPECT_EQ(d->sample(14).label, 2);
  EXPECT_EQ(d->index_stats().no_image_samples, 1u);
  absl::StatusOr<FileBytes> none = d->ReadSample(14);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(none.status().message(), HasSubstr("no image member"));

  // Another list: the cached index is not reused; webp wins now.
  batchd::v1::DatasetConfig webp_first;
  webp_first.set_image_extensions("webp;jpg");
  ASSERT_OK_AND_ASSIGN(d, Load(dir_, webp_first));
  EXPECT_EQ(d->index_stats().shards_from_cache, 0u);
  EXPECT_EQ(Bytes(*d, 12), "k1-webp");
  ASSERT_OK_AND_ASSIGN(d, Load(dir_, webp_first));
  EXPECT_EQ(d->index_stats().shards_from_cache, 4u);
  EXPECT_EQ(Bytes(*d, 12), "k1-webp");

  batchd::v1::DatasetConfig bad;
  bad.set_image_extensions("jpg;;png");
  EXPECT_THAT(Load(dir_, bad).status().message(),
              HasSubstr("an empty extension"));
}

TEST_F(TarShardsTest, CacheCanBeDisabledOrUnwritable) {
  batchd::v1::DatasetConfig off;
  off.set_index_cache("-");
  absl::StatusOr<std::shared_ptr<const Dataset>> a = Load(dir_, off);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_FALSE((*a)->index_stats().cache_written);
  for (const fs::directory_entry& entry : fs::directory_iterator(dir_)) {
    EXPECT_NE(entry.path().filename().string().rfind(".batchd-index", 0), 0u);
  }
  batchd::v1::DatasetConfig unwritable;
  unwritable.set_index_cache("/nonexistent-dir/index");
  absl::StatusOr<std::shared_ptr<const Dataset>> b = Load(dir_, unwritable);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*b)->size(), 12u);
  EXPECT_FALSE((*b)->index_stats().cache_written);
}

TEST_F(TarShardsTest, ShardListGlobExplicitListAndSingleFile) {
  WriteFileForTest(dir_ + "/shards.txt",
                   "# two shards, in this order\nshard-02.tar\n\n" + Shard(0) +
                       "\n");
  absl::StatusOr<std::shared_ptr<const Dataset>> listed =
      Load(dir_ + "/shards.txt");
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ((*listed)->size(), 8u);
  EXPECT_EQ(Bytes(**listed, 0), ImageBytes(2, 0));
  EXPECT_EQ(Bytes(**listed, 4), ImageBytes(0, 0));

  absl::StatusOr<std::shared_ptr<const Dataset>> globbed =
      Load(dir_ + "/shard-0[12].tar");
  ASSERT_TRUE(globbed.ok()) << globbed.status();
  ASSERT_EQ((*globbed)->size(), 8u);
  EXPECT_EQ(Bytes(**globbed, 0), ImageBytes(1, 0));

  batchd::v1::DatasetConfig explicit_list;
  explicit_list.add_shards(Shard(2));
  explicit_list.add_shards(Shard(1));
  absl::StatusOr<std::shared_ptr<const Dataset>> given = Load("", explicit_list);
  ASSERT_TRUE(given.ok()) << given.status();
  EXPECT_EQ(Bytes(**given, 0), ImageBytes(2, 0));

  absl::StatusOr<std::shared_ptr<const Dataset>> single = Load(Shard(1));
  ASSERT_TRUE(single.ok()) << single.status();
  EXPECT_EQ((*single)->size(), 4u);
}

TEST_F(TarShardsTest, DamagedShardsAreIndexedUpToTheDamage) {
  const std::string whole = ShardBytes(1, 4);
  // Cut in the third sample's image data: two samples survive.
  WriteFileForTest(Shard(1), whole.substr(0, 512 * 9 + 3));
  std::string bad_checksum = ShardBytes(2, 4);
  bad_checksum[512 * 4 + 3] ^= 1;  // second sample's image header
  WriteFileForTest(Shard(2), bad_checksum);
  absl::StatusOr<std::shared_ptr<const Dataset>> dataset = Load(dir_);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_EQ((*dataset)->size(), 4u + 2u + 1u);
  EXPECT_EQ((*dataset)->index_stats().damaged_shards, 2u);
  EXPECT_EQ(Bytes(**dataset, 5), ImageBytes(1, 1));
  EXPECT_EQ(Bytes(**dataset, 6), ImageBytes(2, 0));
  // The cache keeps the damage: the reload reports it again.
  EXPECT_EQ(Load(dir_).value()->index_stats().damaged_shards, 2u);
}

TEST_F(TarShardsTest, ReadErrorsAfterIndexing) {
  absl::StatusOr<std::shared_ptr<const Dataset>> dataset = Load(dir_);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  // The shard shrinks after indexing: its reads fail with a message, the
  // other shards still read.
  WriteFileForTest(Shard(2), "short");
  absl::StatusOr<FileBytes> gone = (*dataset)->ReadSample(8);
  EXPECT_FALSE(gone.ok());
  EXPECT_THAT(std::string(gone.status().message()), HasSubstr("shard-02.tar"));
  EXPECT_EQ(Bytes(**dataset, 0), ImageBytes(0, 0));
}

TEST_F(TarShardsTest, Errors) {
  EXPECT_EQ(Load(dir_ + "/nothing-*.tar").status().code(),
            absl::StatusCode::kNotFound);
  batchd::v1::DatasetConfig missing;
  missing.add_shards(dir_ + "/missing.tar");
  EXPECT_EQ(Load("", missing).status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Load("", missing).status().message(), HasSubstr("missing.tar"));

  TarBuilder no_samples;
  no_samples.AddFile("a.txt", "no image");
  no_samples.Finish();
  WriteFileForTest(dir_ + "/empty.tar", no_samples.bytes());
  absl::StatusOr<std::shared_ptr<const Dataset>> empty =
      Load(dir_ + "/empty.tar");
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(empty.status().message(), HasSubstr("hold no samples"));

  batchd::v1::DatasetConfig wrong;
  wrong.set_format(batchd::v1::DatasetConfig::IMAGE_FOLDER);
  wrong.add_shards(Shard(0));
  EXPECT_EQ(Load(dir_, wrong).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(TarShardsTest, FormatInference) {
  // A directory with class subdirectories stays an ImageFolder, even with a
  // stray .tar in it.
  const std::string folder = MakeTempDir();
  fs::create_directories(folder + "/cat");
  WriteFileForTest(folder + "/cat/a.jpg", "x");
  WriteFileForTest(folder + "/stray.tar", ShardBytes(0, 1));
  absl::StatusOr<std::shared_ptr<const Dataset>> images = Load(folder);
  ASSERT_TRUE(images.ok()) << images.status();
  EXPECT_EQ((*images)->shards(), nullptr);
  EXPECT_EQ((*images)->sample(0).shard, kNotInShard);
  // A list file ("<path> <label>") stays a list file.
  WriteFileForTest(folder + "/list.txt", "cat/a.jpg 0\n");
  absl::StatusOr<std::shared_ptr<const Dataset>> list =
      Load(folder + "/list.txt");
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ((*list)->shards(), nullptr);
  EXPECT_EQ(Bytes(**list, 0), "x");
  fs::remove_all(folder);
}

}  // namespace
}  // namespace batchd::server
