#include "server/dataset/dataset.h"

#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace batchd::server {
namespace {

namespace fs = std::filesystem;
using ::batchd::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

// Every test gets a fresh directory under the gtest temp dir.
class DatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const ::testing::TestInfo* info =
        ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = (fs::path(::testing::TempDir()) /
            absl::StrCat("batchd_dataset_test_", getpid(), "_",
                         info->name()))
               .string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // `relative` under the test dir; parent directories are created.
  std::string Path(const std::string& relative) const {
    return (fs::path(dir_) / relative).string();
  }
  std::string Write(const std::string& relative,
                    const std::string& contents = "x") {
    const std::string path = Path(relative);
    fs::create_directories(fs::path(path).parent_path());
    std::ofstream(path, std::ios::binary) << contents;
    return path;
  }
  std::string MakeDir(const std::string& relative) {
    const std::string path = Path(relative);
    fs::create_directories(path);
    return path;
  }
  void Symlink(const std::string& target, const std::string& relative_link) {
    fs::create_directories(fs::path(Path(relative_link)).parent_path());
    fs::create_symlink(target, Path(relative_link));
  }

  // (path relative to the test dir, label) of every sample.
  static std::vector<std::pair<std::string, int>> Samples(
      const Dataset& dataset, const std::string& base) {
    std::vector<std::pair<std::string, int>> out;
    for (uint64_t i = 0; i < dataset.size(); ++i) {
      out.emplace_back(
          fs::path(dataset.sample(i).path).lexically_relative(base).string(),
          dataset.sample(i).label);
    }
    return out;
  }

  std::string dir_;
};

TEST(DatasetShardSamplesTest, RunsOfOneShardInSampleOrder) {
  auto in_shard = [](uint32_t shard) {
    Sample sample;
    sample.path = "member.jpg";
    sample.shard = shard;
    return sample;
  };
  // Shard 1 has no samples (damaged at its start): it is left out.
  const Dataset sharded("s",
                        {in_shard(0), in_shard(0), in_shard(0), in_shard(2),
                         in_shard(3), in_shard(3)},
                        {"a"});
  EXPECT_EQ(*sharded.shard_samples(), (std::vector<uint64_t>{3, 1, 2}));
  const Dataset files("f", {Sample{.path = "a.jpg"}, Sample{.path = "b.jpg"}},
                      {"a"});
  EXPECT_TRUE(files.shard_samples()->empty());
}

TEST_F(DatasetTest, ImageFolderOrderLabelsAndClassNames) {
  Write("root/dog/b.jpg");
  Write("root/dog/a.jpg");
  Write("root/cat/z.JPEG");
  Write("root/cat/a.png");
  // Nested directories, ordered as torchvision's sorted(os.walk(...)): by
  // directory path string, so "cat/sub" < "cat/sub-2" < "cat/sub/deep"
  // ('-' < '/').
  Write("root/cat/sub/x.jpg");
  Write("root/cat/sub-2/y.jpg");
  Write("root/cat/sub/deep/w.jpg");
  Write("root/bird/0.webp");
  MakeDir("root/empty");           // empty class: allowed, keeps its label
  Write("root/top-level.jpg");     // not in a class
  Write("root/cat/notes.txt");     // not an image
  Write("root/cat/.hidden.jpg");   // hidden
  Write("root/cat/._a.jpg");       // macOS AppleDouble
  Write("root/.ipynb_checkpoints/c.jpg");  // hidden: not a class
  Write("root/cat/.cache/d.jpg");  // hidden directory
  const std::string root = Path("root");

  ASSERT_OK_AND_ASSIGN(std::shared_ptr<const Dataset> dataset, Dataset::LoadImageFolder("pets", root));
  EXPECT_EQ(dataset->name(), "pets");
  EXPECT_THAT(dataset->class_names(),
              ElementsAre("bird", "cat", "dog", "empty"));
  EXPECT_THAT(Samples(*dataset, root),
              ElementsAre(Pair("bird/0.webp", 0), Pair("cat/a.png", 1),
                          Pair("cat/z.JPEG", 1), Pair("cat/sub/x.jpg", 1),
                          Pair("cat/sub-2/y.jpg", 1),
                          Pair("cat/sub/deep/w.jpg", 1), Pair("dog/a.jpg", 2),
                          Pair("dog/b.jpg", 2)));
  // Paths are usable as given: root joined with the relative path.
  EXPECT_EQ(dataset->sample(0).path, root + "/bird/0.webp");
}

