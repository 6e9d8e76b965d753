// StartupSignals: honours SIGINT and SIGTERM while the daemon starts, before
// it serves (listing and indexing remote datasets can take minutes). The
// first such signal sets the shared cancellation flag, which aborts every
// remote transfer of the start-up (ObjectStoreOptions::cancelled), and the
// process exits at `deadline` (--drain-deadline) after it if the start-up
// has not returned by then. A SIGHUP meanwhile is dropped: the token file
// is read when the server starts.
//
// REQUIRES: the signals in `signals` are blocked in every thread (main
// blocks them before any thread starts); a thread of this object waits
// for them with sigtimedwait.
//
//   auto cancelled = std::make_shared<std::atomic<bool>>(false);
//   StartupSignals startup(stop_signals, drain_deadline, cancelled);
//   remote.cancelled = cancelled;
//   ... load the datasets ...
//   if (startup.Finish() != 0) return 0;  // stopped before serving
//
// Thread-safe; the destructor calls Finish.
#ifndef BATCHD_SERVER_STARTUP_SIGNALS_H_
#define BATCHD_SERVER_STARTUP_SIGNALS_H_

#include <signal.h>

#include <atomic>
#include <memory>
#include <thread>

#include "absl/time/time.h"

namespace batchd::server {

class StartupSignals {
 public:
  StartupSignals(const sigset_t& signals, absl::Duration deadline,
                 std::shared_ptr<std::atomic<bool>> cancelled);
  ~StartupSignals();
  StartupSignals(const StartupSignals&) = delete;
  StartupSignals& operator=(const StartupSignals&) = delete;

  // Stops watching (within 100 ms) and returns the signal received, SIGINT
  // or SIGTERM, or 0 for none. Signals that arrive later stay pending for
  // the caller's sigwait.
  int Finish();

 private:
  void Run();

  // Constant after construction.
  const sigset_t signals_;
  const absl::Duration deadline_;
  const std::shared_ptr<std::atomic<bool>> cancelled_;

  std::atomic<bool> done_{false};
  std::atomic<int> signal_{0};  // written by thread_ only
  std::thread thread_;
};

}  // namespace batchd::server

#endif  // BATCHD_SERVER_STARTUP_SIGNALS_H_
