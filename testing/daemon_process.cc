#include "testing/daemon_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace batchd::testing {
namespace {

std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Waits for `pid` up to `timeout`; returns the exit code, or -2 on timeout.
int WaitFor(pid_t pid, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) {
      if (WIFEXITED(status)) return WEXITSTATUS(status);
      return 128 + WTERMSIG(status);
    }
    if (r < 0) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return -2;
}

std::vector<char*> ToArgv(std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  return argv;
}

}  // namespace

std::string BuiltBinary(const std::string& relative_path) {
  return absl::StrCat(BATCHD_BINARY_DIR, "/", relative_path);
}

namespace {

// This process's directory for MakeTempDir, TempDir()/batchd-<pid>,
// removed with everything in it when the process exits. Roots left by
// test processes that died without exiting (a crash, SIGKILL) are removed
// when the next one starts, so that a test run leaves nothing in /tmp.
class TempRoot {
 public:
  TempRoot()
      : path_(absl::StrCat(::testing::TempDir(), "batchd-", getpid())) {
    RemoveRootsOfDeadProcesses();
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempRoot() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  static void RemoveRootsOfDeadProcesses() {
    std::error_code error;
    for (const auto& entry :
         std::filesystem::directory_iterator(::testing::TempDir(), error)) {
      const std::string name = entry.path().filename().string();
      // "batchd-<pid>", or "batchd-<pid>-..." as test directories were
      // once named.
      int pid = 0;
      if (name.rfind("batchd-", 0) != 0) continue;
      const std::string digits = name.substr(
          strlen("batchd-"), name.find('-', strlen("batchd-")) - strlen("batchd-"));
      if (!absl::SimpleAtoi(digits, &pid) || pid <= 0) continue;
      if (kill(pid, 0) != 0 && errno == ESRCH) {
        std::error_code ignored;
        std::filesystem::remove_all(entry.path(), ignored);
      }
    }
  }
  const std::string path_;
};

}  // namespace

std::string MakeTempDir(const std::string& name) {
  static TempRoot* root = [] {
    static TempRoot instance;  // destroyed at exit, removing the root
    return &instance;
  }();
  static std::atomic<int> counter{0};
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string dir = absl::StrCat(root->path(), "/", counter++, "-",
                                 info ? info->name() : "global", "-", name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

CommandResult RunCommand(const std::vector<std::string>& argv_in) {
  std::vector<std::string> args = argv_in;
  const std::string out_path = MakeTempDir("cmd") + "/out.txt";
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    std::vector<char*> argv = ToArgv(args);
    execv(argv[0], argv.data());
    _exit(127);
  }
  CommandResult result;
  result.exit_code = WaitFor(pid, std::chrono::minutes(5));
  if (result.exit_code == -2) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
  result.output = ReadWholeFile(out_path);
  return result;
}

absl::StatusOr<std::unique_ptr<DaemonProcess>> DaemonProcess::Launch(
    const std::vector<std::string>& args) {
  std::unique_ptr<DaemonProcess> daemon(new DaemonProcess());
  daemon->dir_ = MakeTempDir("daemon");
  daemon->port_file_ = daemon->dir_ + "/port";
  const std::string log = daemon->dir_ + "/log.txt";
  std::vector<std::string> full = {BuiltBinary("server/batchd"), "--port",
                                   "0", "--port-file", daemon->port_file_};
  full.insert(full.end(), args.begin(), args.end());
  daemon->pid_ = fork();
  if (daemon->pid_ == 0) {
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    std::vector<char*> argv = ToArgv(full);
    execv(argv[0], argv.data());
    _exit(127);
  }
  if (daemon->pid_ < 0) return absl::InternalError("fork failed");
  return daemon;
}

absl::Status DaemonProcess::WaitUntilServing(absl::Duration timeout) {
  const auto deadline =
      std::chrono::steady_clock::now() +
      std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout));
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream in(port_file_);
    int port = 0;
    if (in >> port && port > 0) {
      port_ = port;
      return absl::OkStatus();
    }
    int status = 0;
    if (pid_ > 0 && waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return absl::InternalError(
          absl::StrCat("batchd exited at start: ", Log()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("batchd did not start in ", absl::FormatDuration(timeout),
                   ": ", Log()));
}

absl::StatusOr<std::unique_ptr<DaemonProcess>> DaemonProcess::Start(
    const std::vector<std::string>& args) {
  absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon = Launch(args);
  if (!daemon.ok()) return daemon.status();
  absl::Status serving = (*daemon)->WaitUntilServing(absl::Seconds(20));
  if (!serving.ok()) return serving;
  return daemon;
}

DaemonProcess::~DaemonProcess() {
  if (pid_ > 0) Stop();
}

int DaemonProcess::Stop() {
  if (pid_ <= 0) return -1;
  kill(pid_, SIGTERM);
  int code = WaitFor(pid_, std::chrono::seconds(20));
  if (code == -2) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    code = -1;
  }
  pid_ = -1;
  return code;
}

void DaemonProcess::Kill() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

void DaemonProcess::Terminate() {
  if (pid_ > 0) kill(pid_, SIGTERM);
}

absl::StatusOr<int> DaemonProcess::WaitForExit(absl::Duration timeout) {
  if (pid_ <= 0) {
    return absl::FailedPreconditionError(
        "the daemon was already stopped, killed or waited for");
  }
  const int code = WaitFor(
      pid_, std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout)));
  if (code == -2) {
    return absl::DeadlineExceededError(
        absl::StrCat("batchd (pid ", pid_, ") still runs after ",
                     absl::FormatDuration(timeout)));
  }
  pid_ = -1;
  if (code == -1) return absl::InternalError("waitpid failed");
  return code;
}

std::string DaemonProcess::Log() const {
  return ReadWholeFile(dir_ + "/log.txt");
}

}  // namespace batchd::testing