TEST_F(DatasetTest, ImageFolderFollowsSymlinksWithoutLooping) {
  Write("elsewhere/real.jpg");
  Write("fish-files/f.jpg");
  Write("root/cat/a.jpg");
  Symlink(Path("elsewhere/real.jpg"), "root/cat/link.jpg");
  Symlink(Path("missing.jpg"), "root/cat/broken.jpg");  // skipped
  Symlink(Path("fish-files"), "root/fish");             // class via symlink
  Symlink(Path("root/cat"), "root/cat/loop");           // cycle
  Symlink(Path("root"), "root/dog");                    // cycle to the root
  const std::string root = Path("root");
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<const Dataset> dataset, Dataset::LoadImageFolder("s", root));
  EXPECT_THAT(dataset->class_names(), ElementsAre("cat", "dog", "fish"));
  EXPECT_THAT(Samples(*dataset, root),
              ElementsAre(Pair("cat/a.jpg", 0), Pair("cat/link.jpg", 0),
                          Pair("fish/f.jpg", 2)));
}

TEST_F(DatasetTest, ImageFolderExtensions) {
  const std::vector<std::string> images = {
      "a.jpg", "b.JPG", "c.jpeg", "d.Jpeg", "e.png", "f.gif", "g.bmp",
      "h.ppm", "i.pgm", "j.tif",  "k.TIFF", "l.webp"};
  for (const std::string& name : images) Write("root/c/" + name);
  for (const char* name :
       {"m.jpgx", "jpg", "n.txt", "o.jpg.bak", "p.", "q.JP"}) {
    Write(std::string("root/c/") + name);
  }
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<const Dataset> dataset,
                               Dataset::LoadImageFolder("e", Path("root")));
  std::vector<std::string> names;
  for (uint64_t i = 0; i < dataset->size(); ++i) {
    names.push_back(fs::path(dataset->sample(i).path).filename().string());
  }
  EXPECT_EQ(names, images);  // already in sorted order
}

TEST_F(DatasetTest, ImageFolderErrors) {
  EXPECT_THAT(Dataset::LoadImageFolder("x", Path("nope")),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr(Path("nope") + "' does not exist")));
  Write("file.jpg");
  EXPECT_THAT(Dataset::LoadImageFolder("x", Path("file.jpg")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("is not a directory")));
  MakeDir("no-classes");
  Write("no-classes/a.jpg");
  EXPECT_THAT(Dataset::LoadImageFolder("x", Path("no-classes")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("no class subdirectories")));
  MakeDir("no-images/a");
  MakeDir("no-images/b");
  Write("no-images/b/readme.txt");
  EXPECT_THAT(Dataset::LoadImageFolder("x", Path("no-images")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("2 class directories but no image files")));
  EXPECT_THAT(Dataset::LoadImageFolder("x", ""),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("empty")));
}

TEST_F(DatasetTest, ListFileParsing) {
  const std::string list = Write("lists/train.txt",
                                 "# a comment\n"
                                 "\n"
                                 "img/b.jpg 2\n"
                                 "   # indented comment\n"
                                 "img/a.jpg\t0\r\n"
                                 "  img/c.jpg   1  \n"
                                 "img/a.jpg 1\n"
                                 "\t\n"
                                 "img/d.jpg 0");  // no final newline
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<const Dataset> dataset,
                               Dataset::LoadListFile("l", list, /*root=*/""));
  EXPECT_EQ(dataset->name(), "l");
  // Relative to the list file's directory; sorted by (path, label).
  EXPECT_THAT(Samples(*dataset, Path("lists")),
              ElementsAre(Pair("img/a.jpg", 0), Pair("img/a.jpg", 1),
                          Pair("img/b.jpg", 2), Pair("img/c.jpg", 1),
                          Pair("img/d.jpg", 0)));
  EXPECT_THAT(dataset->class_names(), ElementsAre("0", "1", "2"));

  // An explicit root.
  const std::string images = MakeDir("images");
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<const Dataset> rooted,
                               Dataset::LoadListFile("l", list, images));
  EXPECT_EQ(rooted->sample(0).path, images + "/img/a.jpg");
}

