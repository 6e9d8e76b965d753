// End-to-end: TAR_SHARDS datasets and PNG samples through real daemons.
// The same images served from an ImageFolder and from shards written by
// batchd-prep give byte-identical batches; capped shards serve capped
// images; bad samples inside shards (and PNGs) are substituted with the
// reason; damaged shards are served up to the damage.
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/tar_builder.h"
#include "testing/png_synth.h"
#include "testing/daemon_process.h"
#include "testing/e2e_helpers.h"
#include "testing/jpeg_synth.h"

namespace batchd::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr int kImages = 45;
constexpr int kClasses = 4;
constexpr uint32_t kSize = 32;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

absl::Status Prep(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {BuiltBinary("tools/batchd-prep"),
                                   "--quiet", "--threads", "2"};
  argv.insert(argv.end(), args.begin(), args.end());
  CommandResult result = RunCommand(argv);
  if (result.exit_code != 0) {
    return absl::InternalError(absl::StrCat("batchd-prep failed (",
                                            result.exit_code, "): ",
                                            result.output));
  }
  return absl::OkStatus();
}

class ShardsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<std::string> dir = MakeDataset(kImages, kClasses, 31);
    ASSERT_TRUE(dir.ok()) << dir.status();
    folder_ = new std::string(*dir);
    shards_ = new std::string(MakeTempDir("shards"));
    capped_ = new std::string(MakeTempDir("capped"));
    fs::remove(*shards_);
    fs::remove(*capped_);
    const absl::Status copied =
        Prep({"--input", *folder_, "--out", *shards_, "--shard-size", "7"});
    ASSERT_TRUE(copied.ok()) << copied;
    const absl::Status capped = Prep({"--input", *folder_, "--out", *capped_,
                                      "--shard-size", "10", "--max-side",
                                      "160"});
    ASSERT_TRUE(capped.ok()) << capped;
  }
  static void TearDownTestSuite() {
    delete folder_;
    delete shards_;
    delete capped_;
  }
  static std::string* folder_;
  static std::string* shards_;
  static std::string* capped_;
};

std::string* ShardsTest::folder_ = nullptr;
std::string* ShardsTest::shards_ = nullptr;
std::string* ShardsTest::capped_ = nullptr;

TEST_F(ShardsTest, SameBatchesFromImageFolderAndPreparedShards) {
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<DaemonProcess> daemon,
      DaemonProcess::Start({"--dataset", "folder=" + *folder_, "--dataset",
                            "shards=" + *shards_, "--workers", "2"}));
  for (const bool train : {true, false}) {
    SCOPED_TRACE(train ? "train plan" : "eval plan");
    auto plan = [&](const std::string& dataset) {
      return train ? TrainPlan(dataset, 8, kSize, 5)
                   : EvalPlan(dataset, 8, kSize, 5);
    };
    ASSERT_OK_AND_ASSIGN(
        std::vector<BatchRecord> from_folder,
        ReadEpochs(daemon->endpoint(), plan("folder"), 0, 2));
    ASSERT_OK_AND_ASSIGN(
        std::vector<BatchRecord> from_shards,
        ReadEpochs(daemon->endpoint(), plan("shards"), 0, 2));
    ASSERT_EQ(from_folder.size(), 2u * 6u);  // ceil(45 / 8) per epoch
    EXPECT_EQ(from_shards, from_folder);
    for (const BatchRecord& record : from_shards) {
      EXPECT_TRUE(record.substitutions.empty());
    }
  }
  // A restart reads the sidecar index and serves the same bytes.
  const std::string log = daemon->Log();
  EXPECT_EQ(daemon->Stop(), 0);
  bool has_cache = false;
  for (const auto& entry : fs::directory_iterator(*shards_)) {
    has_cache |= entry.path().filename().string().rfind(".batchd-index-", 0) == 0;
  }
  EXPECT_TRUE(has_cache);
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<DaemonProcess> again,
      DaemonProcess::Start({"--dataset", "shards=" + *shards_}));
  ASSERT_OK_AND_ASSIGN(
      std::vector<BatchRecord> restarted,
      ReadEpochs(again->endpoint(), TrainPlan("shards", 8, kSize, 5), 1, 1));
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<DaemonProcess> folder_daemon,
      DaemonProcess::Start({"--dataset", "folder=" + *folder_}));
  ASSERT_OK_AND_ASSIGN(
      std::vector<BatchRecord> expected,
      ReadEpochs(folder_daemon->endpoint(), TrainPlan("folder", 8, kSize, 5), 1,
                 1));
  EXPECT_EQ(restarted, expected);
}

TEST_F(ShardsTest, PrepIsDeterministic) {
  const std::string again = MakeTempDir("shards-again");
  fs::remove(again);
  const absl::Status prepared = Prep({"--input", *folder_, "--out", again,
                                      "--shard-size", "7", "--threads", "1"});
  ASSERT_TRUE(prepared.ok()) << prepared;
  size_t compared = 0;
  for (const auto& entry : fs::directory_iterator(again)) {
    const std::string name = entry.path().filename().string();
    EXPECT_EQ(ReadAll(entry.path().string()), ReadAll(*shards_ + "/" + name))
        << name;
    ++compared;
  }
  EXPECT_EQ(compared, 7u + 2u);  // 7 shards, classes.txt, manifest.json
}

