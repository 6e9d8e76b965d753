// DaemonOptions: the daemon's command line as given, one field per flag of
// the same name (--max-buffer-bytes is max_buffer_bytes); what each means
// is in the flag's help (server/main.cc, `batchd --help`). The field
// defaults are the flags' defaults. ValidateDaemonOptions is the one check
// of every range and combination; MakeServerOptions then works out the
// ServerOptions that BatchdServer::Start takes. Both are pure: no files
// are read and nothing is started, so that main.cc is only a flag layer.
//
//   DaemonOptions options;                 // copied from the flags
//   RETURN_IF_ERROR(ValidateDaemonOptions(options, AvailableCpus()));
//   ServerOptions server = MakeServerOptions(options, AvailableCpus());
//   server.datasets = ...;                 // loaded from --dataset, --config
//
// A plain struct: no thread-safety of its own.
#ifndef BATCHD_SERVER_OPTIONS_DAEMON_OPTIONS_H_
#define BATCHD_SERVER_OPTIONS_DAEMON_OPTIONS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "server/options/server_options.h"

namespace batchd::server {

struct DaemonOptions {
  // Datasets: --config, and every --dataset name=path (repeatable).
  std::string config;
  std::vector<std::string> datasets;

  // Listeners and security.
  std::string host = "127.0.0.1";
  int port = 7070;  // -1: no TCP listener
  std::string unix_socket;
  bool shm = true;
  std::string shm_socket;
  std::string shm_allowed_uids;  // "1000,1001"; empty: the daemon's uid
  int shm_handshake_timeout_ms = 500;
  int shm_max_handshakes_per_uid = 8;
  std::string tls_cert;
  std::string tls_key;
  std::string tls_client_ca;
  int tls_reload_interval = 10;  // seconds
  std::string auth_token_file;
  bool insecure = false;

  // The metrics endpoint.
  std::string metrics_host;  // empty: --host, or 127.0.0.1 with --port -1
  std::string port_file;
  int metrics_port = -1;  // -1: none
  std::string metrics_port_file;
  bool metrics_auth = false;
  int metrics_max_connections = 128;
  absl::Duration metrics_request_deadline = absl::Seconds(5);
  int timeline_max_jobs = kDefaultTimelineMaxJobs;

  // Workers and the pipeline.
  std::string workers;  // a number, "auto", or empty for the CPUs
  int min_workers = 1;
  int max_workers = 0;  // 0: the CPUs, or --workers N when more
  int readers = 2;
  uint64_t max_buffer_bytes = uint64_t{2} << 30;
  uint32_t max_batch_size = 4096;
  uint32_t default_window = 4;
  uint32_t max_window = 64;
  uint64_t idle_buffer_bytes = uint64_t{256} << 20;
  uint64_t max_image_pixels = uint64_t{64} << 20;
  std::string corrupt_policy = "substitute";  // or "decode"
  int max_scans = 500;
  absl::Duration drain_deadline = absl::Seconds(10);
  bool reflection = true;
  int64_t log_augment_sample = -1;  // a dataset index; -1: none

  // Per-job, per-identity and per-connection limits, batch sharing.
  uint32_t max_streams_per_job = 256;
  double max_job_buffer_share = 0.5;  // of max_buffer_bytes, in (0, 1]
  double max_identity_buffer_share = 0.5;  // of max_buffer_bytes, (0, 1]
  uint32_t max_open_streams = 1024;
  uint32_t max_streams_per_identity = 0;  // 0: half of max_open_streams
  absl::Duration open_timeout = absl::Seconds(10);
  uint32_t max_planless_streams_per_connection = 64;
  bool share_batches = true;
  int64_t shared_batch_bytes = -1;  // -1: max_buffer_bytes / 16

  // Remote datasets and caches.
  int remote_connections = 32;
  // Fetch the members of accepted batches ahead by ranges, for shards read
  // by ranges (ShardCache::PrefetchMembers), on half the connections.
  bool range_prefetch = false;
  std::string remote_redirects = "none";  // or "same-origin"
  uint64_t s3_request_cost_bytes = 64 << 10;
  uint64_t http_request_cost_bytes = 16 << 10;
  // A store request slower than this over remote_low_speed_seconds fails
  // (retried, then the sample is substituted); 0: no minimum.
  int64_t remote_low_speed_bytes_per_s = 1024;
  int64_t remote_low_speed_seconds = 10;
  uint64_t max_shards = 1000000;
  uint64_t read_cache_bytes = 0;
  uint64_t decoded_cache_bytes = 0;
  std::string cache_dir;
  uint64_t cache_bytes = uint64_t{64} << 30;
  uint64_t cache_ram_bytes = 0;
  int cache_prefetch_batches = 2;
  uint32_t max_idle_jobs = 64;

  // The transport.
  int max_concurrent_streams = 100;
  absl::Duration keepalive_time = absl::Seconds(30);
  absl::Duration keepalive_timeout = absl::Seconds(10);
  absl::Duration keepalive_min_ping_interval = absl::Seconds(5);
  absl::Duration handshake_timeout = absl::Seconds(10);
  absl::Duration max_connection_idle = absl::Minutes(5);
  int keepalive_max_ping_strikes = 2;
};

// OK when every option is in range and consistent with the others;
// otherwise INVALID_ARGUMENT whose message names the flag and says what to
// give, e.g. "--port is 99999; it must be 0..65535, or -1 for no TCP
// listener". Reports the first problem only. `available_cpus` stands for
// --max-workers 0 (common/cpu_count.h). Reads no files: a certificate or
// token file that cannot be read is reported when the server starts.
absl::Status ValidateDaemonOptions(const DaemonOptions& options,
                                   int available_cpus);

// The ServerOptions that `options` describe, without the datasets (and the
// remote datasets' shard cache and store counters), which the caller loads.
// REQUIRES: ValidateDaemonOptions(options, available_cpus).ok().
ServerOptions MakeServerOptions(const DaemonOptions& options,
                                int available_cpus);

}  // namespace batchd::server

#endif  // BATCHD_SERVER_OPTIONS_DAEMON_OPTIONS_H_
