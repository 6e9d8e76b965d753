// DaemonProcess: a real `batchd` process for end-to-end tests, started on a
// free port (--port 0 --port-file) and stopped with SIGTERM.
//
//   ASSERT_OK_AND_ASSIGN-style:
//   auto daemon = DaemonProcess::Start({"--dataset", "d=" + dir});
//   ASSERT_TRUE(daemon.ok());
//   std::string endpoint = (*daemon)->endpoint();
//   (*daemon)->Terminate();                      // SIGTERM: drain
//   absl::StatusOr<int> code = (*daemon)->WaitForExit(absl::Seconds(15));
//
// Thread-compatible.
#ifndef BATCHD_TESTING_DAEMON_PROCESS_H_
#define BATCHD_TESTING_DAEMON_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace batchd::testing {

// Path of a binary built by this project, e.g. "server/batchd".
std::string BuiltBinary(const std::string& relative_path);

// A fresh empty directory under the test's temporary directory.
std::string MakeTempDir(const std::string& name);

// Runs `argv` to completion; returns its exit status and output.
struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};
CommandResult RunCommand(const std::vector<std::string>& argv);

class DaemonProcess {
 public:
  // Starts build/server/batchd with `args` plus --port 0 --port-file; waits
  // up to 20 s until it serves. Its stderr goes to a log file.
  static absl::StatusOr<std::unique_ptr<DaemonProcess>> Start(
      const std::vector<std::string>& args);
  // Starts build/server/batchd with `args` plus --port 0 --port-file and
  // returns at once, for tests of the start-up itself (port() is 0 until
  // WaitUntilServing). Its stderr goes to a log file.
  static absl::StatusOr<std::unique_ptr<DaemonProcess>> Launch(
      const std::vector<std::string>& args);
  // Waits up to `timeout` until a Launch'ed daemon serves; INTERNAL with
  // its log when it exits first.
  absl::Status WaitUntilServing(absl::Duration timeout);
  // Stops the daemon (SIGTERM) if it is still running.
  ~DaemonProcess();

  std::string endpoint() const { return "localhost:" + std::to_string(port_); }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  // SIGTERM, then waits; returns the exit code (0 for a clean drain), or -1
  // if it had to be killed.
  int Stop();
  // SIGKILL: simulates a crash.
  void Kill();
  // SIGTERM without waiting: the daemon starts its drain. Does nothing if it
  // has already exited (WaitForExit).
  void Terminate();
  // Waits up to `timeout` for the daemon to exit and returns its exit code
  // (128 + N when signal N ended it). DEADLINE_EXCEEDED if it is still
  // running then (it is left running), FAILED_PRECONDITION if it was
  // already reaped (Stop, Kill or an earlier WaitForExit).
  absl::StatusOr<int> WaitForExit(absl::Duration timeout);
  // The daemon's log so far.
  std::string Log() const;

 private:
  DaemonProcess() = default;
  pid_t pid_ = -1;
  int port_ = 0;
  std::string dir_;
  std::string port_file_;
};

}  // namespace batchd::testing

#endif  // BATCHD_TESTING_DAEMON_PROCESS_H_
