// batchd-chaos: three daemons, each in its own network namespace, joined by
// veth pairs to a client namespace where the trainers run, under network
// and process faults for --duration_s; every batch checked by the soak's
// byte-exact oracle (tests/soak/oracle.h).
//
//   build/tests/chaos/batchd-chaos --duration_s=600     (make chaos)
//
// Topology (made and removed by this program; names carry its pid, so a
// leftover never collides, and leftovers of dead runs are removed first):
//
//   client ns  bdch<pid>c: the clients, a TcpProxy per daemon on its
//              127.0.0.1, the reference daemon for the oracle
//     veth bc<pid>c<i> 10.213.<i>.1/30  <->  veth bc<pid>d<i> 10.213.<i>.2/30
//   daemon ns  bdch<pid>d<i>: batchd --host 10.213.<i>.2 --port 7070
//
// The clients reach daemon i through proxy i. Faults, one link fault at a
// time every 4-8 s on a random daemon's link: a partition (its veth down
// for 10 s), a bandwidth cap (tc tbf on the daemon's side, 10-20 s),
// latency (the proxy holds every read 50-300 ms, 10 s), a reset (the proxy
// resets every connection) or a stall (the proxy forwards nothing for
// 8 s); and every 20 s a process fault on a random daemon: kill -9 (and a
// restart 1-3 s later) or SIGSTOP (and SIGCONT 3-8 s later). The clients
// are the soak's: random plans, abandoned epochs, stalled consumers.
//
// Prints the faults injected, batches verified, wrong, lost and duplicated
// (all but the first must be 0) and the longest trainer wait; "chaos:
// passed" or "chaos: FAILED" (exit 1). Where namespaces cannot be made
// (not root, no `ip` or `tc`), prints "chaos: SKIPPED: <why>" and exits 0.
//
// The program runs twice: the outer process (root namespace) builds and
// removes the namespaces, also on SIGINT/SIGTERM; it runs itself with
// --inner inside the client namespace (`ip netns exec`), which does the
// rest. All traffic stays inside the namespaces it made.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "testing/daemon_process.h"
#include "testing/e2e_helpers.h"
#include "tests/chaos/tcp_proxy.h"
#include "tests/soak/oracle.h"

ABSL_FLAG(int, duration_s, 600, "how long the load and the faults run");
ABSL_FLAG(int, clients, 3, "client threads");
ABSL_FLAG(uint64_t, seed, 1, "seed of the plans and the faults");
ABSL_FLAG(bool, inner, false,
          "internal: run inside the client namespace made by the outer run");
ABSL_FLAG(std::string, prefix, "", "internal: the namespaces' name prefix");

