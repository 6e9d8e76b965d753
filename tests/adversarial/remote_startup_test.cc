// A hostile object store against a real daemon's start-up: a listing that
// repeats its continuation token, a listing larger than --max-shards, a
// store too slow for the start-up to end before SIGTERM, a redirect to
// another port, and a shard list naming other schemes. Each attack must
// end in a bounded time with an error that names the dataset, and the
// daemon must stay within its bounds (RELIABILITY.md, "Resource model").
//
// The S3 "store" is HttpFaultProxy answering ListObjectsV2 itself
// (testing/http_fault_proxy.h); nothing is forwarded to an upstream.
#include <signal.h>
#include <stdlib.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/daemon_process.h"
#include "testing/e2e_helpers.h"
#include "testing/http_fault_proxy.h"
#include "testing/object_servers.h"
#include "testing/status_matchers.h"

namespace batchd {
namespace {

using ::batchd::testing::DaemonProcess;
using ::batchd::testing::HttpFault;
using ::batchd::testing::HttpFaultProxy;
using ::batchd::testing::MakeTempDir;
using ::batchd::testing::ProcStatusBytes;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr uint64_t kMiB = uint64_t{1} << 20;

// A port nothing listens on: the proxy's upstream, never used because
// every request here is answered by the proxy itself.
constexpr int kNoUpstream = 9;

// The daemon's log lines that contain `text`.
int CountLines(const std::string& log, const std::string& text) {
  int n = 0;
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    if (line.find(text) != absl::string_view::npos) ++n;
  }
  return n;
}

// What a daemon did from its launch to its exit.
struct StartupRun {
  int exit_code = -1;         // -1: still running at the timeout (killed)
  absl::Duration wall;        // launch to exit
  uint64_t peak_rss = 0;      // the largest VmRSS sampled, bytes
  std::string log;
};

// Launches the daemon with `args`, samples its RSS every 20 ms, and waits
// for it to exit; after `sigterm_after` (if set) it is sent SIGTERM, and
// `*exit_after_sigterm` gets the time from the signal to the exit. Killed
// after `timeout`.
StartupRun LaunchAndWait(const std::vector<std::string>& args,
                  absl::Duration timeout,
                  absl::Duration sigterm_after = absl::InfiniteDuration(),
                  absl::Duration* exit_after_sigterm = nullptr) {
  StartupRun run;
  absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon =
      DaemonProcess::Launch(args);
  EXPECT_TRUE(daemon.ok()) << daemon.status();
  if (!daemon.ok()) return run;
  const absl::Time start = absl::Now();
  absl::Time signalled = absl::InfiniteFuture();
  while (true) {
    run.peak_rss =
        std::max(run.peak_rss, ProcStatusBytes((*daemon)->pid(), "VmRSS"));
    absl::StatusOr<int> code =
        (*daemon)->WaitForExit(absl::Milliseconds(20));
    if (code.ok()) {
      run.exit_code = *code;
      break;
    }
    const absl::Time now = absl::Now();
    if (signalled == absl::InfiniteFuture() && now - start >= sigterm_after) {
      (*daemon)->Terminate();
      signalled = now;
    }
    if (now - start > timeout) {
      run.log = (*daemon)->Log();
      (*daemon)->Kill();
      run.wall = absl::Now() - start;
      return run;
    }
  }
  run.wall = absl::Now() - start;
  if (exit_after_sigterm != nullptr && signalled != absl::InfiniteFuture()) {
    *exit_after_sigterm = absl::Now() - signalled;
  }
  run.log = (*daemon)->Log();
  return run;
}

void Report(const std::string& attack, const StartupRun& run) {
  std::cout << attack << ": exit " << run.exit_code << " after "
            << absl::FormatDuration(run.wall) << ", peak RSS "
            << run.peak_rss / kMiB << " MiB, "
            << CountLines(run.log, "batchd:") << " log lines\n";
}

class RemoteStartupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<HttpFaultProxy>> proxy =
        HttpFaultProxy::Start(kNoUpstream);
    ASSERT_TRUE(proxy.ok()) << proxy.status();
    store_ = *std::move(proxy);
    // The daemon inherits these: s3:// datasets at the proxy, path style.
    setenv("AWS_ENDPOINT_URL", store_->url().c_str(), 1);
    setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "secret-for-the-test", 1);
  }
  void TearDown() override {
    unsetenv("AWS_ENDPOINT_URL");
    unsetenv("AWS_ACCESS_KEY_ID");
    unsetenv("AWS_SECRET_ACCESS_KEY");
  }

  std::unique_ptr<HttpFaultProxy> store_;
};

