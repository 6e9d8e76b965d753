// batchd: the daemon. Serves the datasets named in --config and --dataset
// flags until SIGINT or SIGTERM, then drains (see BatchdServer::Drain) for at
// most --drain-deadline and exits 0. The flags (daemon_flags.h) are read
// into DaemonOptions, which server/options/ checks and turns into the
// server's options; this file starts, drains and stops the server.
//
//   batchd --dataset imagenet=/data/imagenet/train --workers 8 --port 7070
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/cpu_count.h"
#include "common/malloc_tuning.h"
#include "common/status_macros.h"
#include "server/dataset/dataset.h"
#include "server/daemon_flags.h"
#include "server/options/daemon_options.h"
#include "server/server_lib.h"
#include "server/storage/counting_object_store.h"
#include "server/storage/shard_cache.h"

namespace {

// After the drain and the server's own shutdown grace, how long the
// daemon still waits for gRPC to let go before it exits anyway. gRPC 1.51's
// Server::Shutdown can wait several seconds past its deadline when a client
// stopped reading a stream that was then cancelled (its connection is still
// being torn down; tests/lifecycle_e2e_test.cc reproduces it), and the
// process must still end on time: a Kubernetes pod is killed at the end of
// its termination grace.
constexpr absl::Duration kExitGrace = absl::Seconds(2);

constexpr char kUsage[] =
    "serves decoded, augmented image batches over gRPC.\n"
    "Usage: batchd --dataset name=path [--dataset ...] [--config file]\n"
    "              [--port 7070] [--workers N|auto] [--max-buffer-bytes B]\n"
    "              [--metrics-port 7071] [--drain-deadline 10s]\n"
    "              [--host 0.0.0.0 --tls-cert F --tls-key F] "
    "[--auth-token-file F]\n"
    "       batchd top [--endpoint host:port,...] [--once]  (= batchd-top)\n"
    "Flags may be spelled with '-' or '_'.";

// absl flags are spelled with '_'; accept '-' too (--max-buffer-bytes).
// Pulls out every --dataset value, which may be repeated.
std::vector<char*> NormaliseArgs(int argc, char** argv,
                                 std::vector<std::string>* storage,
                                 std::vector<std::string>* datasets) {
  storage->reserve(argc);
  std::vector<char*> out = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--dataset" || arg == "-dataset") {
      if (i + 1 < argc) datasets->push_back(argv[++i]);
      else datasets->push_back("");
      continue;
    }
    if (absl::StartsWith(arg, "--dataset=")) {
      datasets->push_back(arg.substr(strlen("--dataset=")));
      continue;
    }
    if (absl::StartsWith(arg, "--")) {
      const size_t eq = arg.find('=');
      std::string name = arg.substr(2, eq == std::string::npos ? arg.npos
                                                               : eq - 2);
      absl::StrReplaceAll({{"-", "_"}}, &name);
      arg = absl::StrCat("--", name,
                         eq == std::string::npos ? "" : arg.substr(eq));
    }
    storage->push_back(std::move(arg));
    out.push_back(storage->back().data());
  }
  return out;
}

// Writes `port` to `path` (if set); write then rename, so a reader never
// sees a partial file.
void WritePortFile(const std::string& path, int port) {
  if (path.empty()) return;
  const std::string tmp = path + ".tmp";
  std::ofstream(tmp) << port << "\n";
  std::rename(tmp.c_str(), path.c_str());
}

// `batchd top ...` runs the batchd-top tool: next to this binary (an
// install), in ../client/ (a build tree), or on PATH.
int ExecTop(int argc, char** argv) {
  std::vector<std::string> candidates;
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) {
    std::string dir(self, n);
    dir = dir.substr(0, dir.rfind('/'));
    candidates.push_back(dir + "/batchd-top");
    candidates.push_back(dir + "/../client/batchd-top");
  }
  std::vector<char*> args = {const_cast<char*>("batchd-top")};
  for (int i = 2; i < argc; ++i) args.push_back(argv[i]);
  args.push_back(nullptr);
  for (const std::string& path : candidates) {
    if (access(path.c_str(), X_OK) == 0) execv(path.c_str(), args.data());
  }
  execvp("batchd-top", args.data());
  std::fprintf(stderr, "batchd: cannot run batchd-top: %s\n",
               strerror(errno));
  return 2;
}

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "batchd: %s\n", std::string(status.message()).c_str());
  return 2;
}

