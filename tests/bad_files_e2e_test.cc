// End-to-end: a dataset with broken files. Every bad sample is replaced by a
// good one, deterministically, reported in the batch header with the right
// reason and counted by the daemon, which stays up; the CLI's --verify still
// passes.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/daemon_process.h"
#include "testing/e2e_helpers.h"

namespace batchd::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr int kImages = 40;
constexpr int kClasses = 4;  // image i is in class_00(i % 4)
constexpr uint32_t kSize = 32;

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

// Offset of the first marker of `jpeg` whose code satisfies `is_wanted`,
// walking the marker segments from SOI; npos if none.
template <typename Pred>
size_t FindMarker(const std::string& jpeg, Pred is_wanted) {
  size_t pos = 2;  // after SOI
  while (pos + 4 <= jpeg.size()) {
    if (static_cast<uint8_t>(jpeg[pos]) != 0xFF) return std::string::npos;
    const uint8_t code = static_cast<uint8_t>(jpeg[pos + 1]);
    if (code == 0xFF) {  // fill byte
      ++pos;
      continue;
    }
    if (is_wanted(code)) return pos;
    const size_t length = (static_cast<uint8_t>(jpeg[pos + 2]) << 8) |
                          static_cast<uint8_t>(jpeg[pos + 3]);
    pos += 2 + length;
  }
  return std::string::npos;
}

bool IsStartOfFrame(uint8_t code) {
  return code >= 0xC0 && code <= 0xCF && code != 0xC4 && code != 0xC8 &&
         code != 0xCC;
}

struct BadFile {
  std::string relative_path;  // within the dataset
  v1::SubstitutionReason reason;
};

class BadFilesTest : public ::testing::Test {
 protected:
  // Builds a clean dataset and a copy with broken files. The file deleted
  // for READ_ERROR is still present: delete it once the daemons indexed it.
  static void SetUpTestSuite() {
    absl::StatusOr<std::string> clean = MakeDataset(kImages, kClasses, 17);
    ASSERT_TRUE(clean.ok()) << clean.status();
    clean_ = new std::string(*clean);
    bad_ = new std::string(MakeTempDir("bad-dataset"));
    fs::copy(*clean_, *bad_, fs::copy_options::recursive);
    const std::string& d = *bad_;

    // Replaced in place so the sample indices stay those of the clean copy.
    WriteBytes(d + "/class_000/img_000000.jpg", "");
    {
      // Headers and a few bytes of entropy-coded data: any crop runs into
      // the end of the data.
      const std::string path = d + "/class_001/img_000001.jpg";
      const std::string jpeg = ReadBytes(path);
      const size_t sos =
          FindMarker(jpeg, [](uint8_t code) { return code == 0xDA; });
      ASSERT_NE(sos, std::string::npos);
      const size_t sos_length = (static_cast<uint8_t>(jpeg[sos + 2]) << 8) |
                                static_cast<uint8_t>(jpeg[sos + 3]);
      WriteBytes(path, jpeg.substr(0, sos + 2 + sos_length + 64));
    }
    {
      // The first half of a file. Only the decoded part of a file is checked
      // (a region decode stops after the crop's last row), so whether this
      // is noticed depends on the crop; with this plan's seed every crop
      // reaches past the cut.
      const std::string path = d + "/class_002/img_000006.jpg";
      const std::string jpeg = ReadBytes(path);
      WriteBytes(path, jpeg.substr(0, jpeg.size() / 2));
    }
    {
      // Unexpected restart markers at the start of the entropy-coded data:
      // every crop decodes through them.
      const std::string path = d + "/class_003/img_000007.jpg";
      std::string jpeg = ReadBytes(path);
      const size_t sos =
          FindMarker(jpeg, [](uint8_t code) { return code == 0xDA; });
      ASSERT_NE(sos, std::string::npos);
      const size_t data = sos + 2 +
                          ((static_cast<uint8_t>(jpeg[sos + 2]) << 8) |
                           static_cast<uint8_t>(jpeg[sos + 3]));
      ASSERT_LT(data + 80, jpeg.size());
      for (size_t i = data + 16; i < data + 80; i += 2) {
        jpeg[i] = static_cast<char>(0xFF);
        jpeg[i + 1] = static_cast<char>(0xD3);
      }
      WriteBytes(path, jpeg);
    }
    WriteBytes(d + "/class_002/img_000002.jpg",
               "This is a text file, not a JPEG.\n");
    {
      // Same name with .gif (sorts to the same index), GIF signature: a
      // format the daemon does not decode.
      fs::remove(d + "/class_003/img_000003.jpg");
      WriteBytes(d + "/class_003/img_000003.gif",
                 std::string("GIF89a", 6) + std::string(64, 'x'));
    }
    {
      const std::string path = d + "/class_000/img_000008.jpg";
      std::string jpeg = ReadBytes(path);
      const size_t sof = FindMarker(jpeg, IsStartOfFrame);
      ASSERT_NE(sof, std::string::npos);
      // Height and width, big-endian, after length and precision.
      jpeg[sof + 5] = static_cast<char>(30000 >> 8);
      jpeg[sof + 6] = static_cast<char>(30000 & 0xFF);
      jpeg[sof + 7] = static_cast<char>(30000 >> 8);
      jpeg[sof + 8] = static_cast<char>(30000 & 0xFF);
      WriteBytes(path, jpeg);
    }

    bad_files_ = new std::vector<BadFile>{
        {"class_000/img_000000.jpg", v1::EMPTY_FILE},
        {"class_001/img_000001.jpg", v1::TRUNCATED},
        {"class_002/img_000006.jpg", v1::TRUNCATED},
        {"class_003/img_000007.jpg", v1::CORRUPT},
        {"class_002/img_000002.jpg", v1::NOT_JPEG},
        {"class_003/img_000003.gif", v1::UNSUPPORTED_FORMAT},
        {"class_000/img_000008.jpg", v1::TOO_MANY_PIXELS},
        {"class_001/img_000005.jpg", v1::READ_ERROR},  // deleted later
    };
  }
  static void TearDownTestSuite() {
    delete clean_;
    delete bad_;
    delete bad_files_;
  }

