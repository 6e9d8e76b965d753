// End-to-end: a remote TAR_SHARDS dataset (shards served over HTTP by
// nginx) through real daemons with --cache-dir. The same images give
// byte-identical batches from the local shards and from the URLs; a
// restart reuses the shard cache and the index sidecar (no request to the
// store); a cache smaller than the dataset holds its bound and still
// serves every byte. The same shards in an S3 server (s3rver, SigV4
// checked) and over HTTPS give the same batches; a wrong secret is a clear
// error naming the dataset, and a secret never shows in logs or pages.
#include <cstdint>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/daemon_process.h"
#include "testing/e2e_helpers.h"
#include "testing/object_servers.h"

namespace batchd::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr int kImages = 40;
constexpr int kClasses = 3;
constexpr uint32_t kSize = 32;

class RemoteShardsE2eTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<std::string> folder = MakeDataset(kImages, kClasses, 7);
    ASSERT_TRUE(folder.ok()) << folder.status();
    shards_ = new std::string(MakeTempDir("remote-shards"));
    fs::remove(*shards_);
    CommandResult prep = RunCommand(
        {BuiltBinary("tools/batchd-prep"), "--quiet", "--threads", "2",
         "--input", *folder, "--out", *shards_, "--shard-size", "6"});
    ASSERT_EQ(prep.exit_code, 0) << prep.output;
    // The shard list nginx serves beside the shards.
    std::ofstream list(*shards_ + "/shards.txt");
    int count = 0;
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(*shards_)) {
      const std::string name = entry.path().filename().string();
      if (absl::EndsWith(name, ".tar")) names.push_back(name);
    }
    std::sort(names.begin(), names.end());
    for (const std::string& name : names) {
      list << name << "\n";
      ++count;
    }
    shard_count_ = count;
    shard_bytes_ = fs::file_size(*shards_ + "/" + names[0]);
    dataset_bytes_ = 0;
    largest_shard_bytes_ = 0;
    for (const std::string& name : names) {
      const uint64_t bytes = fs::file_size(*shards_ + "/" + name);
      dataset_bytes_ += bytes;
      largest_shard_bytes_ = std::max(largest_shard_bytes_, bytes);
    }
  }
  static void TearDownTestSuite() { delete shards_; }

  void SetUp() override {
    absl::StatusOr<std::unique_ptr<ObjectServer>> nginx = StartNginx(*shards_);
    if (absl::IsFailedPrecondition(nginx.status())) {
      GTEST_SKIP() << nginx.status();
    }
    ASSERT_TRUE(nginx.ok()) << nginx.status();
    nginx_ = *std::move(nginx);
    cache_dir_ = MakeTempDir("remote-cache");
  }

  absl::StatusOr<std::unique_ptr<DaemonProcess>> Start(
      uint64_t cache_bytes, std::vector<std::string> more = {}) {
    std::vector<std::string> args = {
        "--dataset", "local=" + *shards_, "--dataset",
        "remote=" + nginx_->url() + "/shards.txt", "--cache-dir", cache_dir_,
        "--cache-bytes", absl::StrCat(cache_bytes), "--workers", "2"};
    args.insert(args.end(), more.begin(), more.end());
    return DaemonProcess::Start(args);
  }

  // Bytes the store has sent since the daemon started.
  static uint64_t StoreBytes(const DaemonProcess& daemon) {
    absl::StatusOr<batchd::v1::ServerStatus> status =
        GetServerStatus(daemon.endpoint());
    EXPECT_TRUE(status.ok()) << status.status();
    return status.ok() ? status->object_store().bytes() : 0;
  }

  static std::string* shards_;
  static int shard_count_;
  static uint64_t shard_bytes_;
  static uint64_t dataset_bytes_;
  static uint64_t largest_shard_bytes_;
  std::unique_ptr<ObjectServer> nginx_;
  std::string cache_dir_;
};

std::string* RemoteShardsE2eTest::shards_ = nullptr;
int RemoteShardsE2eTest::shard_count_ = 0;
uint64_t RemoteShardsE2eTest::shard_bytes_ = 0;
uint64_t RemoteShardsE2eTest::dataset_bytes_ = 0;
uint64_t RemoteShardsE2eTest::largest_shard_bytes_ = 0;

