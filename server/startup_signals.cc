#include "server/startup_signals.h"

#include <pthread.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <ctime>
#include <utility>

#include "absl/time/clock.h"

namespace batchd::server {
namespace {

// How often the watcher looks at done_.
constexpr long kPollNanoseconds = 100 * 1000 * 1000;

const char* SignalName(int signal) {
  return signal == SIGTERM ? "SIGTERM" : "SIGINT";
}

}  // namespace

StartupSignals::StartupSignals(const sigset_t& signals,
                               absl::Duration deadline,
                               std::shared_ptr<std::atomic<bool>> cancelled)
    : signals_(signals),
      deadline_(deadline),
      cancelled_(std::move(cancelled)),
      thread_([this] { Run(); }) {}

StartupSignals::~StartupSignals() { Finish(); }

int StartupSignals::Finish() {
  done_.store(true);
  if (thread_.joinable()) thread_.join();
  return signal_.load();
}

void StartupSignals::Run() {
  pthread_setname_np(pthread_self(), "batchd-startsig");
  absl::Time exit_at = absl::InfiniteFuture();
  while (!done_.load()) {
    const timespec poll = {0, kPollNanoseconds};
    const int signal = sigtimedwait(&signals_, nullptr, &poll);
    if ((signal == SIGINT || signal == SIGTERM) && signal_.load() == 0) {
      signal_.store(signal);
      cancelled_->store(true);
      exit_at = absl::Now() + deadline_;
      std::fprintf(stderr,
                   "batchd: %s received during start-up: cancelling it "
                   "(exit within %s, --drain-deadline)\n",
                   SignalName(signal), absl::FormatDuration(deadline_).c_str());
    }
    if (absl::Now() >= exit_at && !done_.load()) {
      std::fprintf(stderr,
                   "batchd: start-up still running %s after %s; exiting "
                   "without waiting for it\n",
                   absl::FormatDuration(deadline_).c_str(),
                   SignalName(signal_.load()));
      std::fflush(stderr);
      _exit(0);
    }
  }
}

}  // namespace batchd::server
