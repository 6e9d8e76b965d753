// A store that turns hostile after indexing, against a real daemon and a
// real trainer's Loader: shards served by nginx through HttpFaultProxy
// (testing/http_fault_proxy.h), indexed cleanly, then
//   (a) every object changes (412 to If-Match): the requests and bytes the
//       store serves after the change stay bounded, one log line a shard;
//   (b) the store ignores Range: it is named in the log, and its shards
//       are read whole through the shard cache (no sample lost); without a
//       cache the substitutions name the store and --cache-bytes;
//   (c) a 1 byte/s drip and (d) endless bodies on member reads: the
//       trainer's error names the store within a bounded time, and the
//       daemon logged it.
// The daemon runs with a small low-speed limit (1000 B/s over 2 s) and the
// Loader with short stall and unavailable timeouts, so each case takes
// seconds (RELIABILITY.md, "Resource model").
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/loader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/daemon_process.h"
#include "testing/e2e_helpers.h"
#include "testing/http_fault_proxy.h"
#include "testing/object_servers.h"
#include "testing/status_matchers.h"

namespace batchd {
namespace {

namespace fs = std::filesystem;
using ::batchd::testing::BatchRecord;
using ::batchd::testing::DaemonProcess;
using ::batchd::testing::HttpFault;
using ::batchd::testing::HttpFaultProxy;
using ::batchd::testing::MakeTempDir;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr int kImages = 48;
constexpr int kClasses = 3;
constexpr int kShardImages = 6;
constexpr uint32_t kSize = 32;
constexpr uint32_t kBatch = 8;

int CountLines(const std::string& log, const std::string& text) {
  int n = 0;
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    if (absl::StrContains(line, text)) ++n;
  }
  return n;
}

class StoreFaultsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<std::string> folder =
        testing::MakeDataset(kImages, kClasses, 11);
    ASSERT_TRUE(folder.ok()) << folder.status();
    shards_ = new std::string(MakeTempDir("store-faults-shards"));
    fs::remove(*shards_);
    testing::CommandResult prep = testing::RunCommand(
        {testing::BuiltBinary("tools/batchd-prep"), "--quiet", "--threads",
         "2", "--input", *folder, "--out", *shards_, "--shard-size",
         absl::StrCat(kShardImages)});
    ASSERT_EQ(prep.exit_code, 0) << prep.output;
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(*shards_)) {
      const std::string name = entry.path().filename().string();
      if (absl::EndsWith(name, ".tar")) names.push_back(name);
    }
    std::sort(names.begin(), names.end());
    std::ofstream list(*shards_ + "/shards.txt");
    for (const std::string& name : names) list << name << "\n";
    shard_count_ = static_cast<int>(names.size());
  }
  static void TearDownTestSuite() { delete shards_; }

  void SetUp() override {
    absl::StatusOr<std::unique_ptr<testing::ObjectServer>> nginx =
        testing::StartNginx(*shards_);
    if (absl::IsFailedPrecondition(nginx.status())) {
      GTEST_SKIP() << nginx.status();
    }
    ASSERT_TRUE(nginx.ok()) << nginx.status();
    nginx_ = *std::move(nginx);
    absl::StatusOr<std::unique_ptr<HttpFaultProxy>> proxy =
        HttpFaultProxy::Start(nginx_->port());
    ASSERT_TRUE(proxy.ok()) << proxy.status();
    proxy_ = *std::move(proxy);
  }

  // A daemon serving "remote" (the shard list through the proxy), indexed
  // before any fault.
  std::unique_ptr<DaemonProcess> StartDaemon(bool cache) {
    std::vector<std::string> args = {
        "--dataset", "remote=" + proxy_->url() + "/shards.txt", "--workers",
        "2", "--remote-low-speed-bytes-per-s", "1000",
        "--remote-low-speed-seconds", "2"};
    if (cache) {
      args.insert(args.end(), {"--cache-dir", MakeTempDir("store-faults-cache"),
                               "--cache-bytes", absl::StrCat(1 << 30)});
    }
    absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon =
        DaemonProcess::Start(args);
    EXPECT_TRUE(daemon.ok()) << daemon.status();
    return daemon.ok() ? *std::move(daemon) : nullptr;
  }

  // Reads one epoch with a Loader whose stall and unavailable timeouts are
  // `timeout`; the first error, or the batches.
  absl::StatusOr<std::vector<BatchRecord>> ReadEpoch(
      const DaemonProcess& daemon, absl::Duration timeout) {
    client::LoaderOptions options;
    options.endpoint = daemon.endpoint();
    options.plan = testing::TrainPlan("remote", kBatch, kSize, 3);
    options.last_epoch = 0;
    options.stall_timeout = timeout;
    options.unavailable_timeout = timeout;
    absl::StatusOr<std::unique_ptr<client::Loader>> loader =
        client::Loader::Create(std::move(options));
    if (!loader.ok()) return loader.status();
    absl::Status started = (*loader)->StartEpoch(0, 0);
    if (!started.ok()) return started;
    return testing::ReadFrom(**loader);
  }

  static std::string* shards_;
  static int shard_count_;
  std::unique_ptr<testing::ObjectServer> nginx_;
  std::unique_ptr<HttpFaultProxy> proxy_;
};