TEST_F(DatasetTest, ListFileErrorsNameFileAndLine) {
  struct Case {
    std::string contents;
    std::string message;
  };
  const std::string max_plus_one =
      absl::StrCat(Dataset::kMaxListFileLabel + 1);
  const std::vector<Case> cases = {
      {"a.jpg 0\n# c\nb.jpg x\n",
       "train.txt:3: label 'x' is not a non-negative integer"},
      {"a.jpg -1\n", "train.txt:1: label '-1' is not a non-negative integer"},
      {"a.jpg +1\n", "train.txt:1: label '+1' is not a non-negative integer"},
      {"a.jpg 1.5\n", "train.txt:1: label '1.5' is not a non-negative"},
      {"\n\na.jpg\n", "train.txt:3: expected '<path> <label>', found 1 field"},
      {"my file.jpg 3\n",
       "train.txt:1: expected '<path> <label>', found 3 fields (paths may not "
       "contain spaces)"},
      {"a.jpg 99999999999\n",
       "train.txt:1: label 99999999999 is larger than the limit"},
      {"a.jpg " + max_plus_one + "\n",
       "train.txt:1: label " + max_plus_one + " is larger than the limit"},
      {"# only comments\n\n", "has no samples"},
      {"", "has no samples"},
  };
  for (const Case& c : cases) {
    const std::string list = Write("train.txt", c.contents);
    EXPECT_THAT(Dataset::LoadListFile("l", list, ""),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr(c.message)))
        << c.contents;
  }
  EXPECT_THAT(Dataset::LoadListFile("l", Path("missing.txt"), ""),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr(Path("missing.txt"))));
  const std::string list = Write("ok.txt", "a.jpg 0\n");
  EXPECT_THAT(Dataset::LoadListFile("l", list, Path("no-root")),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no-root")));
}

TEST_F(DatasetTest, LoadDatasetInfersTheFormat) {
  Write("folder/c/a.jpg");
  Write("list.txt", "a.jpg 4\n");
  batchd::v1::DatasetConfig config;
  config.set_name("Folder_1.v-2");
  config.set_path(Path("folder"));
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<const Dataset> folder, LoadDataset(config));
  EXPECT_EQ(folder->name(), "Folder_1.v-2");
  EXPECT_THAT(folder->class_names(), ElementsAre("c"));

  config.set_path(Path("list.txt"));
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<const Dataset> list, LoadDataset(config));
  EXPECT_EQ(list->class_names().size(), 5u);
  EXPECT_EQ(list->sample(0).label, 4);

  // An explicit format is obeyed.
  config.set_format(batchd::v1::DatasetConfig::IMAGE_FOLDER);
  EXPECT_THAT(LoadDataset(config),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("dataset 'Folder_1.v-2': ImageFolder root")));
  config.set_format(batchd::v1::DatasetConfig::LIST_FILE);
  config.set_path(Path("folder"));
  EXPECT_THAT(LoadDataset(config),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("is not a regular file")));
}

