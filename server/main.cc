// batchd: the daemon. Serves the datasets named in --config and --dataset
// flags until SIGINT or SIGTERM, then drains (see BatchdServer::Drain) for at
// most --drain-deadline and exits 0.
//
//   batchd --dataset imagenet=/data/imagenet/train --workers 8 --port 7070
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
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
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/cpu_count.h"
#include "common/malloc_tuning.h"
#include "server/dataset/dataset.h"
#include "server/server_lib.h"
#include "server/storage/counting_object_store.h"
#include "server/storage/shard_cache.h"

namespace {

// A duration flag that also takes plain seconds: "10" and "2.5" are seconds,
// "10s", "1500ms", "1m30s" are absl durations.
struct FlagDuration {
  absl::Duration value;
};

bool AbslParseFlag(absl::string_view text, FlagDuration* out,
                   std::string* error) {
  double seconds = 0;
  if (absl::SimpleAtod(text, &seconds) && std::isfinite(seconds)) {
    out->value = absl::Seconds(seconds);
    return true;
  }
  if (absl::ParseDuration(text, &out->value)) return true;
  *error = "give seconds (10, 2.5) or a duration with a unit (10s, 1500ms, "
           "1m)";
  return false;
}

std::string AbslUnparseFlag(FlagDuration d) {
  return absl::FormatDuration(d.value);
}

}  // namespace

ABSL_FLAG(std::string, config, "",
          "Daemon config file (batchd.v1.DaemonConfig, protobuf text format); "
          "see deploy/batchd.conf.textproto.");
ABSL_FLAG(std::string, host, "127.0.0.1",
          "Address to listen on. Other than the loopback, it needs TLS "
          "(--tls-cert, --tls-key) or --insecure.");
ABSL_FLAG(int, port, 7070,
          "TCP port to listen on; 0 picks a free one, -1 listens on no TCP "
          "port (give --unix-socket).");
ABSL_FLAG(std::string, unix_socket, "",
          "Also listen on this Unix socket path (plaintext), for trainers on "
          "this host: connect to unix:PATH.");
ABSL_FLAG(bool, shm, true,
          "Offer same-host shared memory to trainers that connect over a "
          "Unix socket or the loopback: workers decode straight into the "
          "trainer's ring, and only headers cross the stream. false: bytes "
          "always.");
ABSL_FLAG(std::string, shm_socket, "",
          "The shared-memory side channel's Unix socket: a path, or @name "
          "for an abstract socket. Default: an abstract name unique to this "
          "process. Give a path when trainers run in another network "
          "namespace (another pod) on the same host.");
ABSL_FLAG(std::string, shm_allowed_uids, "",
          "Comma-separated uids that may attach shared memory "
          "(SO_PEERCRED). Default: the daemon's own uid.");
ABSL_FLAG(int, shm_handshake_timeout_ms, 500,
          "Milliseconds a side-channel connection may wait for its "
          "descriptor before it is answered DEADLINE_EXCEEDED (1..60000).");
ABSL_FLAG(int, shm_max_handshakes_per_uid, 8,
          "Side-channel connections of one uid waiting for their descriptor "
          "at once; a newer one takes the oldest one's place (1..64, at most "
          "64 in all).");
ABSL_FLAG(std::string, tls_cert, "",
          "Serve TLS on the TCP port with this PEM certificate chain (with "
          "--tls-key). The files are read again every "
          "--tls-reload-interval: replace them to rotate certificates "
          "without dropping streams.");
ABSL_FLAG(std::string, tls_key, "", "The PEM private key of --tls-cert.");
ABSL_FLAG(std::string, tls_client_ca, "",
          "Mutual TLS: require a client certificate signed by a CA in this "
          "PEM bundle.");
ABSL_FLAG(int, tls_reload_interval, 10,
          "Seconds between reads of the --tls-* files.");