std::string* StoreFaultsTest::shards_ = nullptr;
int StoreFaultsTest::shard_count_ = 0;

// (a) Every object changes after indexing: each shard costs the store one
// 412 (a few more where reads of it were already in flight), with no body,
// and one log line; then its samples are substituted without a request.
TEST_F(StoreFaultsTest, ChangedObjectsCostBoundedRequestsAndBytes) {
  std::unique_ptr<DaemonProcess> daemon = StartDaemon(/*cache=*/false);
  ASSERT_NE(daemon, nullptr);
  proxy_->Always(HttpFault::kObjectChanged);
  const int requests_before = proxy_->requests();
  const uint64_t bytes_before = proxy_->bytes_sent();
  const absl::Time start = absl::Now();
  absl::StatusOr<std::vector<BatchRecord>> batches =
      ReadEpoch(*daemon, absl::Seconds(20));
  const absl::Duration took = absl::Now() - start;
  ASSERT_TRUE(batches.ok()) << batches.status();
  ASSERT_EQ(batches->size(), kImages / kBatch);
  int substituted = 0;
  for (const BatchRecord& batch : *batches) {
    substituted += static_cast<int>(batch.substitutions.size());
  }
  EXPECT_EQ(substituted, kImages);
  const int requests = proxy_->requests() - requests_before;
  const uint64_t bytes = proxy_->bytes_sent() - bytes_before;
  // Without the mark, each of the 48 samples and its 8 substitutes asks
  // the store (432 requests an epoch; 2,280 in 20 s before the fix).
  // With it, a shard's reads already in flight when its first 412 came
  // back at most: two workers, two readers each.
  EXPECT_LE(requests, shard_count_ * 4);
  EXPECT_LE(bytes, uint64_t(requests) * 256);
  const std::string log = daemon->Log();
  EXPECT_EQ(CountLines(log, "changed since it was indexed; it is not fetched "
                            "again"),
            shard_count_);
  std::cout << "changed objects: " << requests << " requests, " << bytes
            << " bytes from the store after the change (" << shard_count_
            << " shards), epoch in " << absl::FormatDuration(took) << "\n";
}