TEST_F(DatasetTest, LoadDatasetValidates) {
  Write("folder/c/a.jpg");
  batchd::v1::DatasetConfig config;
  config.set_path(Path("folder"));
  for (const std::string& bad :
       {std::string(""), std::string("a b"), std::string("a/b"),
        std::string("caf\xc3\xa9"), std::string("x=y"), std::string(200, 'a')}) {
    config.set_name(bad);
    EXPECT_THAT(LoadDataset(config),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("dataset name")))
        << bad;
  }
  config.set_name("ok");
  config.set_path("");
  EXPECT_THAT(LoadDataset(config),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("dataset 'ok': path is empty")));
  config.set_path(Path("missing"));
  EXPECT_THAT(LoadDataset(config),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("dataset 'ok': path '")));
  config.set_path(Path("folder"));
  config.set_root(Path("folder"));
  EXPECT_THAT(LoadDataset(config),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("LIST_FILE datasets only")));
  config.clear_root();
  config.set_format(static_cast<batchd::v1::DatasetConfig::Format>(42));
  EXPECT_THAT(LoadDataset(config),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("unknown format 42")));
}

TEST_F(DatasetTest, LoadDatasetsRejectsDuplicateNames) {
  Write("folder/c/a.jpg");
  Write("list.txt", "a.jpg 0\n");
  batchd::v1::DaemonConfig config;
  auto* a = config.add_datasets();
  a->set_name("a");
  a->set_path(Path("folder"));
  auto* b = config.add_datasets();
  b->set_name("b");
  b->set_path(Path("list.txt"));
  auto loaded = LoadDatasets(config);
  ASSERT_OK(loaded);
  ASSERT_EQ(loaded->size(), 2u);
  EXPECT_EQ((*loaded)[0]->name(), "a");
  EXPECT_EQ((*loaded)[1]->name(), "b");

  auto* again = config.add_datasets();
  again->set_name("a");
  again->set_path(Path("does-not-matter"));
  EXPECT_THAT(LoadDatasets(config),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("dataset name 'a' is used more than once")));

  auto empty = LoadDatasets(batchd::v1::DaemonConfig());
  ASSERT_OK(empty);
  EXPECT_TRUE(empty->empty());
}

TEST_F(DatasetTest, ReadConfigFile) {
  const std::string good = Write("good.textproto",
                                 "# comment\n"
                                 "datasets { name: \"a\" path: \"/x\" }\n"
                                 "datasets {\n"
                                 "  name: \"b\"\n"
                                 "  path: \"/y.txt\"\n"
                                 "  format: LIST_FILE\n"
                                 "  root: \"/r\"\n"
                                 "}\n");
  auto config = ReadConfigFile(good);
  ASSERT_OK(config);
  ASSERT_EQ(config->datasets_size(), 2);
  EXPECT_EQ(config->datasets(1).format(),
            batchd::v1::DatasetConfig::LIST_FILE);
  EXPECT_EQ(config->datasets(1).root(), "/r");

  const std::string syntax = Write("bad.textproto",
                                   "datasets {\n"
                                   "  name: \"a\"\n"
                                   "  path \"/x\"\n"
                                   "}\n");
  EXPECT_THAT(ReadConfigFile(syntax),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr(syntax + ":3:8: ")));
  const std::string unknown = Write("unknown.textproto",
                                    "datasets { name: \"a\" }\n"
                                    "worker_threads: 4\n");
  EXPECT_THAT(ReadConfigFile(unknown),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::AllOf(HasSubstr(unknown + ":2:"),
                                        HasSubstr("worker_threads"))));
  const std::string bad_enum =
      Write("enum.textproto", "datasets { format: TAR }\n");
  EXPECT_THAT(ReadConfigFile(bad_enum),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::AllOf(HasSubstr(":1:"), HasSubstr("TAR"))));
  EXPECT_THAT(ReadConfigFile(Path("missing.textproto")),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("missing.textproto")));
  // An empty file is an empty config.
  auto empty = ReadConfigFile(Write("empty.textproto", ""));
  ASSERT_OK(empty);
  EXPECT_EQ(empty->datasets_size(), 0);
}