// Loads the datasets of --config and --dataset into `server`, with
// --cache-dir for the remote ones, and logs each. Remote transfers end
// with CANCELLED once `cancelled` is set.
absl::Status LoadDaemonDatasets(
    const batchd::server::DaemonOptions& options,
    std::shared_ptr<const std::atomic<bool>> cancelled,
    batchd::server::ServerOptions* server) {
  batchd::v1::DaemonConfig config;
  if (!options.config.empty()) {
    ASSIGN_OR_RETURN(config, batchd::server::ReadConfigFile(options.config));
  }
  for (const std::string& flag : options.datasets) {
    ASSIGN_OR_RETURN(*config.add_datasets(),
                     batchd::server::ParseDatasetFlag(flag));
  }
  batchd::server::RemoteOptions remote;
  remote.counters = std::make_shared<batchd::server::ObjectStoreCounters>();
  remote.connections = options.remote_connections;
  remote.max_shards = options.max_shards;
  remote.s3_request_cost_bytes = options.s3_request_cost_bytes;
  remote.http_request_cost_bytes = options.http_request_cost_bytes;
  remote.redirects = options.remote_redirects == "same-origin"
                         ? batchd::server::RemoteRedirects::kSameOrigin
                         : batchd::server::RemoteRedirects::kNone;
  remote.cancelled = std::move(cancelled);
  remote.low_speed_bytes_per_s = options.remote_low_speed_bytes_per_s;
  remote.low_speed_time = absl::Seconds(options.remote_low_speed_seconds);
  if (!options.cache_dir.empty()) {
    batchd::server::ShardCacheOptions cache_options;
    // Shards in a directory of their own (the bound covers its files);
    // the remote index sidecars beside it.
    cache_options.dir = absl::StrCat(options.cache_dir, "/shards");
    cache_options.disk_bytes = options.cache_bytes;
    cache_options.ram_bytes = options.cache_ram_bytes;
    cache_options.prefetch_threads = batchd::server::PrefetchThreadsFor(
        options.remote_connections, cache_options.chunks_in_flight);
    cache_options.range_prefetch_threads =
        options.range_prefetch
            ? batchd::server::RangePrefetchThreadsFor(options.remote_connections)
            : 0;
    absl::StatusOr<std::unique_ptr<batchd::server::ShardCache>> cache =
        batchd::server::ShardCache::Open(cache_options);
    if (!cache.ok()) {
      return absl::Status(
          cache.status().code(),
          absl::StrCat("--cache-dir: ", cache.status().message()));
    }
    remote.cache = *std::move(cache);
    remote.cache_dir = options.cache_dir;
  }
  ASSIGN_OR_RETURN(
      std::vector<std::shared_ptr<const batchd::server::Dataset>> datasets,
      batchd::server::LoadDatasets(config, remote));
  if (datasets.empty()) {
    return absl::InvalidArgumentError(
        "no datasets: register one with --dataset name=path or --config");
  }
  bool any_remote = false;
  for (const auto& dataset : datasets) {
    any_remote |= dataset->remote();
    server->datasets[dataset->name()] = dataset;
    std::fprintf(stderr, "batchd: dataset %s: %llu samples, %zu classes\n",
                 dataset->name().c_str(),
                 static_cast<unsigned long long>(dataset->size()),
                 dataset->class_names().size());
  }
  if (any_remote) {
    server->pipeline.shard_cache = remote.cache;
    server->pipeline.store_counters = remote.counters;
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  using batchd::server::BatchdServer;
  if (argc > 1 && std::strcmp(argv[1], "top") == 0) return ExecTop(argc, argv);
  absl::SetProgramUsageMessage(kUsage);
  absl::FlagsUsageConfig usage_config;
  // --help lists the daemon's flags (absl's default looks for a file
  // named after the binary, batchd.cc).
  usage_config.contains_help_flags = [](absl::string_view file) {
    return absl::EndsWith(file, "server/daemon_flags.cc");
  };
  usage_config.contains_helpshort_flags = usage_config.contains_help_flags;
  usage_config.version_string = [] {
    return absl::StrCat("batchd ", batchd::server::DaemonVersion(), "\n");
  };
  absl::SetFlagsUsageConfig(usage_config);
  batchd::common::TuneMallocForLargeBuffers();
  std::vector<std::string> storage, dataset_flags;
  std::vector<char*> args = NormaliseArgs(argc, argv, &storage, &dataset_flags);
  absl::ParseCommandLine(static_cast<int>(args.size()), args.data());

  // Block the stop signals before any thread starts; main waits for them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGHUP);  // reload the token file
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  const batchd::server::DaemonOptions flags =
      batchd::server::OptionsFromFlags(std::move(dataset_flags));
  const int cpus = batchd::common::AvailableCpus();
  if (absl::Status valid = batchd::server::ValidateDaemonOptions(flags, cpus);
      !valid.ok()) {
    return Fail(valid);
  }
  batchd::server::ServerOptions options =
      batchd::server::MakeServerOptions(flags, cpus);
  // Set by SIGTERM/SIGINT during start-up, and after the drain: remote
  // transfers then end at once.
  const auto cancelled = std::make_shared<std::atomic<bool>>(false);
  {
    batchd::server::StartupSignals startup(stop_signals, flags.drain_deadline,
                                           cancelled);
    const absl::Status loaded =
        LoadDaemonDatasets(flags, cancelled, &options);
    if (const int signal = startup.Finish(); signal != 0) {
      std::fprintf(stderr, "batchd: start-up cancelled by %s; stopped\n",
                   signal == SIGTERM ? "SIGTERM" : "SIGINT");
      return 0;
    }
    if (!loaded.ok()) return Fail(loaded);
  }

  absl::StatusOr<std::unique_ptr<BatchdServer>> server =
      BatchdServer::Start(options);
  if (!server.ok()) return Fail(server.status());
  const int port = (*server)->port();
  const std::string workers_text =
      options.autoscale.enabled
          ? absl::StrCat(options.pipeline.workers, " workers (auto, ",
                         options.autoscale.policy.min_workers, "..",
                         options.max_workers, ")")
          : absl::StrCat(options.pipeline.workers, " workers");
  const batchd::v1::DaemonSecurity& security = (*server)->security();
  if (!options.listen_address.empty()) {
    std::fprintf(stderr, "batchd: serving on %s:%d (%s) with %s\n",
                 flags.host.c_str(), port,
                 security.mutual_tls() ? "mutual TLS"
                 : security.tls()      ? "TLS"
                                       : "plaintext",
                 workers_text.c_str());
  }
  if (!options.unix_socket.empty()) {
    std::fprintf(stderr, "batchd: serving on unix:%s with %s\n",
                 options.unix_socket.c_str(), workers_text.c_str());
  }
  if (const std::string shm = (*server)->shared_memory_socket(); !shm.empty()) {
    std::fprintf(stderr,
                 "batchd: shared memory for local trainers via %s\n",
                 shm.c_str());
  }
  if (security.insecure()) {
    std::fprintf(stderr,
                 "batchd: WARNING: --insecure: serving plaintext on %s; "
                 "anyone who can reach it can read every dataset and its "
                 "batches. Use --tls-cert and --tls-key off a trusted "
                 "network.\n",
                 options.listen_address.c_str());
  }
  if (security.tokens_required()) {
    std::fprintf(stderr,
                 "batchd: calls need a bearer token from %s%s\n",
                 options.auth_token_file.c_str(),
                 options.reflection ? "; reflection is off (it cannot check "
                                      "tokens)"
                                    : "");
  }
  const int metrics_port = (*server)->metrics_port();
  if (metrics_port > 0) {
    std::fprintf(stderr, "batchd: metrics at http://%s:%d/metrics\n",
                 options.metrics_host.c_str(), metrics_port);
  }
  // The metrics port first: a reader that sees the gRPC port file may
  // expect both.
  if (metrics_port > 0) {
    WritePortFile(flags.metrics_port_file, metrics_port);
  }
  WritePortFile(flags.port_file, port);

  int signal = 0;
  while (sigwait(&stop_signals, &signal) == 0 && signal == SIGHUP) {
    const absl::Status reloaded = (*server)->ReloadTokens();
    if (reloaded.ok()) {
      std::fprintf(stderr, "batchd: SIGHUP: tokens reloaded%s\n",
                   security.tokens_required() ? "" : " (none required)");
    } else {
      std::fprintf(stderr, "batchd: SIGHUP: %s; keeping the old tokens\n",
                   std::string(reloaded.message()).c_str());
    }
  }
  const char* signal_name = signal == SIGTERM ? "SIGTERM" : "SIGINT";
  std::fprintf(stderr, "batchd: %s received, draining (deadline %s)\n",
               signal_name, absl::FormatDuration(options.drain_deadline).c_str());
  const absl::Status drained =
      (*server)->Drain(options.drain_deadline, signal_name);
  if (!drained.ok()) {
    std::fprintf(stderr, "batchd: %s\n",
                 std::string(drained.message()).c_str());
  }
  // Remote reads still in flight (a slow store) end now, not at their
  // own timeouts.
  cancelled->store(true);
  absl::Notification stopped;
  std::thread watchdog([&stopped] {
    const absl::Duration limit = batchd::server::kShutdownGrace + kExitGrace;
    if (stopped.WaitForNotificationWithTimeout(limit)) return;
    std::fprintf(stderr,
                 "batchd: client connections still open %s after the drain; "
                 "exiting without waiting for them\n",
                 absl::FormatDuration(limit).c_str());
    std::fflush(stderr);
    _exit(0);
  });
  (*server)->Stop();
  server->reset();
  stopped.Notify();
  watchdog.join();
  std::fprintf(stderr, "batchd: stopped\n");
  return 0;
}
