#include "server/dataset/shard_index.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/status_matchers.h"
#include "testing/tar_builder.h"

namespace batchd::server {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;

ShardIndex Index(const std::string& bytes) {
  const int fd = memfd_create("shard", 0);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(write(fd, bytes.data(), bytes.size()),
            static_cast<ssize_t>(bytes.size()));
  absl::StatusOr<ShardIndex> index = IndexShardFile(fd, bytes.size(), "s.tar");
  close(fd);
  EXPECT_TRUE(index.ok()) << index.status();
  return index.ok() ? *index : ShardIndex();
}

TEST(ShardIndexTest, SplitMemberName) {
  std::string key, ext;
  ASSERT_TRUE(SplitMemberName("dir.v2/000123.JPG", &key, &ext));
  EXPECT_EQ(key, "dir.v2/000123");
  EXPECT_EQ(ext, "jpg");
  ASSERT_TRUE(SplitMemberName("a.seg.png", &key, &ext));
  EXPECT_EQ(key, "a");
  EXPECT_EQ(ext, "seg.png");
  EXPECT_FALSE(SplitMemberName("noextension", &key, &ext));
  EXPECT_FALSE(SplitMemberName("dir/.hidden", &key, &ext));
}

TEST(ShardIndexTest, GroupsByKeyWithImageAndClass) {
  TarBuilder tar;
  tar.AddFile("__key__", "metadata");  // webdataset metadata: ignored
  tar.AddFile("a.jpg", "A");
  tar.AddFile("a.cls", "3\n");
  tar.AddFile("a.json", "{}");
  tar.AddFile("b.cls", " 12 ");
  tar.AddFile("b.PNG", "B");             // class before image, any case
  tar.AddFile("c.jpeg", "C");
  tar.AddFile("c.txt", "no class");      // skipped: no cls
  tar.AddFile("d.cls", "4");             // a sample without an image
  tar.AddFile("e.jpg", "E");
  tar.AddFile("e.cls", "-1");            // skipped: bad class
  tar.AddFile("f.jpg", "F1");
  tar.AddFile("f.png", "F2");            // after jpg in the priority list
  tar.AddFile("f.cls", "0");
  tar.AddFile("g.seg.png", "mask");      // "seg.png" is not an image member:
                                         // a sample without an image
  tar.AddFile("g.cls", "1");
  tar.AddFile("h.jpg", "H");
  tar.AddFile("h.cls", std::string(100, '1'));  // too long for a class
  tar.AddFile("i.jpg", "I");
  tar.AddFile("i.cls", "99999999999");   // beyond the label limit
  tar.Finish();
  const ShardIndex index = Index(tar.bytes());
  EXPECT_THAT(index.damage, IsEmpty());
  ASSERT_EQ(index.samples.size(), 5u);
  EXPECT_EQ(index.samples[0].member, "a.jpg");
  EXPECT_EQ(index.samples[0].label, 3);
  EXPECT_EQ(tar.bytes().substr(index.samples[0].offset, index.samples[0].size),
            "A");
  EXPECT_EQ(index.samples[1].member, "b.PNG");
  EXPECT_EQ(index.samples[1].label, 12);
  EXPECT_TRUE(index.samples[1].has_image);
  EXPECT_EQ(index.samples[2].member, "d");  // the key
  EXPECT_FALSE(index.samples[2].has_image);
  EXPECT_EQ(index.samples[2].label, 4);
  EXPECT_EQ(index.samples[3].member, "f.jpg");
  EXPECT_EQ(index.samples[3].label, 0);
  EXPECT_EQ(tar.bytes().substr(index.samples[3].offset, index.samples[3].size),
            "F1");
  EXPECT_EQ(index.samples[4].member, "g");
  EXPECT_FALSE(index.samples[4].has_image);
  EXPECT_EQ(index.no_image_samples(), 2u);  // d, g
  EXPECT_EQ(index.skipped_no_class, 1u);   // c
  EXPECT_EQ(index.skipped_no_image, 0u);
  EXPECT_EQ(index.skipped_bad_class, 3u);  // e, h, i
  EXPECT_THAT(index.skipped_example, HasSubstr("key 'c'"));
  EXPECT_THAT(index.skipped_example, HasSubstr("no cls member"));
}

TEST(ShardIndexTest, ImageChosenByPriorityListNotMemberOrder) {
  TarBuilder tar;
  tar.AddFile("a.webp", "A-webp");
  tar.AddFile("a.png", "A-png");
  tar.AddFile("a.jpg", "A-jpg");
  tar.AddFile("a.cls", "1");
  tar.AddFile("b.webp", "B-webp");
  tar.AddFile("b.jpeg", "B-jpeg");
  tar.AddFile("b.cls", "2");
  tar.AddFile("c.txt", "caption only");  // neither image nor class
  tar.Finish();
  auto index_with = [&](const std::vector<std::string>& extensions) {
    const std::string path = ::testing::TempDir() + "/priority.tar";
    WriteFileForTest(path, tar.bytes());
    const int fd = open(path.c_str(), O_RDONLY);
    absl::StatusOr<ShardIndex> index =
        IndexShardFile(fd, tar.bytes().size(), "priority.tar", extensions);
    close(fd);
    EXPECT_TRUE(index.ok()) << index.status();
    return index.ok() ? *index : ShardIndex();
  };
  auto member_data = [&](const ShardSample& sample) {
    return tar.bytes().substr(sample.offset, sample.size);
  };
  // open_clip's default, "jpg;png;jpeg;webp".
  ShardIndex index = index_with(DefaultImageExtensions());
  ASSERT_EQ(index.samples.size(), 2u);
  EXPECT_EQ(member_data(index.samples[0]), "A-jpg");
  EXPECT_EQ(member_data(index.samples[1]), "B-jpeg");
  EXPECT_EQ(index.skipped_no_image, 1u);  // c
  ASSERT_OK_AND_ASSIGN(std::vector<std::string> webp_first,
                       ImageExtensions("WEBP;jpg"));
  EXPECT_EQ(webp_first, (std::vector<std::string>{"webp", "jpg"}));
  index = index_with(webp_first);
  ASSERT_EQ(index.samples.size(), 2u);
  EXPECT_EQ(member_data(index.samples[0]), "A-webp");
  EXPECT_EQ(member_data(index.samples[1]), "B-webp");
  // Only png: b has no image member.
  index = index_with({"png"});
  ASSERT_EQ(index.samples.size(), 2u);
  EXPECT_EQ(member_data(index.samples[0]), "A-png");
  EXPECT_FALSE(index.samples[1].has_image);
}

TEST(ShardIndexTest, ImageExtensionListsAreValidated) {
  ASSERT_OK_AND_ASSIGN(std::vector<std::string> defaults, ImageExtensions(""));
  EXPECT_EQ(defaults,
            (std::vector<std::string>{"jpg", "png", "jpeg", "webp"}));
  for (const char* bad : {";", "jpg;", "jpg;;png", ".jpg", "a/b", "j pg",
                          "jpg;JPG", "cls"}) {
    absl::StatusOr<std::vector<std::string>> got = ImageExtensions(bad);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(got.status().message(), HasSubstr("image extensions")) << bad;
  }
  EXPECT_FALSE(ImageExtensions("a;b;c;d;e;f;g;h;i;j;k;l;m;n;o;p;q").ok());
}

TEST(ShardIndexTest, KeysRepeatingLaterAreNewSamples) {
  TarBuilder tar;
  tar.AddFile("a.jpg", "1");
  tar.AddFile("a.cls", "1");
  tar.AddFile("b.jpg", "2");
  tar.AddFile("b.cls", "2");
  tar.AddFile("a.jpg", "3");
  tar.AddFile("a.cls", "3");
  tar.Finish();
  const ShardIndex index = Index(tar.bytes());
  ASSERT_EQ(index.samples.size(), 3u);
  EXPECT_EQ(index.samples[2].label, 3);
}

TEST(ShardIndexTest, DamagedShardKeepsTheSamplesBeforeTheDamage) {
  TarBuilder tar;
  tar.AddFile("a.jpg", "A");
  tar.AddFile("a.cls", "1");
  tar.AddFile("b.jpg", std::string(2000, 'B'));
  tar.AddFile("b.cls", "2");
  const std::string bytes = tar.bytes();
  // Cut inside b.jpg's data: a is indexed, b's image is gone, and its cls
  // after the cut too.
  const ShardIndex index = Index(bytes.substr(0, 512 * 5 + 1000));
  ASSERT_EQ(index.samples.size(), 1u);
  EXPECT_EQ(index.samples[0].member, "a.jpg");
  EXPECT_THAT(index.damage, HasSubstr("runs past the end"));
  // Cut after b.jpg: b has no cls any more.
  const ShardIndex cut_cls = Index(bytes.substr(0, 512 * 9 + 100));
  EXPECT_EQ(cut_cls.samples.size(), 1u);
  EXPECT_EQ(cut_cls.skipped_no_class, 1u);
  EXPECT_THAT(cut_cls.damage, HasSubstr("ends inside a header"));
}

}  // namespace
}  // namespace batchd::server