TEST_F(DatasetTest, ExampleDeployConfigParses) {
  auto config =
      ReadConfigFile(std::string(BATCHD_SOURCE_DIR) +
                     "/deploy/batchd.conf.textproto");
  ASSERT_OK(config);
  ASSERT_GE(config->datasets_size(), 2);
  bool has_folder = false, has_list = false;
  for (const auto& dataset : config->datasets()) {
    has_folder |= dataset.format() == batchd::v1::DatasetConfig::IMAGE_FOLDER;
    has_list |= dataset.format() == batchd::v1::DatasetConfig::LIST_FILE;
  }
  EXPECT_TRUE(has_folder);
  EXPECT_TRUE(has_list);
  // The names are valid and distinct: only the paths are missing here.
  for (const auto& dataset : config->datasets()) {
    EXPECT_THAT(LoadDataset(dataset),
                StatusIs(absl::StatusCode::kNotFound, HasSubstr("/data/")))
        << dataset.name();
  }
}

TEST_F(DatasetTest, ParseDatasetFlag) {
  auto config = ParseDatasetFlag("train=/data/train");
  ASSERT_OK(config);
  EXPECT_EQ(config->name(), "train");
  EXPECT_EQ(config->path(), "/data/train");
  EXPECT_EQ(config->format(), batchd::v1::DatasetConfig::FORMAT_UNSPECIFIED);

  config = ParseDatasetFlag("a=b=c");  // the first '=' splits
  ASSERT_OK(config);
  EXPECT_EQ(config->name(), "a");
  EXPECT_EQ(config->path(), "b=c");

  EXPECT_THAT(ParseDatasetFlag("/data/train"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("expected name=path")));
  EXPECT_THAT(ParseDatasetFlag("=/data"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("name before '=' is empty")));
  EXPECT_THAT(ParseDatasetFlag("train="),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("path after '=' is empty")));
  EXPECT_THAT(ParseDatasetFlag("my set=/x"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("may only contain")));
  EXPECT_THAT(ParseDatasetFlag(""),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("expected name=path")));
}

TEST_F(DatasetTest, ReadFileBytes) {
  auto empty = ReadFileBytes(Write("empty", ""));
  ASSERT_OK(empty);
  EXPECT_EQ(empty->text(), "");
  EXPECT_EQ(empty->size(), 0u);

  std::string binary(100000, '\0');
  for (size_t i = 0; i < binary.size(); ++i) binary[i] = static_cast<char>(i * 7);
  auto read = ReadFileBytes(Write("binary", binary));
  ASSERT_OK(read);
  EXPECT_EQ(read->text(), binary);
  EXPECT_EQ(read->bytes().size(), binary.size());

  EXPECT_THAT(ReadFileBytes(Path("missing")),
              StatusIs(absl::StatusCode::kNotFound,
                       ::testing::AllOf(HasSubstr(Path("missing")),
                                        HasSubstr("No such file"))));
  // A path through a regular file (ENOTDIR) is missing too.
  EXPECT_THAT(ReadFileBytes(Path("binary/x")),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("binary/x")));
  EXPECT_THAT(ReadFileBytes(MakeDir("dir")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("is a directory")));
  // A FIFO with no writer: an error, not a hang.
  ASSERT_EQ(mkfifo(Path("fifo").c_str(), 0600), 0);
  EXPECT_THAT(ReadFileBytes(Path("fifo")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("not a regular file")));
}

TEST_F(DatasetTest, ReadFileBytesPermissionDenied) {
  const std::string path = Write("secret", "s");
  ASSERT_EQ(chmod(path.c_str(), 0), 0);
  const auto check = [&path] {
    const absl::Status status = ReadFileBytes(path).status();
    return status.code() == absl::StatusCode::kPermissionDenied &&
           status.message().find(path) != absl::string_view::npos &&
           status.message().find("Permission denied") !=
               absl::string_view::npos;
  };
  if (geteuid() != 0) {
    EXPECT_TRUE(check());
    return;
  }
  // Root reads any file: check as an unprivileged user in a child process.
  EXPECT_EXIT(
      {
        if (setgid(65534) != 0 || setuid(65534) != 0) _exit(2);
        _exit(check() ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace batchd::server