namespace batchd::testing {
namespace {

constexpr int kDaemons = 3;
constexpr int kDaemonPort = 7070;
constexpr char kDataset[] = "chaos";
constexpr char kIp[] = "/usr/sbin/ip";
constexpr char kTc[] = "/usr/sbin/tc";
// The per-batch progress deadline and stall timeout the clients use.
constexpr absl::Duration kProgressTimeout = absl::Seconds(3);
constexpr absl::Duration kStallTimeout = absl::Seconds(5);

// ---- Names ----

std::string ClientNs(const std::string& prefix) { return prefix + "c"; }
std::string DaemonNs(const std::string& prefix, int i) {
  return absl::StrCat(prefix, "d", i);
}
// Interface names must fit in 15 characters: "bc" + pid + "c0".
std::string ClientVeth(const std::string& prefix, int i) {
  return absl::StrCat("bc", prefix.substr(4), "c", i);
}
std::string DaemonVeth(const std::string& prefix, int i) {
  return absl::StrCat("bc", prefix.substr(4), "d", i);
}
std::string ClientIp(int i) { return absl::StrCat("10.213.", i, ".1"); }
std::string DaemonIp(int i) { return absl::StrCat("10.213.", i, ".2"); }

// Runs a command (no shell); its output goes to `output` when given.
int Run(const std::vector<std::string>& argv, std::string* output = nullptr) {
  CommandResult result = RunCommand(argv);
  if (output != nullptr) *output = result.output;
  return result.exit_code;
}

// ---- The outer run: namespaces and veths ----

std::atomic<bool> interrupted{false};
pid_t inner_pid = -1;

void OnSignal(int) {
  interrupted = true;
  if (inner_pid > 0) kill(inner_pid, SIGTERM);
}

// Kills whatever still runs in `ns` and deletes it (its veths go with it).
void RemoveNs(const std::string& ns) {
  std::string pids;
  Run({kIp, "netns", "pids", ns}, &pids);
  for (absl::string_view line : absl::StrSplit(pids, '\n', absl::SkipEmpty())) {
    int pid = 0;
    if (absl::SimpleAtoi(line, &pid) && pid > 1) kill(pid, SIGKILL);
  }
  Run({kIp, "netns", "del", ns});
}

// Namespaces of earlier runs whose process is gone.
void RemoveLeftovers() {
  std::string list;
  Run({kIp, "netns", "list"}, &list);
  for (absl::string_view line : absl::StrSplit(list, '\n', absl::SkipEmpty())) {
    const std::string name(line.substr(0, line.find(' ')));
    if (!absl::StartsWith(name, "bdch")) continue;
    const size_t digits_end = name.find_first_not_of("0123456789", 4);
    int pid = 0;
    if (!absl::SimpleAtoi(name.substr(4, digits_end - 4), &pid)) continue;
    if (pid == getpid() || kill(pid, 0) == 0) continue;
    std::printf("chaos: removing leftover namespace %s\n", name.c_str());
    RemoveNs(name);
  }
}

std::vector<std::string> AllNs(const std::string& prefix) {
  std::vector<std::string> all = {ClientNs(prefix)};
  for (int i = 0; i < kDaemons; ++i) all.push_back(DaemonNs(prefix, i));
  return all;
}

void Teardown(const std::string& prefix) {
  for (const std::string& ns : AllNs(prefix)) RemoveNs(ns);
}

absl::Status Setup(const std::string& prefix) {
  auto must = [](const std::vector<std::string>& argv) -> absl::Status {
    std::string output;
    if (Run(argv, &output) != 0) {
      return absl::FailedPreconditionError(
          absl::StrCat(absl::StrJoin(argv, " "), ": ", output));
    }
    return absl::OkStatus();
  };
  const std::string c = ClientNs(prefix);
  for (const std::string& ns : AllNs(prefix)) {
    if (absl::Status s = must({kIp, "netns", "add", ns}); !s.ok()) return s;
    if (absl::Status s = must({kIp, "-n", ns, "link", "set", "lo", "up"});
        !s.ok()) {
      return s;
    }
  }
  for (int i = 0; i < kDaemons; ++i) {
    const std::string d = DaemonNs(prefix, i);
    const std::string cv = ClientVeth(prefix, i);
    const std::string dv = DaemonVeth(prefix, i);
    for (const auto& argv : std::vector<std::vector<std::string>>{
             {kIp, "link", "add", cv, "netns", c, "type", "veth", "peer",
              "name", dv, "netns", d},
             {kIp, "-n", c, "addr", "add", ClientIp(i) + "/30", "dev", cv},
             {kIp, "-n", d, "addr", "add", DaemonIp(i) + "/30", "dev", dv},
             {kIp, "-n", c, "link", "set", cv, "up"},
             {kIp, "-n", d, "link", "set", dv, "up"}}) {
      if (absl::Status s = must(argv); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

int Outer(int argc, char** argv) {
  if (geteuid() != 0) {
    std::printf("chaos: SKIPPED: network namespaces need root (euid %d)\n",
                static_cast<int>(geteuid()));
    return 0;
  }
  for (const char* tool : {kIp, kTc}) {
    if (access(tool, X_OK) != 0) {
      std::printf("chaos: SKIPPED: %s is missing (iproute2)\n", tool);
      return 0;
    }
  }
  RemoveLeftovers();
  const std::string prefix = absl::StrCat("bdch", getpid());
  struct sigaction action {};
  action.sa_handler = OnSignal;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  // Probe: one namespace, at once removed; a container without the
  // capability fails here.
  {
    std::string output;
    if (Run({kIp, "netns", "add", ClientNs(prefix)}, &output) != 0) {
      std::printf("chaos: SKIPPED: cannot create a network namespace: %s\n",
                  output.c_str());
      return 0;
    }
    Run({kIp, "netns", "del", ClientNs(prefix)});
  }
  if (absl::Status s = Setup(prefix); !s.ok()) {
    std::printf("chaos: setup failed: %s\n", s.ToString().c_str());
    Teardown(prefix);
    return 1;
  }
  std::printf("chaos: namespaces %s, veths 10.213.{0,1,2}.1 <-> .2\n",
              absl::StrJoin(AllNs(prefix), " ").c_str());
  std::fflush(stdout);
  std::vector<std::string> args = {kIp, "netns", "exec", ClientNs(prefix),
                                   "/proc/self/exe"};
  // The binary itself, not /proc/self/exe of `ip`.
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) args.back() = std::string(self, n);
  args.push_back("--inner");
  args.push_back("--prefix=" + prefix);
  for (int i = 1; i < argc; ++i) args.push_back(argv[i]);
  int code = 1;
  const pid_t pid = fork();
  if (pid == 0) {
    std::vector<char*> raw;
    for (std::string& a : args) raw.push_back(a.data());
    raw.push_back(nullptr);
    execv(kIp, raw.data());
    _exit(127);
  }
  inner_pid = pid;
  if (interrupted) kill(pid, SIGTERM);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  code = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
  Teardown(prefix);
  std::printf("chaos: namespaces removed\n");
  if (interrupted) {
    std::printf("chaos: interrupted\n");
    return 1;
  }
  return code;
}

// ---- The inner run, in the client namespace ----

// A batchd in daemon namespace `i`, listening on its veth address.
class NsDaemon {
 public:
  NsDaemon(std::string prefix, int index, std::vector<std::string> args,
           std::string log)
      : prefix_(std::move(prefix)),
        index_(index),
        args_(std::move(args)),
        log_(std::move(log)) {}
  ~NsDaemon() { Kill(); }

  // Starts it and waits up to 20 s until it accepts connections.
  absl::Status Start() {
    std::vector<std::string> argv = {kIp, "netns", "exec",
                                     DaemonNs(prefix_, index_),
                                     BuiltBinary("server/batchd")};
    for (const std::string& a : args_) argv.push_back(a);
    for (const std::string& a :
         {std::string("--host"), DaemonIp(index_), std::string("--port"),
          std::to_string(kDaemonPort), std::string("--insecure")}) {
      argv.push_back(a);
    }
    const pid_t pid = fork();
    if (pid == 0) {
      const int fd = open(log_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
      }
      std::vector<char*> raw;
      for (std::string& a : argv) raw.push_back(a.data());
      raw.push_back(nullptr);
      execv(kIp, raw.data());
      _exit(127);
    }
    pid_ = pid;
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (absl::Now() < deadline) {
      if (Accepts()) return absl::OkStatus();
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return absl::InternalError(
            absl::StrCat("daemon ", index_, " exited at start; see ", log_));
      }
      absl::SleepFor(absl::Milliseconds(100));
    }
    return absl::DeadlineExceededError(
        absl::StrCat("daemon ", index_, " did not listen within 20 s"));
  }
  void Kill() {
    if (pid_ <= 0) return;
    kill(pid_, SIGCONT);
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  void Signal(int signal) {
    if (pid_ > 0) kill(pid_, signal);
  }
  bool Accepts() const {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(kDaemonPort);
    inet_pton(AF_INET, DaemonIp(index_).c_str(), &address.sin_addr);
    const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&address),
                            sizeof(address)) == 0;
    close(fd);
    return ok;
  }

 private:
  const std::string prefix_;
  const int index_;
  const std::vector<std::string> args_;
  const std::string log_;
  pid_t pid_ = -1;
};

std::atomic<bool> stop_inner{false};
void OnInnerSignal(int) { stop_inner = true; }

// Sleeps until `until` or a stop; false when stopped.
bool SleepUntil(absl::Time until) {
  while (absl::Now() < until) {
    if (stop_inner) return false;
    absl::SleepFor(std::min(absl::Milliseconds(100), until - absl::Now()));
  }
  return !stop_inner;
}

int Inner() {
  const std::string prefix = absl::GetFlag(FLAGS_prefix);
  const int duration_s = absl::GetFlag(FLAGS_duration_s);
  const int n_clients = std::max(1, absl::GetFlag(FLAGS_clients));
  std::mt19937_64 rng(absl::GetFlag(FLAGS_seed));
  struct sigaction action {};
  action.sa_handler = OnInnerSignal;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  signal(SIGPIPE, SIG_IGN);

  absl::StatusOr<std::string> dataset = MakeDataset(60, 3, 23);
  if (!dataset.ok()) {
    std::printf("chaos: %s\n", dataset.status().ToString().c_str());
    return 1;
  }
  const std::string logs = MakeTempDir("chaos-logs");
  const std::vector<std::string> daemon_args = {
      "--dataset", absl::StrCat(kDataset, "=", *dataset), "--workers", "1",
      "--max-buffer-bytes", std::to_string(32 << 20),
      "--max-job-buffer-share", "1", "--drain-deadline", "2"};
  std::vector<std::unique_ptr<NsDaemon>> daemons;
  std::vector<std::unique_ptr<TcpProxy>> proxies;
  std::vector<std::string> endpoints;
  for (int i = 0; i < kDaemons; ++i) {
    daemons.push_back(std::make_unique<NsDaemon>(
        prefix, i, daemon_args, absl::StrCat(logs, "/daemon", i, ".log")));
    if (absl::Status s = daemons[i]->Start(); !s.ok()) {
      std::printf("chaos: %s\n", s.ToString().c_str());
      return 1;
    }
    absl::StatusOr<std::unique_ptr<TcpProxy>> proxy =
        TcpProxy::Start(DaemonIp(i), kDaemonPort, /*max_connections=*/64);
    if (!proxy.ok()) {
      std::printf("chaos: %s\n", proxy.status().ToString().c_str());
      return 1;
    }
    endpoints.push_back(absl::StrCat("127.0.0.1:", (*proxy)->port()));
    proxies.push_back(*std::move(proxy));
  }
  std::printf("chaos: %d daemons in namespaces behind proxies %s, %d "
              "clients, %d s, seed %llu, daemon logs in %s\n",
              kDaemons, absl::StrJoin(endpoints, ",").c_str(), n_clients,
              duration_s,
              static_cast<unsigned long long>(absl::GetFlag(FLAGS_seed)),
              logs.c_str());
  std::fflush(stdout);

  OracleTotals totals;
  const absl::Time begin = absl::Now();
  const absl::Time until = begin + absl::Seconds(duration_s);
  OracleClientConfig config;
  config.dataset = kDataset;
  config.seed = absl::GetFlag(FLAGS_seed);
  config.stall_timeout = kStallTimeout;
  config.batch_progress_timeout = kProgressTimeout;
  config.stop = &stop_inner;
  std::vector<std::thread> clients;
  for (int i = 0; i < n_clients; ++i) {
    clients.emplace_back(OracleClientLoop, i, absl::StrJoin(endpoints, ","),
                         until, config, &totals);
  }

  // Process faults every 20 s: kill -9 and restart, or SIGSTOP and SIGCONT.
  std::atomic<bool> restart_failed{false};
  std::thread process_faults([&] {
    std::mt19937_64 prng(rng());
    for (absl::Time next = begin + absl::Seconds(20); SleepUntil(next) &&
                                                      next < until;
         next += absl::Seconds(20)) {
      const int victim = static_cast<int>(prng() % kDaemons);
      if (prng() % 2 == 0) {
        daemons[victim]->Kill();
        totals.Count("kill -9 and restart");
        SleepUntil(absl::Now() + absl::Milliseconds(1000 + prng() % 2000));
        if (absl::Status s = daemons[victim]->Start(); !s.ok()) {
          std::printf("chaos: restart: %s\n", s.ToString().c_str());
          restart_failed = true;
          return;
        }
      } else {
        daemons[victim]->Signal(SIGSTOP);
        totals.Count("SIGSTOP and SIGCONT");
        SleepUntil(absl::Now() + absl::Milliseconds(3000 + prng() % 5000));
        daemons[victim]->Signal(SIGCONT);
      }
    }
  });

  // Link faults, one at a time, every 4-8 s.
  const std::string c = ClientNs(prefix);
  std::mt19937_64 lrng(rng());
  while (SleepUntil(absl::Now() + absl::Milliseconds(4000 + lrng() % 4000)) &&
         absl::Now() < until) {
    const int victim = static_cast<int>(lrng() % kDaemons);
    switch (lrng() % 5) {
      case 0: {
        Run({kIp, "-n", c, "link", "set", ClientVeth(prefix, victim), "down"});
        totals.Count("partition 10 s");
        SleepUntil(absl::Now() + absl::Seconds(10));
        Run({kIp, "-n", c, "link", "set", ClientVeth(prefix, victim), "up"});
        break;
      }
      case 1: {
        const std::string ns = DaemonNs(prefix, victim);
        const std::string dev = DaemonVeth(prefix, victim);
        const std::string rate = lrng() % 2 ? "4mbit" : "16mbit";
        if (Run({kTc, "-n", ns, "qdisc", "replace", "dev", dev, "root", "tbf",
                 "rate", rate, "burst", "32kbit", "latency", "400ms"}) == 0) {
          totals.Count("bandwidth cap (tbf)");
        }
        SleepUntil(absl::Now() + absl::Seconds(10 + lrng() % 10));
        Run({kTc, "-n", ns, "qdisc", "del", "dev", dev, "root"});
        break;
      }
      case 2:
        proxies[victim]->SetLatency(absl::Milliseconds(50 + lrng() % 250));
        totals.Count("latency 50-300 ms (proxy)");
        SleepUntil(absl::Now() + absl::Seconds(10));
        proxies[victim]->SetLatency(absl::ZeroDuration());
        break;
      case 3:
        proxies[victim]->ResetAll();
        totals.Count("connection resets (proxy)");
        break;
      case 4:
        proxies[victim]->SetStalled(true);
        totals.Count("stall 8 s (proxy)");
        SleepUntil(absl::Now() + absl::Seconds(8));
        proxies[victim]->SetStalled(false);
        break;
    }
  }
  process_faults.join();
  for (int i = 0; i < kDaemons; ++i) {
    daemons[i]->Signal(SIGCONT);
    proxies[i]->SetStalled(false);
    proxies[i]->SetLatency(absl::ZeroDuration());
  }
  if (stop_inner) {
    // Interrupted: the clients end within their grace; no verdict.
    for (std::thread& t : clients) t.join();
    return 1;
  }
  for (std::thread& t : clients) t.join();

  // The oracle, against a clean daemon on this namespace's loopback.
  absl::StatusOr<std::unique_ptr<DaemonProcess>> reference =
      DaemonProcess::Start(daemon_args);
  if (!reference.ok()) {
    std::printf("chaos: reference: %s\n",
                reference.status().ToString().c_str());
    return 1;
  }
  absl::StatusOr<OracleResult> result =
      CheckAgainstReference((*reference)->endpoint(), totals);
  if (!result.ok()) {
    std::printf("chaos: %s\n", result.status().ToString().c_str());
    return 1;
  }
  bool ok = PrintOracleReport(*result, totals) && !restart_failed;
  uint64_t connections = 0;
  for (const auto& proxy : proxies) connections += proxy->accepted();
  std::printf("proxied connections %llu; ran %.0f s\n",
              static_cast<unsigned long long>(connections),
              absl::ToDoubleSeconds(absl::Now() - begin));
  std::printf("chaos: %s\n", ok ? "passed" : "FAILED");
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace batchd::testing

int main(int argc, char** argv) {
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  (void)positional;
  setvbuf(stdout, nullptr, _IOLBF, 0);
  if (absl::GetFlag(FLAGS_inner)) return batchd::testing::Inner();
  return batchd::testing::Outer(argc, argv);
}