// (b) A store that ignores Range is named, and read whole through the cache:
// every sample arrives. Without a cache the substitutions say what to do.
TEST_F(StoreFaultsTest, AStoreThatIgnoresRangeIsNamedAndReadWhole) {
  {
    std::unique_ptr<DaemonProcess> daemon = StartDaemon(/*cache=*/true);
    ASSERT_NE(daemon, nullptr);
    proxy_->Always(HttpFault::kIgnoreRange);
    const uint64_t bytes_before = proxy_->bytes_sent();
    absl::StatusOr<std::vector<BatchRecord>> batches =
        ReadEpoch(*daemon, absl::Seconds(20));
    ASSERT_TRUE(batches.ok()) << batches.status();
    ASSERT_EQ(batches->size(), kImages / kBatch);
    for (const BatchRecord& batch : *batches) {
      EXPECT_TRUE(batch.substitutions.empty());
    }
    const uint64_t bytes = proxy_->bytes_sent() - bytes_before;
    uint64_t dataset_bytes = 0;
    for (const auto& entry : fs::directory_iterator(*shards_)) {
      if (absl::EndsWith(entry.path().string(), ".tar")) {
        dataset_bytes += fs::file_size(entry.path());
      }
    }
    // Shards no larger than the cache's download chunk (8 MiB) are fetched
    // by one read of the whole object, which such a store serves: it may
    // never be caught ignoring a range here. When it is, it is named once.
    EXPECT_LE(CountLines(daemon->Log(), "the store ignores Range: answered "
                                        "200 with the whole object"),
              1);
    // Each shard once whole, plus the answers cut at their headers.
    EXPECT_LE(bytes, 3 * dataset_bytes);
    std::cout << "ignored Range, with a cache: " << bytes
              << " bytes from the store for a " << dataset_bytes
              << "-byte dataset\n";
  }
  proxy_->Always(HttpFault::kNone);
  std::unique_ptr<DaemonProcess> daemon = StartDaemon(/*cache=*/false);
  ASSERT_NE(daemon, nullptr);
  proxy_->Always(HttpFault::kIgnoreRange);
  absl::StatusOr<std::vector<BatchRecord>> batches =
      ReadEpoch(*daemon, absl::Seconds(20));
  ASSERT_TRUE(batches.ok()) << batches.status();
  ASSERT_FALSE(batches->empty());
  ASSERT_FALSE(batches->front().substitutions.empty());
  EXPECT_THAT(batches->front().substitutions.front().detail(),
              HasSubstr("--cache-bytes"));
  EXPECT_THAT(batches->front().substitutions.front().detail(),
              HasSubstr("the store ignores Range"));
  EXPECT_EQ(CountLines(daemon->Log(), "the store ignores Range: answered 200 "
                                      "with the whole object"),
            1);
}

// (c) and (d): a store that drips or sends endless bodies after indexing.
// The trainer's error names the store (not "no daemon was up") within a
// bounded time; the daemon logged the store's faults, and its status
// (what its verdict reads) lists them.
TEST_F(StoreFaultsTest, ADripOrAnEndlessBodyIsNamedInTheTrainersError) {
  struct Case {
    HttpFault fault;
    const char* name;
    const char* says;  // in the trainer's error and the daemon's log
  };
  for (const Case& c :
       {Case{HttpFault::kDrip, "drip", "is slow"},
        Case{HttpFault::kEndlessBody, "endless body", "is failing"}}) {
    SCOPED_TRACE(c.name);
    proxy_->Always(HttpFault::kNone);
    std::unique_ptr<DaemonProcess> daemon = StartDaemon(/*cache=*/false);
    ASSERT_NE(daemon, nullptr);
    proxy_->SetDrip(absl::Seconds(1));
    proxy_->Always(c.fault);
    const absl::Time start = absl::Now();
    absl::StatusOr<std::vector<BatchRecord>> batches =
        ReadEpoch(*daemon, absl::Seconds(5));
    const absl::Duration took = absl::Now() - start;
    ASSERT_FALSE(batches.ok());
    const std::string error(batches.status().message());
    EXPECT_THAT(error, HasSubstr(absl::StrCat(
                           "the object store for dataset \"remote\" ", c.says)))
        << error;
    EXPECT_THAT(error, HasSubstr(proxy_->url()));
    EXPECT_THAT(error, Not(HasSubstr("no batchd daemon was up")));
    // Stall (5 s) plus unavailable (5 s), plus the asking.
    EXPECT_LT(took, absl::Seconds(25));
    absl::StatusOr<batchd::v1::ServerStatus> status =
        testing::GetServerStatus(daemon->endpoint());
    ASSERT_TRUE(status.ok()) << status.status();
    ASSERT_GT(status->object_store().recent_faults_size(), 0);
    EXPECT_EQ(status->object_store().recent_faults(0).dataset(), "remote");
    const std::string log = daemon->Log();
    const int lines =
        CountLines(log, absl::StrCat("batchd: the object store ", c.says));
    EXPECT_GE(lines, 1) << log;
    // Rate-limited: one line per 10 s per dataset.
    EXPECT_LE(lines, 1 + absl::ToInt64Seconds(took) / 10 + 1);
    std::cout << c.name << ": the trainer failed after "
              << absl::FormatDuration(took) << ", " << lines
              << " daemon log lines: " << error << "\n";
  }
}

}  // namespace
}  // namespace batchd
