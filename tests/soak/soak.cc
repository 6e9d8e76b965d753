// batchd-soak: several daemons and several clients with random plans, for
// --duration_s, under faults injected at random times, with an oracle.
//
//   build/tests/soak/batchd-soak --duration_s=180        (make soak DURATION=180)
//
// Load: --clients threads, each streaming random plans (batch size, image
// size, train or eval, layout, world size and rank, shuffle, drop_last)
// over every daemon with the multi-daemon Loader, for 1-3 epochs each.
// Faults, one every 0.5-3 s: kill -9 or SIGTERM of a daemon and its restart
// on the same port, SetWorkers up and down, a stalled consumer, a client
// dropped mid-batch, a rogue client sending garbage bytes or malformed
// requests; the dataset holds corrupt files. Daemon 0 is never killed, so
// its resources can be followed for the whole run.
//
// The oracle (tests/soak/oracle.h, shared with tests/chaos/chaos.cc): a
// batch is a pure function of (plan, epoch, index), so every delivered
// batch's hash is compared with the same batch from a clean reference
// daemon that saw no faults. An epoch read to its end must hold every batch
// index exactly once.
//
// Prints batches verified, wrong, lost and duplicated (all but the first
// must be 0), the longest trainer wait, and daemon 0's RSS, descriptors and
// threads at the end of the first minute (or third of the run) and at the
// end. Exits 1 when the oracle fails or growth passes the bounds below.
// Everything stays on 127.0.0.1 and every loop is bounded by the duration.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "batchd/v1/data.grpc.pb.h"
#include "client/channel_security.h"
#include "client/loader.h"
#include "grpcpp/client_context.h"
#include "testing/daemon_process.h"
#include "testing/e2e_helpers.h"
#include "tests/soak/oracle.h"

ABSL_FLAG(int, duration_s, 180, "how long the load and the faults run");
ABSL_FLAG(int, daemons, 3, "daemons serving the clients (daemon 0 is never killed)");
ABSL_FLAG(int, clients, 3, "client threads");
ABSL_FLAG(uint64_t, seed, 1, "seed of the plans and the faults");
ABSL_FLAG(int, max_rss_growth_mib, 48,
          "RSS growth allowed on daemon 0 after the first minute, MiB; "
          "negative: not checked (sanitizer builds, whose quarantine keeps "
          "freed memory on purpose)");

namespace batchd::testing {
namespace {

using client::Loader;
using client::LoaderOptions;

// Growth allowed on daemon 0 from the first sample (after the first
// minute) to the last. By then every buffer pool is at its size: batch
// buffers are bounded by --max-buffer-bytes (32 MiB here) and the idle pool
// by --idle-buffer-bytes (8 MiB), malloc arenas are warm, and gRPC's
// threads exist. What remains is noise: a few MiB of allocator slack, a
// connection or two being torn down, a transient gRPC thread. So: RSS
// --max_rss_growth_mib (48), and these.
constexpr int kMaxFdGrowth = 16;
constexpr int kMaxThreadGrowth = 8;

constexpr char kDataset[] = "soak";

std::string Endpoints(const std::vector<int>& ports) {
  std::vector<std::string> list;
  for (int port : ports) list.push_back(absl::StrCat("127.0.0.1:", port));
  return absl::StrJoin(list, ",");
}

// Garbage bytes on a fresh TCP connection, then close.
void SendGarbage(int port, std::mt19937_64& rng) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0) {
    std::string bytes(1 + rng() % 4096, '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    // An HTTP/2 preface now and then, so the garbage reaches the framer.
    if (rng() % 2) bytes.insert(0, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
    (void)!write(fd, bytes.data(), bytes.size());
  }
  close(fd);
}

// Requests the daemon must refuse: an empty message, a request before the
// plan, an over-long request, a duplicate index, a bad plan.
void SendMalformed(int port, std::mt19937_64& rng) {
  auto stub = v1::DataService::NewStub(
      client::NewBatchdChannel(absl::StrCat("127.0.0.1:", port)));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  auto stream = stub->StreamBatches(&context);
  v1::StreamRequest request;
  switch (rng() % 5) {
    case 0:
      break;  // empty
    case 1:
      request.mutable_request()->add_batch_indices(0);
      break;
    case 2: {
      *request.mutable_open()->mutable_plan() = TrainPlan(kDataset, 4, 16, 1);
      stream->Write(request);
      request.Clear();
      for (int i = 0; i < 1000; ++i) {
        request.mutable_request()->add_batch_indices(i);
      }
      break;
    }
    case 3: {
      *request.mutable_open()->mutable_plan() = TrainPlan(kDataset, 4, 16, 1);
      stream->Write(request);
      request.Clear();
      request.mutable_request()->add_batch_indices(1);
      request.mutable_request()->add_batch_indices(1);
      break;
    }
    case 4:
      *request.mutable_open()->mutable_plan() = TrainPlan("no-such", 0, 0, 1);
      break;
  }
  stream->Write(request);
  stream->WritesDone();
  v1::StreamResponse response;
  while (stream->Read(&response)) {
  }
  stream->Finish().IgnoreError();
}

struct Resources {
  int64_t rss_bytes = 0;
  int fds = 0;
  int threads = 0;
};

Resources Sample(pid_t pid) {
  Resources r;
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0) r.rss_bytes = std::stoll(line.substr(6)) * 1024;
    if (line.rfind("Threads:", 0) == 0) r.threads = std::stoi(line.substr(8));
  }
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(
           absl::StrCat("/proc/", pid, "/fd"), error)) {
    (void)entry;
    ++r.fds;
  }
  return r;
}