TEST_F(RemoteShardsE2eTest, SameBatchesAsLocalAndARestartReusesTheCache) {
  {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<DaemonProcess> daemon,
                         Start(uint64_t{1} << 30));
    ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> local,
                         ReadEpochs(daemon->endpoint(),
                                    TrainPlan("local", 8, kSize, 3), 0, 2));
    ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> remote,
                         ReadEpochs(daemon->endpoint(),
                                    TrainPlan("remote", 8, kSize, 3), 0, 2));
    ASSERT_EQ(local.size(), 2u * 5u);
    EXPECT_EQ(remote, local);
    for (const BatchRecord& record : remote) {
      EXPECT_TRUE(record.substitutions.empty());
    }
    ASSERT_OK_AND_ASSIGN(batchd::v1::ServerStatus status,
                         GetServerStatus(daemon->endpoint()));
    EXPECT_EQ(status.shard_cache().downloads(), shard_count_) << daemon->Log();
    EXPECT_EQ(status.shard_cache().shards(), shard_count_);
    EXPECT_GT(status.object_store().requests(), 0);
    EXPECT_EQ(daemon->Stop(), 0);
  }
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DaemonProcess> again,
                       Start(uint64_t{1} << 30));
  ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> local,
                       ReadEpochs(again->endpoint(),
                                  EvalPlan("local", 8, kSize, 3), 0, 1));
  ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> remote,
                       ReadEpochs(again->endpoint(),
                                  EvalPlan("remote", 8, kSize, 3), 0, 1));
  EXPECT_EQ(remote, local);
  ASSERT_OK_AND_ASSIGN(batchd::v1::ServerStatus status,
                       GetServerStatus(again->endpoint()));
  // No header read, no download: index and shards came from --cache-dir.
  // The only reads are the shard list and classes.txt, at every start.
  const int small_objects =
      1 + (fs::exists(*shards_ + "/classes.txt") ? 1 : 0);
  EXPECT_EQ(status.object_store().requests(), small_objects);
  EXPECT_EQ(status.shard_cache().downloads(), 0);
  EXPECT_GT(status.shard_cache().hits(), 0);
  EXPECT_THAT(again->Log(), HasSubstr(absl::StrCat(
                                shard_count_, " shards (", shard_count_,
                                " from the sidecar index)")));
}

// Shard by shard (the shard-aware shuffle, window 1) through a cache of two
// and a half of the largest shards, less than the dataset: each shard is
// downloaded at most once, the shards that do not fit are evicted or (the
// plans read them again next epoch, after the ones kept) read by ranges,
// and the bound holds.
TEST_F(RemoteShardsE2eTest, ACacheSmallerThanTheDatasetHoldsItsBound) {
  const uint64_t bound = 2 * largest_shard_bytes_ + largest_shard_bytes_ / 2;
  ASSERT_LT(bound, dataset_bytes_);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DaemonProcess> daemon, Start(bound));
  batchd::v1::Plan local_plan = TrainPlan("local", 4, kSize, 9);
  local_plan.set_shuffle_window_shards(1);
  batchd::v1::Plan remote_plan = TrainPlan("remote", 4, kSize, 9);
  remote_plan.set_shuffle_window_shards(1);
  ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> local,
                       ReadEpochs(daemon->endpoint(), local_plan, 0, 1));
  const uint64_t before = StoreBytes(*daemon);
  ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> remote,
                       ReadEpochs(daemon->endpoint(), remote_plan, 0, 1));
  const uint64_t fetched = StoreBytes(*daemon) - before;
  EXPECT_EQ(remote, local);
  ASSERT_OK_AND_ASSIGN(batchd::v1::ServerStatus status,
                       GetServerStatus(daemon->endpoint()));
  EXPECT_LE(status.shard_cache().disk_bytes(), bound);
  EXPECT_EQ(status.shard_cache().disk_limit_bytes(), bound);
  EXPECT_GT(status.shard_cache().evictions() +
                status.shard_cache().range_choices(),
            0)
      << status.shard_cache().DebugString();
  EXPECT_LE(status.shard_cache().downloads(), shard_count_);
  EXPECT_LE(fetched, dataset_bytes_ * 12 / 10)
      << status.shard_cache().DebugString();
  uint64_t on_disk = 0;
  for (const auto& entry : fs::directory_iterator(cache_dir_ + "/shards")) {
    on_disk += fs::file_size(entry.path());
  }
  EXPECT_LE(on_disk, bound);
}

// The per-sample shuffle through a cache of two of the seven shards: every
// shard is read now and then all epoch long, so whole shards would be
// fetched again and again; the plans' forecast reads member ranges instead,
// about the dataset's bytes, and the batches are those of local disk. A
// request is weighed as half a member, as S3's default weighs against
// ImageNet's members.
TEST_F(RemoteShardsE2eTest, PerSampleShuffleThroughASmallCacheReadsRanges) {
  const uint64_t member_bytes = dataset_bytes_ / kImages;
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<DaemonProcess> daemon,
      Start(2 * shard_bytes_,
            {"--http-request-cost-bytes", absl::StrCat(member_bytes / 2)}));
  ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> local,
                       ReadEpochs(daemon->endpoint(),
                                  TrainPlan("local", 4, kSize, 9), 0, 1));
  const uint64_t before = StoreBytes(*daemon);
  ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> remote,
                       ReadEpochs(daemon->endpoint(),
                                  TrainPlan("remote", 4, kSize, 9), 0, 1));
  const uint64_t fetched = StoreBytes(*daemon) - before;
  EXPECT_EQ(remote, local);
  ASSERT_OK_AND_ASSIGN(batchd::v1::ServerStatus status,
                       GetServerStatus(daemon->endpoint()));
  std::printf("per-sample shuffle, cache of 2 of %d shards: fetched %.2fx the "
              "dataset; %lu range and %lu whole choices\n",
              shard_count_, static_cast<double>(fetched) / dataset_bytes_,
              status.shard_cache().range_choices(),
              status.shard_cache().whole_choices());
  EXPECT_GT(status.shard_cache().range_choices(), 0);
  EXPECT_LE(fetched, dataset_bytes_ * 12 / 10);
  EXPECT_LE(status.shard_cache().disk_bytes(), 2 * shard_bytes_);
}