ABSL_FLAG(std::string, auth_token_file, "",
          "Require `authorization: Bearer <token>` on every call but the "
          "health service, with a token from this file: one per line, "
          "`token [job]`, where a job name restricts the token to that "
          "job's streams and read-only calls. SIGHUP reads it again. Turns "
          "reflection off.");
ABSL_FLAG(bool, insecure, false,
          "Serve plaintext on an address other hosts can reach. Anyone on "
          "that network can then read every dataset; use only on a network "
          "you trust.");
ABSL_FLAG(std::string, metrics_host, "",
          "Address of the metrics HTTP server; empty (the default) is "
          "--host, or 127.0.0.1 without a TCP port. /metrics carries no "
          "secrets: counts, timings and job names.");
ABSL_FLAG(std::string, port_file, "",
          "If set, the bound port is written to this file once serving.");
ABSL_FLAG(int, metrics_port, -1,
          "Serve Prometheus metrics at http://HOST:PORT/metrics; 0 picks a "
          "free port, -1 (the default) serves none.");
ABSL_FLAG(std::string, metrics_port_file, "",
          "If set, the bound metrics port is written to this file once "
          "serving.");
ABSL_FLAG(bool, metrics_auth, false,
          "Require a token from --auth-token-file on the metrics port too "
          "(/metrics, the live page, /api/timeline): `Authorization: Bearer "
          "<token>`, or HTTP Basic with the token as the password.");
ABSL_FLAG(int, metrics_max_connections, 128,
          "Connections the metrics port serves at once; more are answered "
          "503 and closed at once.");
ABSL_FLAG(FlagDuration, metrics_request_deadline,
          FlagDuration{absl::Seconds(5)},
          "Time a request on the metrics port gets, from its first byte "
          "awaited to its answer sent; a slower peer is cut off.");
ABSL_FLAG(std::string, workers, "",
          "Decode worker threads, shared by all streams: a number, or "
          "\"auto\" to size the pool from the trainers' measured wait, "
          "between --min-workers and --max-workers (docs/autoscaling.md). "
          "Default: the CPUs this process may use.");
ABSL_FLAG(int, min_workers, 1, "Fewest decode workers under --workers auto.");
ABSL_FLAG(int, max_workers, 0,
          "Most decode workers, under --workers auto and for SetWorkers. "
          "0 (the default): the CPUs this process may use (its CPU affinity "
          "and cgroup quota), or --workers N when that is more.");
ABSL_FLAG(int, readers, 2, "File reader threads (reads run ahead of decode).");
ABSL_FLAG(uint64_t, max_buffer_bytes, uint64_t{2} << 30,
          "Bound on batch buffer memory over all streams, bytes.");
ABSL_FLAG(uint32_t, max_batch_size, 4096, "Largest batch_size a plan may ask.");
ABSL_FLAG(uint32_t, default_window, 4,
          "Outstanding batches granted to a client that asks for 0.");
ABSL_FLAG(uint32_t, max_window, 64, "Most outstanding batches per stream.");
ABSL_FLAG(uint64_t, idle_buffer_bytes, uint64_t{256} << 20,
          "Finished batches' buffers kept mapped for the next batches of the "
          "same size (saves page faults), bytes; beyond it the oldest are "
          "freed. 0 frees every buffer at once.");
ABSL_FLAG(uint64_t, max_image_pixels, uint64_t{64} << 20,
          "Images with more pixels are substituted (TOO_MANY_PIXELS).");
ABSL_FLAG(std::string, corrupt_policy, "substitute",
          "What to do with a JPEG whose entropy-coded data is damaged or "
          "truncated: `substitute` (replace it with another sample, as for "
          "any bad file, and report it in the batch) or `decode` (deliver "
          "what libjpeg decodes, grey where data is missing, as PIL does; "
          "counted in batchd_damaged_samples_decoded_total).");
ABSL_FLAG(int, max_scans, 500,
          "Progressive JPEGs with more scans are substituted.");
