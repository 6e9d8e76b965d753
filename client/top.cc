// batchd-top (`batchd top`): a live terminal view of one or more daemons:
// jobs, streams, images/s, worker busy %, stage times and substitutions,
// polled from AdminService.GetStatus and redrawn in place.
//
//   batchd-top --endpoint=host-a:7070,host-b:7070
//   batchd-top --endpoint=localhost:7070 --once     # one plain frame
//
// Exit status: 0; 1 for bad flags, or with --once when no daemon answered.
#include <signal.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "batchd/v1/admin.pb.h"
#include "client/daemon_status.h"
#include "client/security_flags.h"
#include "client/top_view.h"

ABSL_FLAG(std::vector<std::string>, endpoint, {"localhost:7070"},
          "daemons to watch, comma-separated host:port or unix:/path");
ABSL_FLAG(double, interval, 1.0, "seconds between polls");
ABSL_FLAG(bool, once, false,
          "print one frame as plain text (no terminal escapes) and exit");
ABSL_FLAG(int, width, 0, "columns; 0 asks the terminal (80 if it cannot)");
ABSL_FLAG(int, height, 0, "rows; 0 asks the terminal (24 if it cannot)");

namespace batchd::client {
namespace {

constexpr absl::Duration kRpcTimeout = absl::Seconds(2);

volatile sig_atomic_t g_stop = 0;

void OnSignal(int) { g_stop = 1; }

struct Watched {
  std::string endpoint;
  std::shared_ptr<grpc::Channel> channel;
};

// Terminal size from TIOCGWINSZ, the flags overriding, 80x24 by default.
void TerminalSize(int* width, int* height) {
  *width = 80;
  *height = 24;
  winsize size{};
  if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 0 &&
      size.ws_row > 0) {
    *width = size.ws_col;
    *height = size.ws_row;
  }
  if (absl::GetFlag(FLAGS_width) > 0) *width = absl::GetFlag(FLAGS_width);
  if (absl::GetFlag(FLAGS_height) > 0) *height = absl::GetFlag(FLAGS_height);
}

int Run(const std::vector<std::string>& positional) {
  std::vector<std::string> endpoints;
  for (const std::string& flag : absl::GetFlag(FLAGS_endpoint)) {
    for (absl::string_view e : absl::StrSplit(flag, ',', absl::SkipEmpty())) {
      endpoints.emplace_back(e);
    }
  }
  // `batchd top host:port ...` also works.
  if (!positional.empty()) endpoints = positional;
  if (endpoints.empty()) {
    std::fprintf(stderr, "batchd-top: no --endpoint given\n");
    return 1;
  }
  const double interval = absl::GetFlag(FLAGS_interval);
  if (!(interval >= 0.1 && interval <= 3600)) {
    std::fprintf(stderr, "batchd-top: --interval must be 0.1..3600 s\n");
    return 1;
  }
  absl::StatusOr<ChannelSecurity> security =
      ChannelSecurity::Load(SecurityOptionsFromFlags());
  if (!security.ok()) {
    std::fprintf(stderr, "batchd-top: %s\n",
                 std::string(security.status().message()).c_str());
    return 1;
  }
  std::vector<Watched> watched;
  for (const std::string& endpoint : endpoints) {
    watched.push_back({endpoint, NewBatchdChannel(endpoint, *security)});
  }

  const bool once = absl::GetFlag(FLAGS_once);
  signal(SIGINT, OnSignal);
  signal(SIGTERM, OnSignal);
  std::vector<DaemonSample> previous;
  bool first = true;
  while (!g_stop) {
    const absl::Time frame_start = absl::Now();
    std::vector<DaemonSample> samples;
    for (Watched& w : watched) {
      samples.push_back(
          {w.endpoint, FetchServerStatus(w.channel, kRpcTimeout), absl::Now()});
    }
    int width = 0, height = 0;
    TerminalSize(&width, &height);
    const std::vector<std::string> lines =
        RenderTop(samples, first ? nullptr : &previous, width, height);
    std::string frame;
    if (once) {
      for (const std::string& line : lines) absl::StrAppend(&frame, line, "\n");
      std::fwrite(frame.data(), 1, frame.size(), stdout);
      for (const DaemonSample& s : samples) {
        if (s.status.ok()) return 0;
      }
      return 1;
    }
    // Home, each line cleared to its end, then the rest of the screen: a
    // redraw in place without flicker.
    frame = first ? "\x1b[2J\x1b[H" : "\x1b[H";
    for (size_t i = 0; i < lines.size(); ++i) {
      absl::StrAppend(&frame, lines[i], "\x1b[K",
                      i + 1 < lines.size() ? "\n" : "");
    }
    absl::StrAppend(&frame, "\x1b[J");
    std::fwrite(frame.data(), 1, frame.size(), stdout);
    std::fflush(stdout);
    previous = std::move(samples);
    first = false;
    const absl::Time next = frame_start + absl::Seconds(interval);
    while (!g_stop && absl::Now() < next) {
      absl::SleepFor(std::min(absl::Milliseconds(100), next - absl::Now()));
    }
  }
  std::fputs("\n", stdout);
  return 0;
}

}  // namespace
}  // namespace batchd::client

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "A live view of batchd daemons (`batchd top`).\n"
      "  batchd-top --endpoint=HOST:PORT[,HOST:PORT...] [--once]");
  batchd::client::ShowToolFlagsInHelp("client/top.cc");
  std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  std::vector<std::string> positional(rest.begin() + 1, rest.end());
  return batchd::client::Run(positional);
}