class S3ShardsE2eTest : public RemoteShardsE2eTest {
 protected:
  void SetUp() override {
    RemoteShardsE2eTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    absl::StatusOr<std::unique_ptr<ObjectServer>> s3 =
        StartS3rver(MakeTempDir("s3"), {"bkt"});
    ASSERT_TRUE(s3.ok()) << s3.status();
    s3_ = *std::move(s3);
    for (const auto& entry : fs::directory_iterator(*shards_)) {
      const std::string name = entry.path().filename().string();
      if (!absl::EndsWith(name, ".tar") && name != "classes.txt") continue;
      std::ifstream in(entry.path(), std::ios::binary);
      const std::string bytes((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
      ASSERT_OK(S3PutObject(s3_->url(), "bkt", "train/" + name, bytes));
    }
  }

  // A config file with the S3 dataset (keys from a credentials file with
  // `secret`) and the HTTPS one (brace range, nginx's CA).
  std::string WriteConfig(const std::string& secret) {
    const std::string dir = MakeTempDir("s3-config");
    std::ofstream(dir + "/credentials")
        << "[default]\naws_access_key_id = " << kS3rverAccessKey
        << "\naws_secret_access_key = " << secret << "\n";
    char last[16];
    std::snprintf(last, sizeof(last), "%06d", shard_count_ - 1);
    std::ofstream(dir + "/batchd.conf")
        << "datasets { name: \"s3\" path: \"s3://bkt/train/\" format: "
           "TAR_SHARDS endpoint: \""
        << s3_->url() << "\" region: \"" << kS3rverRegion
        << "\" credentials_file: \"" << dir << "/credentials\" }\n"
        << "datasets { name: \"https\" path: \"" << nginx_->https_url()
        << "/shard-{000000.." << last << "}.tar\" format: TAR_SHARDS "
        << "ca_file: \"" << nginx_->ca_file() << "\" }\n";
    return dir + "/batchd.conf";
  }

  std::unique_ptr<ObjectServer> s3_;
};

TEST_F(S3ShardsE2eTest, S3AndHttpsGiveTheLocalBatches) {
  const std::string dir = MakeTempDir("s3-metrics");
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<DaemonProcess> daemon,
      DaemonProcess::Start({"--dataset", "local=" + *shards_, "--config",
                            WriteConfig(kS3rverSecretKey), "--cache-dir",
                            cache_dir_, "--workers", "2", "--metrics-port",
                            "0", "--metrics-port-file",
                            dir + "/metrics-port"}));
  ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> local,
                       ReadEpochs(daemon->endpoint(),
                                  TrainPlan("local", 8, kSize, 5), 0, 1));
  for (const char* dataset : {"s3", "https"}) {
    ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> remote,
                         ReadEpochs(daemon->endpoint(),
                                    TrainPlan(dataset, 8, kSize, 5), 0, 1));
    EXPECT_EQ(remote, local) << dataset;
  }
  std::ifstream port_file(dir + "/metrics-port");
  std::string port;
  port_file >> port;
  const CommandResult metrics = RunCommand(
      {"/usr/bin/curl", "--silent", "--show-error", "http://127.0.0.1:" + port +
                                                "/metrics"});
  ASSERT_EQ(metrics.exit_code, 0) << metrics.output;
  EXPECT_THAT(metrics.output, HasSubstr("batchd_object_store_requests_total"));
  EXPECT_THAT(metrics.output, ::testing::Not(HasSubstr(kS3rverSecretKey)));
  EXPECT_THAT(daemon->Log(), ::testing::Not(HasSubstr(kS3rverSecretKey)));
}

TEST_F(S3ShardsE2eTest, AWrongSecretIsAClearErrorWithoutTheSecret) {
  const std::string wrong = "wrong-secret-0d5b";
  const CommandResult run = RunCommand(
      {BuiltBinary("server/batchd"), "--host", "127.0.0.1", "--port", "0",
       "--config", WriteConfig(wrong)});
  EXPECT_NE(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, HasSubstr("'s3'"));
  EXPECT_THAT(run.output, HasSubstr("403"));
  EXPECT_THAT(run.output, HasSubstr("credentials"));
  EXPECT_THAT(run.output, ::testing::Not(HasSubstr(wrong)));
  std::printf("%s", run.output.c_str());
}

}  // namespace
}  // namespace batchd::testing