ABSL_FLAG(FlagDuration, drain_deadline, FlagDuration{absl::Seconds(10)},
          "After SIGTERM or SIGINT, how long batches already requested are "
          "still built and sent before open streams are cancelled and the "
          "daemon exits; seconds (10, 2.5) or a duration (10s, 1500ms).");
ABSL_FLAG(bool, reflection, true,
          "Serve gRPC server reflection (grpcurl can then list and call the "
          "API without .proto files); --reflection=false turns it off.");
ABSL_FLAG(uint32_t, max_streams_per_job, 256,
          "Most StreamBatches calls one job (Plan.job) may have open at "
          "once; more are refused with RESOURCE_EXHAUSTED.");
ABSL_FLAG(double, max_job_buffer_share, 0.5,
          "Share of --max-buffer-bytes the streams of one job may reserve "
          "together, 0..1: one job cannot take the whole budget. With share "
          "s, 1/s jobs at their limit fill it; 1 turns the limit off.");
ABSL_FLAG(uint32_t, max_open_streams, 1024,
          "Most StreamBatches calls open at once, over all clients; more are "
          "refused with RESOURCE_EXHAUSTED.");
ABSL_FLAG(FlagDuration, open_timeout, FlagDuration{absl::Seconds(10)},
          "A StreamBatches call must send its plan (`open`) within this, or "
          "it ends with DEADLINE_EXCEEDED; seconds or a duration.");
ABSL_FLAG(uint32_t, max_planless_streams_per_peer, 64,
          "Most StreamBatches calls one client host may have open that have "
          "not sent their plan yet; more are refused with "
          "RESOURCE_EXHAUSTED.");
ABSL_FLAG(bool, share_batches, true,
          "Streams whose plans are identical in everything that decides the "
          "bytes (dataset, pipeline, seed, shuffle, batch size, layout, "
          "rank/world size, drop_last; not the job) share each batch: it "
          "is built once and sent to all. --share-batches=false builds "
          "every stream's own.");
ABSL_FLAG(int64_t, shared_batch_bytes, -1,
          "Finished shared batches kept for streams that ask for them later, "
          "bytes, evicted oldest first; -1: a sixteenth of "
          "--max-buffer-bytes. "
          "On top of the buffer budget in the memory bound.");
ABSL_FLAG(int, remote_connections, 32,
          "Requests in flight at once to the store of each remote dataset "
          "(s3://, http://, https:// paths), over kept-alive connections.");
ABSL_FLAG(uint64_t, read_cache_bytes, 0,
          "Encoded samples kept in memory for every plan and job, bytes, "
          "least recently used out; concurrent reads of one sample are "
          "made once. 0: no cache. On top of the buffer budget in the "
          "memory bound.");
ABSL_FLAG(uint64_t, decoded_cache_bytes, 0,
          "Capped decoded images (plans with pipeline.decoded_max_side) kept "
          "in memory for every plan and job, bytes, least recently used "
          "out; concurrent decodes of one image are made once. A hit gives "
          "the bytes a miss would. 0: no cache. On top of the buffer budget "
          "in the memory bound.");
ABSL_FLAG(std::string, cache_dir, "",
          "Remote TAR_SHARDS datasets (s3://, http://, https://): keep whole "
          "shards in this directory, downloaded on first read and reused "
          "across restarts (named by URL, size and ETag), and the remote "
          "index sidecars. Empty: samples are read by member range "
          "requests and shards re-indexed at every start.");
ABSL_FLAG(uint64_t, cache_bytes, uint64_t{64} << 30,
          "Bound on the shard bytes in --cache-dir, held at all times: least "
          "recently used shards are deleted before a new one is admitted; a "
          "shard larger than this is read by member ranges.");
ABSL_FLAG(uint64_t, cache_ram_bytes, 0,
          "Whole remote shards of at most a quarter of this many bytes also "
          "kept in memory, least recently used out. 0: none. On top of the "
          "buffer budget in the memory bound.");