  static std::string* clean_;
  static std::string* bad_;
  static std::vector<BadFile>* bad_files_;
};

std::string* BadFilesTest::clean_ = nullptr;
std::string* BadFilesTest::bad_ = nullptr;
std::vector<BadFile>* BadFilesTest::bad_files_ = nullptr;

TEST_F(BadFilesTest, BadSamplesAreSubstitutedDeterministicallyAndCounted) {
  // Sample index -> expected reason and label.
  const std::vector<std::string> order = ImageFolderOrder(*bad_);
  ASSERT_EQ(order.size(), static_cast<size_t>(kImages));
  std::map<uint64_t, v1::SubstitutionReason> expected_reason;
  std::map<uint64_t, int32_t> label;
  for (const BadFile& bad : *bad_files_) {
    const std::string path = *bad_ + "/" + bad.relative_path;
    const auto it = std::find(order.begin(), order.end(), path);
    ASSERT_NE(it, order.end()) << path;
    const uint64_t index = it - order.begin();
    expected_reason[index] = bad.reason;
    label[index] = bad.relative_path[8] - '0';  // class_00K
  }
  ASSERT_EQ(expected_reason.size(), bad_files_->size());

  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<DaemonProcess> first,
      DaemonProcess::Start({"--dataset", "bad=" + *bad_, "--dataset",
                            "clean=" + *clean_, "--workers", "2"}));
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<DaemonProcess> second,
      // Through a read cache smaller than the dataset: bad bytes come out
      // of it exactly as from the disk.
      DaemonProcess::Start({"--dataset", "bad=" + *bad_, "--workers", "1",
                            "--read-cache-bytes", "200000"}));
  // Indexed by both daemons; now unreadable.
  ASSERT_TRUE(fs::remove(*bad_ + "/class_001/img_000005.jpg"));

  v1::Plan plan = TrainPlan("bad", 8, kSize, 4);
  plan.set_job("bad-job");
  v1::Plan clean_plan = plan;
  clean_plan.set_dataset("clean");
  clean_plan.set_job("clean-job");
  constexpr uint64_t kEpochs = 2;
  ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> got,
                           ReadEpochs(first->endpoint(), plan, 0, kEpochs));
  ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> clean,
                           ReadEpochs(first->endpoint(), clean_plan, 0, kEpochs));
  ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> again,
                           ReadEpochs(second->endpoint(), plan, 0, kEpochs));
  // The same substitutes, reasons, details and bytes on another daemon.
  EXPECT_EQ(again, got);
  ASSERT_OK_AND_ASSIGN(v1::ServerStatus cached,
                       GetServerStatus(second->endpoint()));
  EXPECT_LE(cached.read_cache().bytes(), 200000u);
  EXPECT_GT(cached.read_cache().misses(), 0u);
  ASSERT_EQ(got.size(), clean.size());
  ASSERT_EQ(got.size(), kEpochs * kImages / 8);

  // Pixels of (epoch, sample) in the clean run.
  std::map<std::pair<uint64_t, uint64_t>, std::string> clean_pixels;
  const size_t sample_bytes = kSize * kSize * 3;
  for (const BatchRecord& r : clean) {
    EXPECT_TRUE(r.substitutions.empty());
    for (size_t p = 0; p < r.sample_indices.size(); ++p) {
      clean_pixels[{r.epoch, r.sample_indices[p]}] =
          r.pixels.substr(p * sample_bytes, sample_bytes);
    }
  }

  uint64_t substitutions_seen = 0;
  std::map<uint64_t, std::map<uint64_t, int>> seen_per_epoch;
  for (size_t i = 0; i < got.size(); ++i) {
    const BatchRecord& r = got[i];
    SCOPED_TRACE(::testing::PrintToString(r));
    // Order and labels are those of the clean dataset.
    EXPECT_EQ(r.sample_indices, clean[i].sample_indices);
    EXPECT_EQ(r.labels, clean[i].labels);
    std::set<uint32_t> substituted_positions;
    for (const v1::Substitution& sub : r.substitutions) {
      ++substitutions_seen;
      SCOPED_TRACE(sub.ShortDebugString());
      ASSERT_LT(sub.position(), r.sample_indices.size());
      substituted_positions.insert(sub.position());
      EXPECT_EQ(sub.original_index(), r.sample_indices[sub.position()]);
      const auto reason = expected_reason.find(sub.original_index());
      ASSERT_NE(reason, expected_reason.end()) << "a good sample substituted";
      EXPECT_EQ(sub.reason(), reason->second)
          << v1::SubstitutionReason_Name(sub.reason()) << " instead of "
          << v1::SubstitutionReason_Name(reason->second);
      EXPECT_FALSE(sub.detail().empty());
      ++seen_per_epoch[r.epoch][sub.original_index()];
      // A good substitute, not the original; the label stays the
      // original's.
      EXPECT_NE(sub.substitute_index(), sub.original_index());
      EXPECT_LT(sub.substitute_index(), static_cast<uint64_t>(kImages));
      EXPECT_EQ(expected_reason.count(sub.substitute_index()), 0u);
      EXPECT_EQ(r.labels[sub.position()], label[sub.original_index()]);
      // The substitute's pixels are its own (its own crop and flip).
      EXPECT_EQ(r.pixels.substr(sub.position() * sample_bytes, sample_bytes),
                (clean_pixels[{r.epoch, sub.substitute_index()}]));
    }
    for (uint32_t p = 0; p < r.sample_indices.size(); ++p) {
      if (substituted_positions.count(p)) continue;
      EXPECT_EQ(expected_reason.count(r.sample_indices[p]), 0u)
          << "bad sample " << r.sample_indices[p] << " not substituted";
      EXPECT_EQ(r.pixels.substr(p * sample_bytes, sample_bytes),
                clean[i].pixels.substr(p * sample_bytes, sample_bytes))
          << "position " << p;
    }
  }
  // Each bad sample once per epoch.
  for (uint64_t epoch = 0; epoch < kEpochs; ++epoch) {
    std::map<uint64_t, int> want;
    for (const auto& [index, reason] : expected_reason) want[index] = 1;
    EXPECT_EQ(seen_per_epoch[epoch], want) << "epoch " << epoch;
  }
  EXPECT_EQ(substitutions_seen, kEpochs * bad_files_->size());

  // The daemon is up and counted exactly what the headers said.
  ASSERT_OK_AND_ASSIGN(v1::ServerStatus status,
                           GetServerStatus(first->endpoint()));
  EXPECT_EQ(status.samples_substituted(), substitutions_seen);
  const v1::JobStatus* job = FindJob(status, "bad-job");
  ASSERT_NE(job, nullptr);
  EXPECT_EQ(job->substitutions(), substitutions_seen);
  EXPECT_EQ(job->images_sent(), kEpochs * kImages);
  ASSERT_OK_AND_ASSIGN(status, GetServerStatus(second->endpoint()));
  EXPECT_EQ(status.samples_substituted(), substitutions_seen);

  // The CLI's coverage check passes on the bad dataset.
  CommandResult cli = RunCommand(
      {BuiltBinary("client/batchd-client"), "--endpoint", first->endpoint(),
       "--dataset", "bad", "--epochs", "2", "--batch_size", "8", "--size",
       "32", "--verify"});
  EXPECT_EQ(cli.exit_code, 0) << cli.output;
  EXPECT_THAT(cli.output, HasSubstr("verify: epoch 0 ok"));
  EXPECT_THAT(cli.output, HasSubstr("verify: epoch 1 ok"));
  EXPECT_THAT(cli.output, HasSubstr(absl::StrCat("substituted samples ",
                                                substitutions_seen)));

  ASSERT_OK_AND_ASSIGN(status, GetServerStatus(first->endpoint()));
  EXPECT_EQ(status.samples_substituted(), 2 * substitutions_seen);
  EXPECT_EQ(first->Stop(), 0) << first->Log();
  EXPECT_EQ(second->Stop(), 0) << second->Log();
}

