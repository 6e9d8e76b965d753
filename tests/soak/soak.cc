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
// The oracle: a batch is a pure function of (plan, epoch, index), so every
// delivered batch's hash is compared with the same batch from a clean
// reference daemon that saw no faults. An epoch read to its end must hold
// every batch index exactly once.
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
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <tuple>
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

// One batch delivered: which plan, epoch and index, and its pixel hash.
using BatchKey = std::tuple<int, uint64_t, uint64_t>;

struct Totals {
  absl::Mutex mu;
  std::vector<v1::Plan> plans ABSL_GUARDED_BY(mu);
  std::map<BatchKey, uint64_t> hashes ABSL_GUARDED_BY(mu);
  uint64_t delivered ABSL_GUARDED_BY(mu) = 0;
  uint64_t duplicated ABSL_GUARDED_BY(mu) = 0;
  uint64_t lost ABSL_GUARDED_BY(mu) = 0;
  uint64_t epochs_completed ABSL_GUARDED_BY(mu) = 0;
  uint64_t epochs_abandoned ABSL_GUARDED_BY(mu) = 0;
  std::vector<std::string> errors ABSL_GUARDED_BY(mu);
  absl::Duration longest_wait ABSL_GUARDED_BY(mu);
  std::map<std::string, int> faults ABSL_GUARDED_BY(mu);
};

v1::Plan RandomPlan(std::mt19937_64& rng, int client) {
  auto pick = [&rng](int lo, int hi) {
    return std::uniform_int_distribution<int>(lo, hi)(rng);
  };
  const uint32_t size = 8 * pick(2, 5);
  v1::Plan plan = pick(0, 3) == 0 ? EvalPlan(kDataset, pick(3, 12), size, rng())
                                  : TrainPlan(kDataset, pick(3, 12), size, rng());
  plan.set_world_size(pick(1, 3));
  plan.set_rank(pick(0, static_cast<int>(plan.world_size()) - 1));
  plan.set_shuffle(pick(0, 1) == 1);
  plan.set_drop_last(pick(0, 1) == 1);
  plan.mutable_pipeline()->set_layout(pick(0, 1) ? v1::LAYOUT_NCHW
                                                 : v1::LAYOUT_NHWC);
  plan.set_job(absl::StrCat("soak-client-", client));
  return plan;
}

std::string Endpoints(const std::vector<int>& ports) {
  std::vector<std::string> list;
  for (int port : ports) list.push_back(absl::StrCat("127.0.0.1:", port));
  return absl::StrJoin(list, ",");
}

