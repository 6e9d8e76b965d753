#include "server/options/daemon_options.h"

#include <algorithm>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "server/control/autoscale_policy.h"
#include "server/observe/timeline_snapshot.h"

namespace batchd::server {
namespace {

// --max-shards at most: shard numbers are 32-bit, with room to spare.
constexpr uint64_t kMaxShardsLimit = uint64_t{1} << 31;

// The worker pool --workers, --min-workers and --max-workers ask for.
struct WorkerCounts {
  bool autoscale = false;  // --workers auto
  // The pool's size at start: --workers N, the CPUs, or under auto
  // --min-workers (the pool then grows with the trainers' demand).
  int workers = 0;
  // --max-workers, or when 0 the CPUs (--workers N when that is more).
  int max_workers = 0;
};

absl::StatusOr<WorkerCounts> ResolveWorkers(const DaemonOptions& options,
                                            int available_cpus) {
  WorkerCounts counts;
  counts.autoscale = options.workers == "auto";
  int fixed_workers = available_cpus;
  if (!counts.autoscale && !options.workers.empty() &&
      !absl::SimpleAtoi(options.workers, &fixed_workers)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--workers is \"", options.workers,
        "\"; give a number of threads, or auto"));
  }
  if (options.max_workers < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max-workers is ", options.max_workers,
        "; give a number of threads, or 0 for the CPUs available (",
        available_cpus, ")"));
  }
  counts.max_workers =
      options.max_workers > 0
          ? options.max_workers
          : std::max(available_cpus, counts.autoscale ? 1 : fixed_workers);
  counts.workers = counts.autoscale ? options.min_workers : fixed_workers;
  return counts;
}

absl::StatusOr<std::vector<uint32_t>> ParseUids(const std::string& text) {
  std::vector<uint32_t> uids;
  for (absl::string_view uid_text :
       absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    uint32_t uid = 0;
    if (!absl::SimpleAtoi(uid_text, &uid)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--shm-allowed-uids: \"", uid_text,
          "\" is not a uid; give numbers separated by commas, e.g. "
          "1000,1001"));
    }
    uids.push_back(uid);
  }
  return uids;
}

AutoscalePolicyOptions AutoscaleBounds(const DaemonOptions& options,
                                       const WorkerCounts& counts) {
  AutoscalePolicyOptions policy;
  policy.min_workers = options.min_workers;
  policy.max_workers = counts.max_workers;
  return policy;
}

}  // namespace

// The longest --remote-low-speed-seconds: a store request's own deadline
// is 2 minutes.
constexpr int64_t kMaxLowSpeedSeconds = 120;