namespace batchd::server {
namespace {

TEST(ShardIndexTest, KeepsOtherMembersUpToTheBound) {
  TarBuilder tar;
  tar.AddFile("a.jpg", "image");
  tar.AddFile("a.txt", "caption");
  tar.AddFile("a.json", "{}");
  tar.AddFile("a.TXT", "again");  // the same extension, lowercased: ignored
  tar.AddFile("b.png", "image");
  for (size_t i = 0; i < kMaxOtherMembers + 4; ++i) {
    tar.AddFile(absl::StrCat("b.f", i), "x");
  }
  tar.AddFile(absl::StrCat("b.", std::string(kMaxExtensionBytes + 1, 'e')),
              "long extension");
  tar.Finish();
  const ShardIndex index = Index(tar.bytes());
  // No key has a cls: both are kept apart as unlabelled.
  EXPECT_TRUE(index.samples.empty());
  ASSERT_EQ(index.unlabeled.size(), 2u);
  const ShardSample& a = index.unlabeled[0];
  EXPECT_EQ(a.label, kNoLabel);
  ASSERT_EQ(a.others.size(), 2u);
  EXPECT_EQ(a.others[0].extension, "txt");
  EXPECT_EQ(a.others[0].size, 7u);
  EXPECT_EQ(tar.bytes().substr(a.others[0].offset, 7), "caption");
  EXPECT_EQ(a.others[1].extension, "json");
  EXPECT_EQ(index.unlabeled[1].others.size(), kMaxOtherMembers);
}

}  // namespace
}  // namespace batchd::server