ABSL_FLAG(int, cache_prefetch_batches, 2,
          "When a batch starts, download the shards of this many following "
          "batches into --cache-dir in the background (at most half the "
          "cache; never evicting shards in use). 0: no prefetch.");
ABSL_FLAG(uint32_t, max_idle_jobs, 64,
          "Jobs with no stream open that GetStatus, batchd top and /metrics "
          "still list, most recently active first; older ones are summed "
          "under job \"_other\", so that many short-lived job names cannot "
          "grow the daemon or its metrics.");
ABSL_FLAG(int, max_concurrent_streams, 100,
          "Most calls open at once on one client connection "
          "(GRPC_ARG_MAX_CONCURRENT_STREAMS); more wait on the client. 0: "
          "no limit.");
ABSL_FLAG(FlagDuration, keepalive_time, FlagDuration{absl::Seconds(30)},
          "The daemon pings a connection silent this long "
          "(GRPC_ARG_KEEPALIVE_TIME_MS), to notice clients that vanished.");
ABSL_FLAG(FlagDuration, keepalive_timeout, FlagDuration{absl::Seconds(10)},
          "A connection whose ping is not answered within this is closed "
          "and its streams cancelled (GRPC_ARG_KEEPALIVE_TIMEOUT_MS).");
ABSL_FLAG(FlagDuration, keepalive_min_ping_interval,
          FlagDuration{absl::Seconds(5)},
          "Shortest interval between client pings accepted without data in "
          "flight (GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS); "
          "pings without calls are allowed.");
ABSL_FLAG(FlagDuration, handshake_timeout, FlagDuration{absl::Seconds(10)},
          "A connection that has not finished its TLS and HTTP/2 handshake "
          "within this is closed (GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS).");
ABSL_FLAG(FlagDuration, max_connection_idle, FlagDuration{absl::Minutes(5)},
          "A connection with no call open for this long is closed with "
          "GOAWAY (GRPC_ARG_MAX_CONNECTION_IDLE_MS); clients reconnect when "
          "they next call.");
ABSL_FLAG(int, keepalive_max_ping_strikes, 2,
          "Too-frequent client pings tolerated before the connection is "
          "closed with GOAWAY too_many_pings (GRPC_ARG_HTTP2_MAX_PING_STRIKES); "
          "0: any number.");

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

}  // namespace