absl::Status ValidateDaemonOptions(const DaemonOptions& options,
                                   int available_cpus) {
  if (options.remote_connections < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--remote-connections must be at least 1, not ",
                     options.remote_connections));
  }
  if (options.remote_redirects != "none" &&
      options.remote_redirects != "same-origin") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--remote-redirects is \"", options.remote_redirects,
        "\"; it must be none or same-origin"));
  }
  if (options.remote_low_speed_bytes_per_s < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--remote-low-speed-bytes-per-s is ",
        options.remote_low_speed_bytes_per_s,
        "; it must be 0 (no minimum) or more bytes per second"));
  }
  if (options.remote_low_speed_seconds < 1 ||
      options.remote_low_speed_seconds > kMaxLowSpeedSeconds) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--remote-low-speed-seconds is ", options.remote_low_speed_seconds,
        "; it must be 1..", kMaxLowSpeedSeconds,
        " (the time a store request may stay under "
        "--remote-low-speed-bytes-per-s)"));
  }
  if (options.max_shards < 1 || options.max_shards > kMaxShardsLimit) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max-shards is ", options.max_shards, "; it must be 1..",
        kMaxShardsLimit));
  }
  if (options.port < -1 || options.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--port is ", options.port,
        "; it must be 0..65535, or -1 for no TCP listener"));
  }
  if (absl::Status uids = ParseUids(options.shm_allowed_uids).status();
      !uids.ok()) {
    return uids;
  }
  if (options.shm_handshake_timeout_ms < 1 ||
      options.shm_handshake_timeout_ms > 60000) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--shm-handshake-timeout-ms is ", options.shm_handshake_timeout_ms,
        "; give 1..60000 milliseconds (a trainer sends its descriptor right "
        "after connecting; the default is 500)"));
  }
  if (options.shm_max_handshakes_per_uid < 1 ||
      options.shm_max_handshakes_per_uid > kMaxHandshakes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--shm-max-handshakes-per-uid is ", options.shm_max_handshakes_per_uid,
        "; give 1..", kMaxHandshakes));
  }
  if (!options.tls_client_ca.empty() && options.tls_cert.empty() &&
      options.tls_key.empty()) {
    return absl::InvalidArgumentError(
        "--tls-client-ca needs --tls-cert and --tls-key: mutual TLS is TLS "
        "with client certificates");
  }
  if (!(options.max_job_buffer_share > 0 &&
        options.max_job_buffer_share <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max-job-buffer-share is ", options.max_job_buffer_share,
        "; it must be in (0, 1], e.g. 0.5 for half of --max-buffer-bytes"));
  }
  if (!(options.max_identity_buffer_share > 0 &&
        options.max_identity_buffer_share <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max-identity-buffer-share is ", options.max_identity_buffer_share,
        "; it must be in (0, 1], e.g. 0.5 for half of --max-buffer-bytes"));
  }
  absl::StatusOr<WorkerCounts> counts =
      ResolveWorkers(options, available_cpus);
  if (!counts.ok()) return counts.status();
  if (options.corrupt_policy != "substitute" &&
      options.corrupt_policy != "decode") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--corrupt-policy is \"", options.corrupt_policy,
        "\"; it must be substitute or decode"));
  }
  if (options.log_augment_sample < -1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--log-augment-sample is ", options.log_augment_sample,
        "; give a sample's dataset index, or -1 (the default) for none"));
  }
  if (options.shared_batch_bytes < -1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--shared-batch-bytes is ", options.shared_batch_bytes,
        "; give bytes, or -1 for a sixteenth of --max-buffer-bytes"));
  }
  if (options.metrics_auth && options.auth_token_file.empty()) {
    return absl::InvalidArgumentError(
        "--metrics-auth checks the tokens of --auth-token-file; give that "
        "file too");
  }
  if (options.metrics_port < -1 || options.metrics_port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--metrics-port is ", options.metrics_port,
        "; it must be 0..65535, or -1 for no metrics endpoint"));
  }
  if (options.timeline_max_jobs < 1 ||
      options.timeline_max_jobs > kMaxTimelineMaxJobs) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--timeline-max-jobs is ", options.timeline_max_jobs,
        "; give 1..", kMaxTimelineMaxJobs,
        " (the live page draws that many jobs, the rest summed into "
        "\"_other\")"));
  }
  if (counts->autoscale) {
    if (absl::Status valid =
            ValidateAutoscalePolicyOptions(AutoscaleBounds(options, *counts));
        !valid.ok()) {
      return valid;
    }
  }
  if (counts->workers < 1 || counts->workers > counts->max_workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("--workers is ", counts->workers, "; it must be 1..",
                     counts->max_workers, " (--max-workers)"));
  }
  if (options.port == -1 && options.unix_socket.empty()) {
    return absl::InvalidArgumentError(
        "nothing to listen on: give a --port, or --unix-socket PATH");
  }
  if (options.max_streams_per_job < 1) {
    return absl::InvalidArgumentError(
        "--max-streams-per-job must be at least 1");
  }
  if (options.max_open_streams < 1) {
    return absl::InvalidArgumentError("--max-open-streams must be at least 1");
  }
  if (options.max_streams_per_identity > options.max_open_streams) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max-streams-per-identity is ", options.max_streams_per_identity,
        ", more than --max-open-streams (", options.max_open_streams,
        "); give at most that, or 0 for half of it"));
  }
  if (options.max_planless_streams_per_connection < 1) {
    return absl::InvalidArgumentError(
        "--max-planless-streams-per-connection must be at least 1");
  }
  if (options.open_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--open-timeout is ",
                     absl::FormatDuration(options.open_timeout),
                     "; it must be positive"));
  }
  if (options.drain_deadline < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--drain-deadline is ",
                     absl::FormatDuration(options.drain_deadline),
                     "; it must not be negative"));
  }
  // gRPC enforces a floor of 10 s on keepalive_time for clients, none for
  // servers; below 1 s, pings would cost more than the dead peers they find.
  if (options.keepalive_time < absl::Seconds(1) ||
      options.keepalive_timeout < absl::Seconds(1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--keepalive-time is ", absl::FormatDuration(options.keepalive_time),
        " and --keepalive-timeout ",
        absl::FormatDuration(options.keepalive_timeout),
        "; both must be at least 1s"));
  }
  if (options.handshake_timeout < absl::Milliseconds(100) ||
      options.max_connection_idle < absl::Seconds(1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--handshake-timeout is ",
        absl::FormatDuration(options.handshake_timeout),
        " and --max-connection-idle ",
        absl::FormatDuration(options.max_connection_idle),
        "; they must be at least 100ms and 1s"));
  }
  if (options.keepalive_min_ping_interval < absl::ZeroDuration() ||
      options.keepalive_max_ping_strikes < 0 ||
      options.max_concurrent_streams < 0) {
    return absl::InvalidArgumentError(
        "--keepalive-min-ping-interval, --keepalive-max-ping-strikes and "
        "--max-concurrent-streams must not be negative");
  }
  return absl::OkStatus();
}

