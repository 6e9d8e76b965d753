// End-to-end: batchd-top (and `batchd top`) renders one frame of live
// daemons with --once: the daemons, their jobs, and the unreachable ones,
// within an 80x24 terminal; for remote shards, the shard cache's line,
// which /metrics and the live page's /api/timeline carry too.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/daemon_process.h"
#include "testing/e2e_helpers.h"
#include "testing/object_servers.h"

namespace batchd::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

TEST(TopE2eTest, OnceRendersLiveDaemonsAndTheirJobs) {
  ASSERT_OK_AND_ASSIGN(std::string dataset, MakeDataset(24, 3, 2));
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<DaemonProcess> a,
      DaemonProcess::Start({"--dataset", "d=" + dataset, "--workers", "2"}));
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<DaemonProcess> b,
      DaemonProcess::Start({"--dataset", "d=" + dataset, "--workers", "1"}));
  v1::Plan plan = EvalPlan("d", 8, 32, 1);
  plan.set_job("top-job");
  ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> records,
                           ReadEpochs(a->endpoint(), plan, 0));
  ASSERT_EQ(records.size(), 3u);

  const CommandResult top = RunCommand(
      {BuiltBinary("client/batchd-top"), "--once",
       "--endpoint=" + a->endpoint() + "," + b->endpoint() + ",localhost:1",
       "--width=80", "--height=24"});
  ASSERT_EQ(top.exit_code, 0) << top.output;
  const std::vector<std::string> lines = Lines(top.output);
  ASSERT_LE(lines.size(), 24u);
  for (const std::string& line : lines) {
    EXPECT_LE(line.size(), 80u) << line;
    EXPECT_EQ(line.find('\x1b'), std::string::npos) << "escape in --once";
  }
  EXPECT_EQ(lines[0], "batchd top: 3 daemons, 2 reachable");
  EXPECT_THAT(top.output, HasSubstr("\n" + a->endpoint() + " "));
  EXPECT_THAT(top.output, HasSubstr("\n" + b->endpoint() + " "));
  EXPECT_THAT(top.output, HasSubstr("\nlocalhost:1            unreachable: "));
  // The job that streamed from daemon a: 3 batches, no substitutions.
  bool found = false;
  for (const std::string& line : lines) {
    if (absl::StartsWith(line, "  top-job ")) {
      found = true;
      const std::vector<std::string> fields =
          absl::StrSplit(line, ' ', absl::SkipEmpty());
      ASSERT_EQ(fields.size(), 8u) << line;
      EXPECT_EQ(fields[4], "3") << line;  // BATCHES
      EXPECT_EQ(fields[5], "0") << line;  // SUBST
      // Its stream has closed: no trainer reports count any more.
      EXPECT_EQ(fields[6], "-") << line;  // WAIT
      EXPECT_EQ(fields[7], "-") << line;  // DEMAND
    }
  }
  EXPECT_TRUE(found) << top.output;
  EXPECT_THAT(top.output, HasSubstr("ms/img read "));

  // `batchd top` is the same tool.
  const CommandResult via_daemon = RunCommand(
      {BuiltBinary("server/batchd"), "top", "--once",
       "--endpoint=" + a->endpoint()});
  ASSERT_EQ(via_daemon.exit_code, 0) << via_daemon.output;
  EXPECT_THAT(via_daemon.output,
              StartsWith("batchd top: 1 daemon, 1 reachable\n"));
}

TEST(TopE2eTest, OnceWithNoDaemonReachableFails) {
  const CommandResult top = RunCommand({BuiltBinary("client/batchd-top"),
                                        "--once", "--endpoint=localhost:1"});
  EXPECT_EQ(top.exit_code, 1);
  EXPECT_THAT(top.output, HasSubstr("unreachable"));
}

TEST(TopE2eTest, LiveModeRedrawsInPlace) {
  ASSERT_OK_AND_ASSIGN(std::string dataset, MakeDataset(8, 2, 3));
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<DaemonProcess> daemon,
      DaemonProcess::Start({"--dataset", "d=" + dataset, "--workers", "1"}));
  // Two frames (timeout stops it), not a terminal: the 80x24 default.
  const CommandResult top = RunCommand(
      {"/usr/bin/timeout", "--preserve-status", "-s", "INT", "1.5",
       BuiltBinary("client/batchd-top"), "--interval=1",
       "--endpoint=" + daemon->endpoint()});
  EXPECT_EQ(top.exit_code, 0) << top.output;
  EXPECT_THAT(top.output, StartsWith("\x1b[2J\x1b[H"));
  // The second frame homes the cursor and redraws over the first.
  EXPECT_THAT(top.output.substr(4), HasSubstr("\x1b[Hbatchd top: 1 daemon"));
  EXPECT_THAT(top.output, HasSubstr("\x1b[K\n"));
}