int Run() {
  const int duration_s = absl::GetFlag(FLAGS_duration_s);
  const int n_daemons = std::max(2, absl::GetFlag(FLAGS_daemons));
  const int n_clients = std::max(1, absl::GetFlag(FLAGS_clients));
  std::mt19937_64 rng(absl::GetFlag(FLAGS_seed));

  // The dataset, with a truncated, a corrupt and a non-JPEG file.
  absl::StatusOr<std::string> dataset = MakeDataset(60, 3, 17);
  if (!dataset.ok()) {
    std::fprintf(stderr, "soak: %s\n", dataset.status().ToString().c_str());
    return 1;
  }
  const std::vector<std::string> files = ImageFolderOrder(*dataset);
  {
    std::ifstream in(files[5], std::ios::binary);
    std::string jpeg((std::istreambuf_iterator<char>(in)), {});
    std::ofstream(files[5], std::ios::binary | std::ios::trunc)
        << jpeg.substr(0, jpeg.size() / 3);
    std::ofstream(files[17], std::ios::binary | std::ios::trunc)
        << "not an image\n";
    std::fstream corrupt(files[29], std::ios::binary | std::ios::in |
                                        std::ios::out);
    corrupt.seekp(static_cast<std::streamoff>(jpeg.size() / 2));
    corrupt << std::string(300, '\x5a');
  }
  const std::vector<std::string> daemon_args = {
      "--dataset", absl::StrCat(kDataset, "=", *dataset), "--workers", "2",
      "--max-workers", "4", "--max-buffer-bytes", std::to_string(32 << 20),
      "--max-job-buffer-share", "1",
      "--idle-buffer-bytes", std::to_string(8 << 20), "--drain-deadline", "2"};
  auto start = [&daemon_args](int port) {
    std::vector<std::string> args = daemon_args;
    if (port > 0) args.insert(args.end(), {"--port", std::to_string(port)});
    return DaemonProcess::Start(args);
  };

  std::vector<std::unique_ptr<DaemonProcess>> daemons;
  std::vector<int> ports;
  for (int i = 0; i < n_daemons; ++i) {
    absl::StatusOr<std::unique_ptr<DaemonProcess>> d = start(0);
    if (!d.ok()) {
      std::fprintf(stderr, "soak: %s\n", d.status().ToString().c_str());
      return 1;
    }
    ports.push_back((*d)->port());
    daemons.push_back(*std::move(d));
  }
  const std::string endpoints = Endpoints(ports);
  std::printf("soak: %d daemons (%s), %d clients, %d s, seed %llu\n",
              n_daemons, endpoints.c_str(), n_clients, duration_s,
              static_cast<unsigned long long>(absl::GetFlag(FLAGS_seed)));
  std::fflush(stdout);

  OracleTotals totals;
  const absl::Time begin = absl::Now();
  const absl::Time until = begin + absl::Seconds(duration_s);
  OracleClientConfig config;
  config.dataset = kDataset;
  config.seed = absl::GetFlag(FLAGS_seed);
  std::vector<std::thread> clients;
  for (int i = 0; i < n_clients; ++i) {
    clients.emplace_back(OracleClientLoop, i, endpoints, until, config,
                         &totals);
  }

  // Daemon 0's resources, every second.
  std::vector<std::pair<absl::Duration, Resources>> samples;
  const absl::Duration settle =
      std::min(absl::Seconds(60), absl::Seconds(duration_s) / 3);
  std::thread sampler([&] {
    while (absl::Now() < until) {
      samples.push_back({absl::Now() - begin, Sample(daemons[0]->pid())});
      absl::SleepFor(absl::Seconds(1));
    }
  });

  // Faults, until the end.
  auto count = [&totals](const std::string& fault) { totals.Count(fault); };
  std::vector<int> workers(n_daemons, 2);
  bool ok = true;
  while (absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(500 + rng() % 2500));
    if (absl::Now() >= until) break;
    const int victim = 1 + static_cast<int>(rng() % (n_daemons - 1));
    switch (rng() % 6) {
      case 0:
      case 1: {
        const bool kill9 = rng() % 2 == 0;
        if (kill9) {
          daemons[victim]->Kill();
        } else {
          daemons[victim]->Stop();
        }
        count(kill9 ? "kill -9 and restart" : "SIGTERM and restart");
        absl::SleepFor(absl::Milliseconds(200 + rng() % 1500));
        absl::StatusOr<std::unique_ptr<DaemonProcess>> again =
            start(ports[victim]);
        if (!again.ok()) {
          std::fprintf(stderr, "soak: restart on port %d: %s\n", ports[victim],
                       again.status().ToString().c_str());
          ok = false;
          break;
        }
        daemons[victim] = *std::move(again);
        workers[victim] = 2;
        break;
      }
      case 2: {
        workers[victim] = workers[victim] == 1 ? 1 + static_cast<int>(rng() % 4)
                                               : 1;
        if (SetWorkers(daemons[victim]->endpoint(), workers[victim]).ok()) {
          count("SetWorkers");
        }
        break;
      }
      case 3:
        SendGarbage(ports[rng() % n_daemons], rng);
        count("garbage bytes");
        break;
      case 4:
        SendMalformed(ports[rng() % n_daemons], rng);
        count("malformed requests");
        break;
      case 5:
        break;  // a quiet spell
    }
    if (!ok) break;
  }
  for (std::thread& t : clients) t.join();
  sampler.join();

  // The oracle: every delivered batch against a clean daemon.
  absl::StatusOr<std::unique_ptr<DaemonProcess>> reference = start(0);
  if (!reference.ok()) {
    std::fprintf(stderr, "soak: reference: %s\n",
                 reference.status().ToString().c_str());
    return 1;
  }
  absl::StatusOr<OracleResult> result =
      CheckAgainstReference((*reference)->endpoint(), totals);
  if (!result.ok()) {
    std::fprintf(stderr, "soak: %s\n", result.status().ToString().c_str());
    return 1;
  }
  if (!PrintOracleReport(*result, totals)) ok = false;
  // Growth on daemon 0 from the end of the settling time to the end.
  auto first = std::find_if(samples.begin(), samples.end(),
                            [settle](const auto& s) { return s.first >= settle; });
  if (first != samples.end()) {
    const Resources& a = first->second;
    const Resources& b = samples.back().second;
    std::printf("daemon 0 from %.0f s to %.0f s: RSS %.1f -> %.1f MiB, fds "
                "%d -> %d, threads %d -> %d\n",
                absl::ToDoubleSeconds(first->first),
                absl::ToDoubleSeconds(samples.back().first),
                a.rss_bytes / 1048576.0, b.rss_bytes / 1048576.0, a.fds, b.fds,
                a.threads, b.threads);
    const int rss_bound_mib = absl::GetFlag(FLAGS_max_rss_growth_mib);
    const bool rss_grew = rss_bound_mib >= 0 &&
                          b.rss_bytes - a.rss_bytes >
                              (static_cast<int64_t>(rss_bound_mib) << 20);
    if (rss_grew || b.fds - a.fds > kMaxFdGrowth ||
        b.threads - a.threads > kMaxThreadGrowth) {
      std::printf("soak: daemon 0 grew beyond the bounds (RSS %d MiB, fds "
                  "%d, threads %d)\n",
                  rss_bound_mib, kMaxFdGrowth, kMaxThreadGrowth);
      ok = false;
    }
  }
  std::printf("soak: %s\n", ok ? "passed" : "FAILED");
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace batchd::testing

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  // A daemon killed mid-write must not take the soak with it.
  signal(SIGPIPE, SIG_IGN);
  return batchd::testing::Run();
}
