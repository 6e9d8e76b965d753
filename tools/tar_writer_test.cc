#include "tools/tar_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/dataset/tar_reader.h"

namespace batchd::tools {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/tar_writer_test_",
                      getpid(), "_", name);
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(TarWriterTest, MembersReadBackByTheDaemonsReader) {
  const std::string path = TempPath("a.tar");
  const std::string split = std::string(120, 'd') + "/" + std::string(90, 'f');
  const std::string unsplittable = std::string(250, 'u') + ".jpg";
  {
    absl::StatusOr<std::unique_ptr<TarWriter>> tar = TarWriter::Create(path);
    ASSERT_TRUE(tar.ok()) << tar.status();
    ASSERT_TRUE((*tar)->Add("000000000.jpg", std::string(1000, 'x')).ok());
    ASSERT_TRUE((*tar)->Add("000000000.cls", "4").ok());
    ASSERT_TRUE((*tar)->Add(split, "split").ok());
    ASSERT_TRUE((*tar)->Add(unsplittable, "pax").ok());
    ASSERT_TRUE((*tar)->Add("empty", "").ok());
    EXPECT_FALSE((*tar)->Add("", "x").ok());
    ASSERT_TRUE((*tar)->Close().ok());
  }
  const std::string bytes = ReadAll(path);
  EXPECT_EQ(bytes.size() % 512, 0u);
  const int fd = open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  absl::StatusOr<server::TarScan> scan =
      server::ScanTarFile(fd, bytes.size(), path);
  close(fd);
  ASSERT_TRUE(scan.ok()) << scan.status();
  EXPECT_EQ(scan->damage, "");
  ASSERT_EQ(scan->members.size(), 5u);
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"000000000.jpg", std::string(1000, 'x')},
      {"000000000.cls", "4"},
      {split, "split"},
      {unsplittable, "pax"},
      {"empty", ""}};
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(scan->members[i].name, expected[i].first);
    EXPECT_EQ(bytes.substr(scan->members[i].offset, scan->members[i].size),
              expected[i].second);
  }
  unlink(path.c_str());
}

TEST(TarWriterTest, SameMembersSameBytes) {
  std::string files[2];
  for (int run = 0; run < 2; ++run) {
    const std::string path = TempPath(absl::StrCat("run", run, ".tar"));
    auto tar = TarWriter::Create(path);
    ASSERT_TRUE(tar.ok());
    ASSERT_TRUE((*tar)->Add("k.jpg", "data").ok());
    ASSERT_TRUE((*tar)->Close().ok());
    if (run == 0) sleep(1);  // a different mtime if one were written
    files[run] = ReadAll(path);
    unlink(path.c_str());
  }
  EXPECT_EQ(files[0], files[1]);
}

TEST(TarWriterTest, CreateErrorNamesThePath) {
  absl::StatusOr<std::unique_ptr<TarWriter>> tar =
      TarWriter::Create("/nonexistent-dir/x.tar");
  EXPECT_FALSE(tar.ok());
  EXPECT_THAT(std::string(tar.status().message()),
              ::testing::HasSubstr("/nonexistent-dir/x.tar"));
}

}  // namespace
}  // namespace batchd::tools