TEST_F(ShardsTest, CappedShardsServeCloseButSmallerImages) {
  const std::string manifest = ReadAll(*capped_ + "/manifest.json");
  EXPECT_THAT(manifest, HasSubstr("\"samples_written\": 45"));
  EXPECT_THAT(manifest, ::testing::Not(HasSubstr("\"resized\": 0,")));
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<DaemonProcess> daemon,
      DaemonProcess::Start({"--dataset", "folder=" + *folder_, "--dataset",
                            "capped=" + *capped_}));
  ASSERT_OK_AND_ASSIGN(
      std::vector<BatchRecord> original,
      ReadEpochs(daemon->endpoint(), EvalPlan("folder", 16, kSize, 1), 0, 1));
  ASSERT_OK_AND_ASSIGN(
      std::vector<BatchRecord> capped,
      ReadEpochs(daemon->endpoint(), EvalPlan("capped", 16, kSize, 1), 0, 1));
  ASSERT_EQ(capped.size(), original.size());
  double error = 0, bytes = 0;
  for (size_t b = 0; b < capped.size(); ++b) {
    EXPECT_EQ(capped[b].sample_indices, original[b].sample_indices);
    EXPECT_EQ(capped[b].labels, original[b].labels);
    EXPECT_TRUE(capped[b].substitutions.empty());
    ASSERT_EQ(capped[b].pixels.size(), original[b].pixels.size());
    for (size_t i = 0; i < capped[b].pixels.size(); ++i) {
      error += std::abs(static_cast<uint8_t>(capped[b].pixels[i]) -
                        static_cast<uint8_t>(original[b].pixels[i]));
    }
    bytes += capped[b].pixels.size();
  }
  // Different bytes (resized and re-encoded), the same pictures.
  EXPECT_GT(error / bytes, 0.0);
  EXPECT_LT(error / bytes, 10.0);
}

// A hand-built shard: good JPEGs and PNGs, and bad samples of each kind.
TEST(ShardSamplesTest, BadSamplesInShardsAreSubstitutedWithTheReason) {
  const std::string dir = MakeTempDir("bad-shards");
  auto jpeg = [](int seed) {
    tools::SynthOptions options;
    options.width = 64;
    options.height = 48;
    options.seed = seed;
    absl::StatusOr<std::vector<uint8_t>> bytes = tools::SynthesizeJpeg(options);
    EXPECT_TRUE(bytes.ok());
    return std::string(bytes->begin(), bytes->end());
  };
  server::PngSpec spec;
  spec.width = 40;
  spec.height = 40;
  for (int i = 0; i < 40 * 40 * 3; ++i) spec.samples.push_back((i * 13) % 256);
  const std::string png = server::EncodePngForTest(spec);
  server::TarBuilder tar;
  auto add = [&](int key, const std::string& ext, const std::string& data) {
    tar.AddFile(absl::StrFormat("%03d.%s", key, ext), data);
    tar.AddFile(absl::StrFormat("%03d.cls", key), absl::StrCat(key % 2));
  };
  add(0, "jpg", jpeg(0));
  add(1, "png", png);                          // decoded
  add(2, "png", png.substr(0, png.size() / 2));  // TRUNCATED
  add(3, "jpg", "plain text, not an image");   // NOT_JPEG
  add(4, "jpg", "GIF89a......");                // UNSUPPORTED_FORMAT
  add(5, "jpg", jpeg(5));
  add(6, "jpg", jpeg(6));                       // READ_ERROR: cut below
  tar.Finish();
  const std::string bytes = tar.bytes();
  server::WriteFileForTest(dir + "/a.tar", bytes);
  // A damaged second shard: one good sample, then a bad header checksum.
  server::TarBuilder damaged;
  damaged.AddFile("100.jpg", jpeg(100));
  damaged.AddFile("100.cls", "1");
  std::string damaged_bytes = damaged.bytes() +
                              server::TarBuilder::Header("101.jpg", 10, '0',
                                  server::TarFlavour::kUstar, "");
  damaged_bytes[damaged_bytes.size() - 512 + 5] ^= 1;
  server::WriteFileForTest(dir + "/b.tar", damaged_bytes + std::string(512, 'x'));

  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DaemonProcess> daemon,
                           DaemonProcess::Start({"--dataset", "d=" + dir}));
  // Cut a.tar inside sample 6's image after the daemon indexed it.
  const size_t sample6 = bytes.find("006.jpg");
  ASSERT_NE(sample6, std::string::npos);
  server::WriteFileForTest(dir + "/a.tar", bytes.substr(0, sample6 + 512 + 10));

  ASSERT_OK_AND_ASSIGN(
      std::vector<BatchRecord> records,
      ReadEpochs(daemon->endpoint(), EvalPlan("d", 8, kSize, 3), 0, 1));
  ASSERT_EQ(records.size(), 1u);
  const BatchRecord& batch = records[0];
  ASSERT_EQ(batch.sample_indices.size(), 8u);  // 7 + 1 before the damage
  std::map<uint64_t, v1::SubstitutionReason> reasons;
  for (const v1::Substitution& sub : batch.substitutions) {
    reasons[sub.original_index()] = sub.reason();
    EXPECT_NE(sub.substitute_index(), sub.original_index());
    EXPECT_FALSE(sub.detail().empty());
  }
  EXPECT_EQ(reasons, (std::map<uint64_t, v1::SubstitutionReason>{
                         {2, v1::TRUNCATED},
                         {3, v1::NOT_JPEG},
                         {4, v1::UNSUPPORTED_FORMAT},
                         {6, v1::READ_ERROR}}));
  EXPECT_EQ(batch.labels, (std::vector<int32_t>{0, 1, 0, 1, 0, 1, 0, 1}));
  EXPECT_THAT(daemon->Log(), HasSubstr("bad header checksum"));
}

}  // namespace
}  // namespace batchd::testing