// One client: random plans, epochs read to the end (or abandoned), every
// delivered batch recorded.
void ClientLoop(int id, const std::string& endpoints, absl::Time until,
                Totals* totals) {
  std::mt19937_64 rng(absl::GetFlag(FLAGS_seed) * 1000 + id);
  std::uniform_real_distribution<double> coin(0, 1);
  while (absl::Now() < until) {
    const v1::Plan plan = RandomPlan(rng, id);
    int plan_id;
    {
      absl::MutexLock lock(&totals->mu);
      plan_id = static_cast<int>(totals->plans.size());
      totals->plans.push_back(plan);
    }
    LoaderOptions options;
    options.endpoint = endpoints;
    options.plan = plan;
    options.prefetch = 2 + rng() % 5;
    options.stall_timeout = absl::Seconds(5);
    absl::StatusOr<std::unique_ptr<Loader>> loader = Loader::Create(options);
    if (!loader.ok()) {
      absl::MutexLock lock(&totals->mu);
      totals->errors.push_back(absl::StrCat("client ", id, " Create: ",
                                            loader.status().ToString()));
      absl::SleepFor(absl::Seconds(1));
      continue;
    }
    const uint64_t epochs = 1 + rng() % 3;
    for (uint64_t epoch = 0; epoch < epochs && absl::Now() < until; ++epoch) {
      absl::Status started = (*loader)->StartEpoch(epoch);
      if (!started.ok()) {
        absl::MutexLock lock(&totals->mu);
        totals->errors.push_back(
            absl::StrCat("client ", id, " StartEpoch: ", started.ToString()));
        break;
      }
      // Faults on the client side, decided up front for this epoch.
      const uint64_t batches = (*loader)->batches_per_epoch();
      const bool abandon = coin(rng) < 0.15;
      const uint64_t abandon_at = batches == 0 ? 0 : rng() % batches;
      const bool stall = coin(rng) < 0.2;
      const uint64_t stall_at = batches == 0 ? 0 : rng() % batches;
      std::set<uint64_t> seen;
      bool complete = true;
      for (uint64_t n = 0;; ++n) {
        if (abandon && n == abandon_at) {
          complete = false;
          break;
        }
        if (absl::Now() > until + absl::Seconds(30)) {
          complete = false;
          break;
        }
        if (stall && n == stall_at) {
          absl::SleepFor(absl::Milliseconds(500 + rng() % 2500));
        }
        const absl::Time asked = absl::Now();
        absl::StatusOr<client::Batch> batch = (*loader)->Next();
        const absl::Duration waited = absl::Now() - asked;
        if (!batch.ok()) {
          if (absl::IsOutOfRange(batch.status())) break;  // the epoch's end
          absl::MutexLock lock(&totals->mu);
          totals->errors.push_back(
              absl::StrCat("client ", id, " Next: ", batch.status().ToString()));
          complete = false;
          break;
        }
        const uint64_t hash = ToRecord(*batch).PixelHash();
        absl::MutexLock lock(&totals->mu);
        totals->longest_wait = std::max(totals->longest_wait, waited);
        ++totals->delivered;
        if (!seen.insert(batch->batch_index).second ||
            batch->epoch != epoch) {
          ++totals->duplicated;
          continue;
        }
        totals->hashes[{plan_id, epoch, batch->batch_index}] = hash;
      }
      absl::MutexLock lock(&totals->mu);
      if (complete) {
        ++totals->epochs_completed;
        totals->lost += batches - seen.size();
      } else {
        ++totals->epochs_abandoned;
        ++totals->faults["client dropped mid-epoch"];
        break;  // the Loader goes away with batches in flight
      }
      if (stall) ++totals->faults["stalled consumer"];
    }
  }
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

  Totals totals;
  const absl::Time begin = absl::Now();
  const absl::Time until = begin + absl::Seconds(duration_s);
  std::vector<std::thread> clients;
  for (int i = 0; i < n_clients; ++i) {
    clients.emplace_back(ClientLoop, i, endpoints, until, &totals);
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
  auto count = [&totals](const std::string& fault) {
    absl::MutexLock lock(&totals.mu);
    ++totals.faults[fault];
  };
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
  uint64_t verified = 0, wrong = 0;
  absl::MutexLock lock(&totals.mu);
  std::map<int, std::set<uint64_t>> epochs_of_plan;
  for (const auto& [key, hash] : totals.hashes) {
    epochs_of_plan[std::get<0>(key)].insert(std::get<1>(key));
  }
  for (const auto& [plan_id, epochs] : epochs_of_plan) {
    LoaderOptions options;
    options.endpoint = (*reference)->endpoint();
    options.plan = totals.plans[plan_id];
    absl::StatusOr<std::unique_ptr<Loader>> loader = Loader::Create(options);
    if (!loader.ok()) {
      std::fprintf(stderr, "soak: reference Create: %s\n",
                   loader.status().ToString().c_str());
      return 1;
    }
    for (uint64_t epoch : epochs) {
      if (!(*loader)->StartEpoch(epoch).ok()) return 1;
      absl::StatusOr<std::vector<BatchRecord>> records = ReadFrom(**loader);
      if (!records.ok()) {
        std::fprintf(stderr, "soak: reference read: %s\n",
                     records.status().ToString().c_str());
        return 1;
      }
      for (const BatchRecord& r : *records) {
        auto it = totals.hashes.find({plan_id, epoch, r.batch_index});
        if (it == totals.hashes.end()) continue;
        ++verified;
        if (it->second != r.PixelHash()) ++wrong;
      }
    }
  }

  std::printf("faults:");
  for (const auto& [fault, n] : totals.faults) {
    std::printf(" %s %d;", fault.c_str(), n);
  }
  std::printf("\nplans %zu, epochs completed %llu, abandoned %llu, batches "
              "delivered %llu\n",
              totals.plans.size(),
              static_cast<unsigned long long>(totals.epochs_completed),
              static_cast<unsigned long long>(totals.epochs_abandoned),
              static_cast<unsigned long long>(totals.delivered));
  std::printf("batches verified %llu, wrong %llu, lost %llu, duplicated %llu\n",
              static_cast<unsigned long long>(verified),
              static_cast<unsigned long long>(wrong),
              static_cast<unsigned long long>(totals.lost),
              static_cast<unsigned long long>(totals.duplicated));
  std::printf("longest trainer wait %.2f s\n",
              absl::ToDoubleSeconds(totals.longest_wait));
  for (const std::string& error : totals.errors) {
    std::printf("client error: %s\n", error.c_str());
  }
  if (wrong > 0 || totals.lost > 0 || totals.duplicated > 0 ||
      !totals.errors.empty() || verified == 0) {
    ok = false;
  }
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