// A remote dataset (4 tar shards over nginx) through a cache of two of
// them, one shuffled epoch: top shows the cache's hit rate, amplification,
// choices and prefetch depth; /metrics has the series they are computed
// from, and /api/timeline the same line for the live page.
TEST(TopE2eTest, ShowsTheShardCacheOfRemoteShards) {
  namespace fs = std::filesystem;
  ASSERT_OK_AND_ASSIGN(std::string folder, MakeDataset(24, 3, 5));
  const std::string shards = MakeTempDir("top-shards");
  fs::remove(shards);
  const CommandResult prep = RunCommand(
      {BuiltBinary("tools/batchd-prep"), "--quiet", "--threads", "2",
       "--input", folder, "--out", shards, "--shard-size", "6"});
  ASSERT_EQ(prep.exit_code, 0) << prep.output;
  std::vector<std::string> names;
  uint64_t largest = 0;
  for (const auto& entry : fs::directory_iterator(shards)) {
    if (!absl::EndsWith(entry.path().filename().string(), ".tar")) continue;
    names.push_back(entry.path().filename().string());
    largest = std::max<uint64_t>(largest, fs::file_size(entry.path()));
  }
  std::sort(names.begin(), names.end());
  ASSERT_EQ(names.size(), 4u);
  {
    std::ofstream list(shards + "/shards.txt");
    for (const std::string& name : names) list << name << "\n";
  }
  absl::StatusOr<std::unique_ptr<ObjectServer>> nginx = StartNginx(shards);
  if (absl::IsFailedPrecondition(nginx.status())) {
    GTEST_SKIP() << nginx.status();
  }
  ASSERT_TRUE(nginx.ok()) << nginx.status();
  const std::string dir = MakeTempDir("top-cache");
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<DaemonProcess> daemon,
      DaemonProcess::Start(
          {"--dataset", "remote=" + (*nginx)->url() + "/shards.txt",
           "--cache-dir", dir + "/cache", "--cache-bytes",
           absl::StrCat(2 * largest), "--workers", "2", "--metrics-port",
           "0", "--metrics-port-file", dir + "/port"}));
  ASSERT_OK_AND_ASSIGN(
      std::vector<BatchRecord> records,
      ReadEpochs(daemon->endpoint(), TrainPlan("remote", 4, 32, 3), 0));
  ASSERT_EQ(records.size(), 6u);
  ASSERT_OK_AND_ASSIGN(batchd::v1::ServerStatus status,
                       GetServerStatus(daemon->endpoint()));
  const batchd::v1::ShardCacheStatus& cache = status.shard_cache();
  ASSERT_GT(cache.served_bytes(), 0u) << cache.DebugString();

  // Wide: one line under the verdict, its figures those of GetStatus.
  CommandResult top = RunCommand({BuiltBinary("client/batchd-top"), "--once",
                                  "--endpoint=" + daemon->endpoint(),
                                  "--width=200", "--height=40"});
  ASSERT_EQ(top.exit_code, 0) << top.output;
  std::string line;
  for (const std::string& l : Lines(top.output)) {
    if (absl::StartsWith(l, "  shard cache: ")) line = l;
  }
  ASSERT_FALSE(line.empty()) << top.output;
  std::printf("top: %s\n", line.c_str());
  EXPECT_THAT(line, HasSubstr(absl::StrCat(
                        " whole / ", cache.range_choices(), " ranges; ")))
      << line;
  EXPECT_THAT(line, HasSubstr("x served, ")) << line;
  EXPECT_THAT(line, HasSubstr(" reads ahead (")) << line;
  EXPECT_THAT(line, HasSubstr(", the plans read ")) << line;
  // 80 columns: wrapped, nothing past the width.
  top = RunCommand({BuiltBinary("client/batchd-top"), "--once",
                    "--endpoint=" + daemon->endpoint(), "--width=80",
                    "--height=40"});
  ASSERT_EQ(top.exit_code, 0) << top.output;
  for (const std::string& l : Lines(top.output)) {
    EXPECT_LE(l.size(), 80u) << l;
  }
  EXPECT_THAT(top.output, HasSubstr("\n  shard cache: hit "));
  EXPECT_THAT(top.output, HasSubstr("\n    prefetch "));

  // /metrics: the series of the hit rate and the amplification.
  const std::string base = "http://127.0.0.1:" + ReadPortFile(dir + "/port");
  ASSERT_OK_AND_ASSIGN(Page page, ScrapeWithPrometheusParser(base + "/metrics"));
  for (const char* name :
       {"batchd_shard_cache_served_bytes_total",
        "batchd_shard_cache_range_bytes_total",
        "batchd_shard_cache_forecast_shard_bytes",
        "batchd_shard_cache_forecast_reads",
        "batchd_shard_cache_prefetches_in_flight",
        "batchd_shard_cache_prefetch_depth_reads"}) {
    EXPECT_EQ(page.count(absl::StrCat(name, "{}")), 1u) << name;
  }
  EXPECT_GE(page["batchd_shard_cache_served_bytes_total{}"],
            static_cast<double>(cache.served_bytes()));
  EXPECT_GT(page["batchd_shard_cache_downloaded_bytes_total{}"] +
                page["batchd_shard_cache_range_bytes_total{}"],
            0);

  // The live page's data: the newest point's line (a point a second).
  static constexpr char kGet[] =
      "import sys, urllib.request as u\n"
      "print(u.urlopen(sys.argv[1], timeout=10).read().decode())\n";
  std::string timeline;
  for (int i = 0; i < 50; ++i) {
    timeline = RunCommand({"/usr/bin/python3", "-c", kGet,
                           base + "/api/timeline"})
                   .output;
    if (absl::StrContains(timeline, "\"shard_cache\":{")) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_THAT(timeline, HasSubstr("\"shard_cache\":{\"t\":"));
  EXPECT_THAT(timeline, HasSubstr("\"line\":\"shard cache: "));
}

}  // namespace
}  // namespace batchd::testing