// --corrupt-policy decode: truncated and corrupt JPEGs are delivered as
// libjpeg decodes them (no substitution, the same bytes every time) and
// counted in batchd_damaged_samples_decoded_total; other bad files are
// still substituted.
TEST_F(BadFilesTest, DecodePolicyDeliversDamagedJpegsAndCountsThem) {
  const std::string dir = MakeTempDir("metrics");
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<DaemonProcess> daemon,
      DaemonProcess::Start({"--dataset", "bad=" + *bad_, "--workers", "1",
                            "--corrupt-policy", "decode", "--metrics-port",
                            "0", "--metrics-port-file", dir + "/port"}));
  const v1::Plan plan = TrainPlan("bad", 8, kSize, 4);
  ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> got,
                           ReadEpochs(daemon->endpoint(), plan, 0));
  ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> again,
                           ReadEpochs(daemon->endpoint(), plan, 0));
  EXPECT_EQ(again, got);
  int substituted = 0;
  for (const BatchRecord& r : got) {
    for (const v1::Substitution& sub : r.substitutions) {
      ++substituted;
      EXPECT_NE(sub.reason(), v1::TRUNCATED) << sub.ShortDebugString();
      EXPECT_NE(sub.reason(), v1::CORRUPT) << sub.ShortDebugString();
    }
  }
  EXPECT_GT(substituted, 0) << "empty, text, GIF and huge files still are";

  std::ifstream port_file(dir + "/port");
  std::string port;
  port_file >> port;
  const CommandResult page = RunCommand(
      {"/usr/bin/python3", "-c",
       "import sys, urllib.request; "
       "print(urllib.request.urlopen(sys.argv[1]).read().decode())",
       "http://127.0.0.1:" + port + "/metrics"});
  ASSERT_EQ(page.exit_code, 0) << page.output;
  EXPECT_THAT(page.output, HasSubstr("batchd_damaged_samples_decoded_total{"
                                     "reason=\"truncated\"}"));
  EXPECT_THAT(page.output, HasSubstr("batchd_damaged_samples_decoded_total{"
                                     "reason=\"corrupt\"}"));
  EXPECT_EQ(daemon->Stop(), 0) << daemon->Log();
}

}  // namespace
}  // namespace batchd::testing