ServerOptions MakeServerOptions(const DaemonOptions& options,
                                int available_cpus) {
  // Validated: neither can fail.
  const WorkerCounts counts = ResolveWorkers(options, available_cpus).value();
  ServerOptions server;

  // Listeners and security. "::1" and other IPv6 literals need brackets
  // before the port.
  const bool bare_ipv6 = absl::StrContains(options.host, ':') &&
                         !absl::StartsWith(options.host, "[");
  if (options.port >= 0) {
    server.listen_address =
        bare_ipv6 ? absl::StrCat("[", options.host, "]:", options.port)
                  : absl::StrCat(options.host, ":", options.port);
  } else {
    server.listen_address.clear();
  }
  server.unix_socket = options.unix_socket;
  server.shm = options.shm;
  server.shared_memory.socket = options.shm_socket;
  server.shared_memory.allowed_uids =
      ParseUids(options.shm_allowed_uids).value();
  server.shared_memory.handshake_timeout =
      absl::Milliseconds(options.shm_handshake_timeout_ms);
  server.shared_memory.max_handshakes_per_uid =
      options.shm_max_handshakes_per_uid;
  server.tls.cert_file = options.tls_cert;
  server.tls.key_file = options.tls_key;
  server.tls.client_ca_file = options.tls_client_ca;
  server.tls.reload_interval = absl::Seconds(options.tls_reload_interval);
  server.auth_token_file = options.auth_token_file;
  server.insecure = options.insecure;
  server.reflection = options.reflection;

  // Workers and the pipeline.
  server.max_workers = counts.max_workers;
  server.autoscale.enabled = counts.autoscale;
  server.autoscale.policy = AutoscaleBounds(options, counts);
  server.pipeline.workers = counts.workers;
  server.pipeline.readers = std::max(1, options.readers);
  server.pipeline.decode_limits.max_pixels = options.max_image_pixels;
  server.pipeline.decode_limits.max_scans = options.max_scans;
  server.pipeline.decode_limits.decode_damaged =
      options.corrupt_policy == "decode";
  server.pipeline.read_cache_bytes = options.read_cache_bytes;
  server.pipeline.decoded_cache_bytes = options.decoded_cache_bytes;
  server.pipeline.prefetch_batches = options.cache_prefetch_batches;
  server.pipeline.idle_buffer_bytes = options.idle_buffer_bytes;
  server.pipeline.log_augment_sample = options.log_augment_sample;
  server.remote_connections = options.remote_connections;
  server.drain_deadline = options.drain_deadline;

  // The service's limits, batch sharing.
  server.service.limits.max_batch_size = options.max_batch_size;
  server.service.default_window = options.default_window;
  server.service.max_window = options.max_window;
  server.service.max_buffer_bytes = options.max_buffer_bytes;
  server.service.max_job_buffer_bytes = static_cast<uint64_t>(
      options.max_job_buffer_share *
      static_cast<double>(options.max_buffer_bytes));
  server.service.max_identity_buffer_bytes = static_cast<uint64_t>(
      options.max_identity_buffer_share *
      static_cast<double>(options.max_buffer_bytes));
  // A stream's even share of the budget: a stream of a 1x1 plan costs as
  // much budget as a place, so the budget's per-identity share bounds
  // streams too. Never more than a job's or an identity's share, so that
  // one stream always fits (--max-open-streams 1).
  server.service.min_stream_buffer_bytes =
      std::min({options.max_buffer_bytes / options.max_open_streams,
                server.service.max_job_buffer_bytes,
                server.service.max_identity_buffer_bytes});
  server.service.max_streams_per_job = options.max_streams_per_job;
  server.service.max_open_streams = options.max_open_streams;
  server.service.max_streams_per_identity =
      options.max_streams_per_identity != 0
          ? options.max_streams_per_identity
          : std::max<uint32_t>(1, options.max_open_streams / 2);
  server.service.open_timeout = options.open_timeout;
  server.service.max_planless_streams_per_connection =
      options.max_planless_streams_per_connection;
  server.max_idle_jobs = options.max_idle_jobs;
  server.share_batches = options.share_batches;
  server.shared_batches.retention_bytes =
      options.shared_batch_bytes == -1
          ? options.max_buffer_bytes / 16
          : static_cast<uint64_t>(options.shared_batch_bytes);

  // The metrics endpoint.
  server.metrics_host = options.metrics_host;
  if (server.metrics_host.empty()) {
    server.metrics_host = options.port >= 0 ? options.host : "127.0.0.1";
  }
  server.metrics_port = options.metrics_port;
  server.metrics_auth = options.metrics_auth;
  server.metrics_http.max_connections = options.metrics_max_connections;
  server.metrics_http.request_deadline = options.metrics_request_deadline;
  server.timeline_max_jobs = options.timeline_max_jobs;

  // The transport.
  server.max_concurrent_streams = options.max_concurrent_streams;
  server.keepalive_time = options.keepalive_time;
  server.keepalive_timeout = options.keepalive_timeout;
  server.handshake_timeout = options.handshake_timeout;
  server.max_connection_idle = options.max_connection_idle;
  server.min_ping_interval = options.keepalive_min_ping_interval;
  server.max_ping_strikes = options.keepalive_max_ping_strikes;
  return server;
}

}  // namespace batchd::server