int main(int argc, char** argv) {
  using batchd::server::BatchdServer;
  if (argc > 1 && std::strcmp(argv[1], "top") == 0) return ExecTop(argc, argv);
  absl::SetProgramUsageMessage(kUsage);
  absl::FlagsUsageConfig usage_config;
  // --help lists the flags defined here (absl's default looks for a file
  // named after the binary, batchd.cc).
  usage_config.contains_help_flags = [](absl::string_view file) {
    return absl::EndsWith(file, "server/main.cc");
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

  batchd::v1::DaemonConfig config;
  if (!absl::GetFlag(FLAGS_config).empty()) {
    absl::StatusOr<batchd::v1::DaemonConfig> read =
        batchd::server::ReadConfigFile(absl::GetFlag(FLAGS_config));
    if (!read.ok()) return Fail(read.status());
    config = *std::move(read);
  }
  for (const std::string& flag : dataset_flags) {
    absl::StatusOr<batchd::v1::DatasetConfig> parsed =
        batchd::server::ParseDatasetFlag(flag);
    if (!parsed.ok()) return Fail(parsed.status());
    *config.add_datasets() = *std::move(parsed);
  }
  batchd::server::RemoteOptions remote;
  remote.counters = std::make_shared<batchd::server::ObjectStoreCounters>();
  remote.connections = absl::GetFlag(FLAGS_remote_connections);
  if (remote.connections < 1) {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("--remote-connections must be at least 1, not ",
                     remote.connections)));
  }
  if (!absl::GetFlag(FLAGS_cache_dir).empty()) {
    batchd::server::ShardCacheOptions cache_options;
    // Shards in a directory of their own (the bound covers its files);
    // the remote index sidecars beside it.
    cache_options.dir = absl::StrCat(absl::GetFlag(FLAGS_cache_dir), "/shards");
    cache_options.disk_bytes = absl::GetFlag(FLAGS_cache_bytes);
    cache_options.ram_bytes = absl::GetFlag(FLAGS_cache_ram_bytes);
    absl::StatusOr<std::unique_ptr<batchd::server::ShardCache>> cache =
        batchd::server::ShardCache::Open(cache_options);
    if (!cache.ok()) {
      return Fail(absl::Status(
          cache.status().code(),
          absl::StrCat("--cache-dir: ", cache.status().message())));
    }
    remote.cache = *std::move(cache);
    remote.cache_dir = absl::GetFlag(FLAGS_cache_dir);
  }
  absl::StatusOr<std::vector<std::shared_ptr<const batchd::server::Dataset>>>
      datasets = batchd::server::LoadDatasets(config, remote);
  if (!datasets.ok()) return Fail(datasets.status());
  bool any_remote = false;
  for (const auto& dataset : *datasets) any_remote |= dataset->remote();

  batchd::server::ServerOptions options;
  const std::string host = absl::GetFlag(FLAGS_host);
  const int port_flag = absl::GetFlag(FLAGS_port);
  if (port_flag < -1 || port_flag > 65535) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
        "--port is ", port_flag,
        "; it must be 0..65535, or -1 for no TCP listener")));
  }
  // "::1" and other IPv6 literals need brackets before the port.
  const bool bare_ipv6 = absl::StrContains(host, ':') &&
                         !absl::StartsWith(host, "[");
  if (port_flag >= 0) {
    options.listen_address = bare_ipv6
                                 ? absl::StrCat("[", host, "]:", port_flag)
                                 : absl::StrCat(host, ":", port_flag);
  } else {
    options.listen_address.clear();
  }
  options.unix_socket = absl::GetFlag(FLAGS_unix_socket);
  options.shm = absl::GetFlag(FLAGS_shm);
  options.shared_memory.socket = absl::GetFlag(FLAGS_shm_socket);
  for (absl::string_view uid_text :
       absl::StrSplit(absl::GetFlag(FLAGS_shm_allowed_uids), ',',
                      absl::SkipWhitespace())) {
    uint32_t uid = 0;
    if (!absl::SimpleAtoi(uid_text, &uid)) {
      return Fail(absl::InvalidArgumentError(absl::StrCat(
          "--shm-allowed-uids: \"", uid_text,
          "\" is not a uid; give numbers separated by commas, e.g. 1000,1001")));
    }
    options.shared_memory.allowed_uids.push_back(uid);
  }
  const int handshake_ms = absl::GetFlag(FLAGS_shm_handshake_timeout_ms);
  if (handshake_ms < 1 || handshake_ms > 60000) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
        "--shm-handshake-timeout-ms is ", handshake_ms,
        "; give 1..60000 milliseconds (a trainer sends its descriptor right "
        "after connecting; the default is 500)")));
  }
  options.shared_memory.handshake_timeout = absl::Milliseconds(handshake_ms);
  const int per_uid = absl::GetFlag(FLAGS_shm_max_handshakes_per_uid);
  if (per_uid < 1 || per_uid > batchd::server::kMaxHandshakes) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
        "--shm-max-handshakes-per-uid is ", per_uid, "; give 1..",
        batchd::server::kMaxHandshakes)));
  }
  options.shared_memory.max_handshakes_per_uid = per_uid;
  options.tls.cert_file = absl::GetFlag(FLAGS_tls_cert);
  options.tls.key_file = absl::GetFlag(FLAGS_tls_key);
  options.tls.client_ca_file = absl::GetFlag(FLAGS_tls_client_ca);
  options.tls.reload_interval =
      absl::Seconds(absl::GetFlag(FLAGS_tls_reload_interval));
  if (!options.tls.client_ca_file.empty() && !options.tls.enabled()) {
    return Fail(absl::InvalidArgumentError(
        "--tls-client-ca needs --tls-cert and --tls-key: mutual TLS is TLS "
        "with client certificates"));
  }
  options.auth_token_file = absl::GetFlag(FLAGS_auth_token_file);
  options.insecure = absl::GetFlag(FLAGS_insecure);
  const double job_share = absl::GetFlag(FLAGS_max_job_buffer_share);
  if (!(job_share > 0 && job_share <= 1)) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
        "--max-job-buffer-share is ", job_share,
        "; it must be in (0, 1], e.g. 0.5 for half of --max-buffer-bytes")));
  }
  for (const auto& dataset : *datasets) {
    options.datasets[dataset->name()] = dataset;
    std::fprintf(stderr, "batchd: dataset %s: %llu samples, %zu classes\n",
                 dataset->name().c_str(),
                 static_cast<unsigned long long>(dataset->size()),
                 dataset->class_names().size());
  }
  const std::string workers = absl::GetFlag(FLAGS_workers);
  const int cpus = batchd::common::AvailableCpus();
  const bool auto_workers = workers == "auto";
  int fixed_workers = cpus;
  if (!auto_workers && !workers.empty() &&
      !absl::SimpleAtoi(workers, &fixed_workers)) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
        "--workers is \"", workers,
        "\"; give a number of threads, or auto")));
  }
  const int max_workers_flag = absl::GetFlag(FLAGS_max_workers);
  if (max_workers_flag < 0) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
        "--max-workers is ", max_workers_flag,
        "; give a number of threads, or 0 for the CPUs available (", cpus,
        ")")));
  }
  options.max_workers =
      max_workers_flag > 0
          ? max_workers_flag
          : std::max(cpus, auto_workers ? 1 : fixed_workers);
  options.autoscale.enabled = auto_workers;
  options.autoscale.policy.min_workers = absl::GetFlag(FLAGS_min_workers);
  // Under auto the pool starts small and grows with the trainers' demand.
  options.pipeline.workers =
      auto_workers ? options.autoscale.policy.min_workers : fixed_workers;
  options.pipeline.readers = std::max(1, absl::GetFlag(FLAGS_readers));
  options.pipeline.decode_limits.max_pixels =
      absl::GetFlag(FLAGS_max_image_pixels);
  options.pipeline.decode_limits.max_scans = absl::GetFlag(FLAGS_max_scans);
  const std::string corrupt_policy = absl::GetFlag(FLAGS_corrupt_policy);
  if (corrupt_policy != "substitute" && corrupt_policy != "decode") {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
        "--corrupt-policy is \"", corrupt_policy,
        "\"; it must be substitute or decode")));
  }
  options.pipeline.decode_limits.decode_damaged = corrupt_policy == "decode";
  options.service.limits.max_batch_size = absl::GetFlag(FLAGS_max_batch_size);
  options.service.default_window = absl::GetFlag(FLAGS_default_window);
  options.service.max_window = absl::GetFlag(FLAGS_max_window);
  options.service.max_buffer_bytes = absl::GetFlag(FLAGS_max_buffer_bytes);
  options.share_batches = absl::GetFlag(FLAGS_share_batches);
  options.pipeline.read_cache_bytes = absl::GetFlag(FLAGS_read_cache_bytes);
  options.remote_connections = remote.connections;
  options.pipeline.prefetch_batches = absl::GetFlag(FLAGS_cache_prefetch_batches);
  if (any_remote) {
    options.pipeline.shard_cache = remote.cache;
    options.pipeline.store_counters = remote.counters;
  }
  options.pipeline.decoded_cache_bytes =
      absl::GetFlag(FLAGS_decoded_cache_bytes);
  {
    const int64_t retention = absl::GetFlag(FLAGS_shared_batch_bytes);
    if (retention < -1) {
      return Fail(absl::InvalidArgumentError(absl::StrCat(
          "--shared-batch-bytes is ", retention,
          "; give bytes, or -1 for a sixteenth of --max-buffer-bytes")));
    }
    options.shared_batches.retention_bytes =
        retention == -1 ? options.service.max_buffer_bytes / 16
                        : static_cast<uint64_t>(retention);
  }
  options.service.max_job_buffer_bytes = static_cast<uint64_t>(
      job_share * static_cast<double>(options.service.max_buffer_bytes));
  options.service.max_streams_per_job =
      absl::GetFlag(FLAGS_max_streams_per_job);
  options.pipeline.idle_buffer_bytes = absl::GetFlag(FLAGS_idle_buffer_bytes);
  options.metrics_host = absl::GetFlag(FLAGS_metrics_host);
  if (options.metrics_host.empty()) {
    options.metrics_host = port_flag >= 0 ? host : "127.0.0.1";
  }
  options.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  options.metrics_auth = absl::GetFlag(FLAGS_metrics_auth);
  options.metrics_http.max_connections =
      absl::GetFlag(FLAGS_metrics_max_connections);
  options.metrics_http.request_deadline =
      absl::GetFlag(FLAGS_metrics_request_deadline).value;
  if (options.metrics_auth && options.auth_token_file.empty()) {
    return Fail(absl::InvalidArgumentError(
        "--metrics-auth checks the tokens of --auth-token-file; give that "
        "file too"));
  }
  options.reflection = absl::GetFlag(FLAGS_reflection);
  options.drain_deadline = absl::GetFlag(FLAGS_drain_deadline).value;
  options.service.max_open_streams = absl::GetFlag(FLAGS_max_open_streams);
  options.max_idle_jobs = absl::GetFlag(FLAGS_max_idle_jobs);
  options.service.open_timeout = absl::GetFlag(FLAGS_open_timeout).value;
  options.service.max_planless_streams_per_peer =
      absl::GetFlag(FLAGS_max_planless_streams_per_peer);
  options.max_concurrent_streams = absl::GetFlag(FLAGS_max_concurrent_streams);
  options.keepalive_time = absl::GetFlag(FLAGS_keepalive_time).value;
  options.keepalive_timeout = absl::GetFlag(FLAGS_keepalive_timeout).value;
  options.handshake_timeout = absl::GetFlag(FLAGS_handshake_timeout).value;
  options.max_connection_idle =
      absl::GetFlag(FLAGS_max_connection_idle).value;
  options.min_ping_interval =
      absl::GetFlag(FLAGS_keepalive_min_ping_interval).value;
  options.max_ping_strikes = absl::GetFlag(FLAGS_keepalive_max_ping_strikes);
  if (options.metrics_port < -1 || options.metrics_port > 65535) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
        "--metrics-port is ", options.metrics_port,
        "; it must be 0..65535, or -1 for no metrics endpoint")));
  }

  absl::StatusOr<std::unique_ptr<BatchdServer>> server =
      BatchdServer::Start(options);
  if (!server.ok()) return Fail(server.status());
  const int port = (*server)->port();
  const std::string workers_text =
      auto_workers
          ? absl::StrCat(options.pipeline.workers, " workers (auto, ",
                         options.autoscale.policy.min_workers, "..",
                         options.max_workers, ")")
          : absl::StrCat(options.pipeline.workers, " workers");
  const batchd::v1::DaemonSecurity& security = (*server)->security();
  if (!options.listen_address.empty()) {
    std::fprintf(stderr, "batchd: serving on %s:%d (%s) with %s\n",
                 host.c_str(), port,
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
    WritePortFile(absl::GetFlag(FLAGS_metrics_port_file), metrics_port);
  }
  WritePortFile(absl::GetFlag(FLAGS_port_file), port);

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