// Every page says IsTruncated with the same NextContinuationToken. Before:
// 33,555 pages in 79 s, RSS 4.1 GB, not one log line. Now: two pages and
// an error naming the dataset.
TEST_F(RemoteStartupTest, RepeatingContinuationTokenIsRefusedWithBoundedRss) {
  store_->SetListing(/*keys=*/0, /*page_keys=*/1000, absl::ZeroDuration());
  store_->Always(HttpFault::kRepeatingListing);
  const StartupRun run = LaunchAndWait({"--dataset", "looping=s3://bkt/train/"},
                                /*timeout=*/absl::Seconds(30));
  Report("repeating token", run);
  EXPECT_EQ(run.exit_code, 2) << run.log;
  EXPECT_THAT(run.log, HasSubstr("dataset \"looping\""));
  EXPECT_THAT(run.log, HasSubstr("continuation token \"same-token\" a second "
                                 "time"));
  EXPECT_EQ(store_->requests(), 2);
  EXPECT_LT(run.wall, absl::Seconds(10));
#if BATCHD_CHECK_RSS
  EXPECT_LT(run.peak_rss, 128 * kMiB);
#endif
}

// 200,000 keys, 1,000 a page, each page 40 ms: progress lines while it
// lists, and the bound's error with --max-shards 150000 (151 pages, at
// least 6 s).
TEST_F(RemoteStartupTest, LongListingLogsProgressAndStopsAtMaxShards) {
  store_->SetListing(/*keys=*/200000, /*page_keys=*/1000,
                     absl::Milliseconds(40));
  store_->Always(HttpFault::kListing);
  const StartupRun run = LaunchAndWait(
      {"--dataset", "big=s3://bkt/train/", "--max-shards", "150000"},
      /*timeout=*/absl::Seconds(60));
  Report("200,000-key listing, --max-shards 150000", run);
  EXPECT_EQ(run.exit_code, 2) << run.log;
  EXPECT_THAT(run.log, HasSubstr("dataset \"big\""));
  EXPECT_THAT(run.log, HasSubstr("went past 150000 keys (151 pages)"));
  EXPECT_THAT(run.log, HasSubstr("--max-shards"));
  EXPECT_EQ(store_->requests(), 151);
  // A line every 5 s: "dataset 'big': listing s3://bkt/train/: N keys".
  const int progress = CountLines(run.log, "listing s3://bkt/train/: ");
  EXPECT_GE(progress, 1) << run.log;
  EXPECT_LE(progress, 1 + absl::ToInt64Seconds(run.wall) / 5) << run.log;
  EXPECT_THAT(run.log, HasSubstr(" keys/s, "));
#if BATCHD_CHECK_RSS
  EXPECT_LT(run.peak_rss, 256 * kMiB);
#endif
}

// A store that answers each page after 2 s: SIGTERM 2.5 s into the
// start-up ends it, within --drain-deadline (3 s), by cancelling the
// transfer in flight. Before: the daemon went on listing, still running
// 60 s after the signal.
TEST_F(RemoteStartupTest, SigtermDuringASlowStartupIsHonoured) {
  store_->SetListing(/*keys=*/1000000, /*page_keys=*/1000,
                     absl::Seconds(2));
  store_->Always(HttpFault::kListing);
  absl::Duration exit_after = absl::InfiniteDuration();
  const StartupRun run = LaunchAndWait(
      {"--dataset", "slow=s3://bkt/train/", "--drain-deadline", "3"},
      /*timeout=*/absl::Seconds(30), /*sigterm_after=*/absl::Milliseconds(2500),
      &exit_after);
  Report("SIGTERM during a slow listing", run);
  std::cout << "  exit " << absl::FormatDuration(exit_after)
            << " after SIGTERM\n";
  EXPECT_EQ(run.exit_code, 0) << run.log;
  EXPECT_THAT(run.log, HasSubstr("SIGTERM received during start-up"));
  // Cancelled, not cut off by the deadline's own exit.
  EXPECT_THAT(run.log, HasSubstr("start-up cancelled by SIGTERM; stopped"));
  EXPECT_THAT(run.log, Not(HasSubstr("without waiting for it")));
  EXPECT_LT(exit_after, absl::Seconds(3)) << run.log;
}

