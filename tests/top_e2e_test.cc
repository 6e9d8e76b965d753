// End-to-end: batchd-top (and `batchd top`) renders one frame of live
// daemons with --once: the daemons, their jobs, and the unreachable ones,
// within an 80x24 terminal.
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/daemon_process.h"
#include "testing/e2e_helpers.h"

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

}  // namespace
}  // namespace batchd::testing