// A dataset at one port whose server redirects to another: the daemon
// refuses it at start, with and without --remote-redirects=same-origin,
// and nothing ever connects to the other port.
TEST_F(RemoteStartupTest, RedirectToAnotherPortIsNotFollowed) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<HttpFaultProxy> elsewhere,
                       HttpFaultProxy::Start(kNoUpstream));
  store_->SetRedirect(elsewhere->url());
  store_->Always(HttpFault::kRedirect);
  for (const std::string policy : {"none", "same-origin"}) {
    SCOPED_TRACE(policy);
    const StartupRun run = LaunchAndWait(
        {"--dataset",
         absl::StrCat("web=", store_->url(), "/shard-{000..001}.tar"),
         "--remote-redirects", policy},
        /*timeout=*/absl::Seconds(30));
    Report(absl::StrCat("redirect to another port, --remote-redirects=",
                        policy),
           run);
    EXPECT_EQ(run.exit_code, 2) << run.log;
    EXPECT_THAT(run.log, HasSubstr("dataset \"web\""));
    EXPECT_THAT(run.log, HasSubstr(absl::StrCat("HTTP 302 redirect to ",
                                                elsewhere->url())));
    EXPECT_THAT(run.log, HasSubstr(policy == "none"
                                       ? "not followed (--remote-redirects="
                                         "none)"
                                       : "another scheme, host or port"));
  }
  EXPECT_EQ(elsewhere->connections_accepted(), 0);
  EXPECT_EQ(elsewhere->requests(), 0);
}

// A shard list whose lines name file://, gopher://, ftp:// and dict://
// URLs: refused at start with a message that names the line and the
// scheme (before: fetched as relative paths, "HTTP 404; wrong prefix").
TEST_F(RemoteStartupTest, ShardListWithOtherSchemesIsRefused) {
  const std::string root = MakeTempDir("www");
  absl::StatusOr<std::unique_ptr<testing::ObjectServer>> nginx =
      testing::StartNginx(root);
  ASSERT_TRUE(nginx.ok()) << nginx.status();
  for (const std::string line :
       {"file:///etc/passwd", "gopher://127.0.0.1:70/_stats",
        "ftp://127.0.0.1/x.tar", "dict://127.0.0.1:11211/stat"}) {
    SCOPED_TRACE(line);
    std::ofstream(root + "/shards.txt") << "# shards\nshard-000.tar\n"
                                        << line << "\n";
    const StartupRun run = LaunchAndWait(
        {"--dataset", absl::StrCat("listed=", (*nginx)->url(), "/shards.txt")},
        /*timeout=*/absl::Seconds(30));
    EXPECT_EQ(run.exit_code, 2) << run.log;
    EXPECT_THAT(run.log, HasSubstr("dataset \"listed\""));
    EXPECT_THAT(run.log, HasSubstr("shards.txt line 3"));
    EXPECT_THAT(run.log, HasSubstr(line));
    EXPECT_THAT(run.log, HasSubstr("which is refused"));
    EXPECT_THAT(run.log, Not(HasSubstr("404")));
  }
  // A dataset path with such a scheme is refused too, not taken for a
  // local path.
  const StartupRun run = LaunchAndWait({"--dataset", "f=file:///etc/passwd"},
                                /*timeout=*/absl::Seconds(30));
  EXPECT_EQ(run.exit_code, 2) << run.log;
  EXPECT_THAT(run.log, HasSubstr("has the scheme \"file\", which is refused"));
}

}  // namespace
}  // namespace batchd
