#include "server/daemon_flags.h"

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

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

// The flags' defaults: those of DaemonOptions.
const batchd::server::DaemonOptions& Defaults() {
  static const auto* const defaults = new batchd::server::DaemonOptions();
  return *defaults;
}

}  // namespace

ABSL_FLAG(std::string, config, Defaults().config,
          "Daemon config file (batchd.v1.DaemonConfig, protobuf text format); "
          "see deploy/batchd.conf.textproto.");
ABSL_FLAG(std::string, host, Defaults().host,
          "Address to listen on. Other than the loopback, it needs TLS "
          "(--tls-cert, --tls-key) or --insecure.");
ABSL_FLAG(int, port, Defaults().port,
          "TCP port to listen on; 0 picks a free one, -1 listens on no TCP "
          "port (give --unix-socket).");
ABSL_FLAG(std::string, unix_socket, Defaults().unix_socket,
          "Also listen on this Unix socket path (plaintext), for trainers on "
          "this host: connect to unix:PATH.");
ABSL_FLAG(bool, shm, Defaults().shm,
          "Offer same-host shared memory to trainers that connect over a "
          "Unix socket or the loopback: workers decode straight into the "
          "trainer's ring, and only headers cross the stream. false: bytes "
          "always.");
ABSL_FLAG(std::string, shm_socket, Defaults().shm_socket,
          "The shared-memory side channel's Unix socket: a path, or @name "
          "for an abstract socket. Default: an abstract name unique to this "
          "process. Give a path when trainers run in another network "
          "namespace (another pod) on the same host.");
ABSL_FLAG(std::string, shm_allowed_uids, Defaults().shm_allowed_uids,
          "Comma-separated uids that may attach shared memory "
          "(SO_PEERCRED). Default: the daemon's own uid.");
ABSL_FLAG(int, shm_handshake_timeout_ms, Defaults().shm_handshake_timeout_ms,
          "Milliseconds a side-channel connection may wait for its "
          "descriptor before it is answered DEADLINE_EXCEEDED (1..60000).");
ABSL_FLAG(int, shm_max_handshakes_per_uid,
          Defaults().shm_max_handshakes_per_uid,
          "Side-channel connections of one uid waiting for their descriptor "
          "at once; a newer one takes the oldest one's place (1..64, at most "
          "64 in all).");
ABSL_FLAG(std::string, tls_cert, Defaults().tls_cert,
          "Serve TLS on the TCP port with this PEM certificate chain (with "
          "--tls-key). The files are read again every "
          "--tls-reload-interval: replace them to rotate certificates "
          "without dropping streams.");
ABSL_FLAG(std::string, tls_key, Defaults().tls_key,
          "The PEM private key of --tls-cert.");
ABSL_FLAG(std::string, tls_client_ca, Defaults().tls_client_ca,
          "Mutual TLS: require a client certificate signed by a CA in this "
          "PEM bundle.");
ABSL_FLAG(int, tls_reload_interval, Defaults().tls_reload_interval,
          "Seconds between reads of the --tls-* files.");
ABSL_FLAG(std::string, auth_token_file, Defaults().auth_token_file,
          "Require `authorization: Bearer <token>` on every call but the "
          "health service, with a token from this file: one per line, "
          "`token [job]`, where a job name restricts the token to that "
          "job's streams and read-only calls. SIGHUP reads it again. Turns "
          "reflection off.");
ABSL_FLAG(bool, insecure, Defaults().insecure,
          "Serve plaintext on an address other hosts can reach. Anyone on "
          "that network can then read every dataset; use only on a network "
          "you trust.");
ABSL_FLAG(std::string, metrics_host, Defaults().metrics_host,
          "Address of the metrics HTTP server; empty (the default) is "
          "--host, or 127.0.0.1 without a TCP port. /metrics carries no "
          "secrets: counts, timings and job names.");
ABSL_FLAG(std::string, port_file, Defaults().port_file,
          "If set, the bound port is written to this file once serving.");
ABSL_FLAG(int, metrics_port, Defaults().metrics_port,
          "Serve Prometheus metrics at http://HOST:PORT/metrics; 0 picks a "
          "free port, -1 (the default) serves none.");
ABSL_FLAG(std::string, metrics_port_file, Defaults().metrics_port_file,
          "If set, the bound metrics port is written to this file once "
          "serving.");
ABSL_FLAG(bool, metrics_auth, Defaults().metrics_auth,
          "Require a token from --auth-token-file on the metrics port too "
          "(/metrics, the live page, /api/timeline): `Authorization: Bearer "
          "<token>`, or HTTP Basic with the token as the password.");
ABSL_FLAG(int, metrics_max_connections, Defaults().metrics_max_connections,
          "Connections the metrics port serves at once; more are answered "
          "503 and closed at once.");
ABSL_FLAG(FlagDuration, metrics_request_deadline,
          FlagDuration{Defaults().metrics_request_deadline},
          "Time a request on the metrics port gets, from its first byte "
          "awaited to its answer sent; a slower peer is cut off.");
ABSL_FLAG(int, timeline_max_jobs, Defaults().timeline_max_jobs,
          "Jobs drawn one by one on the live page and in /api/timeline: "
          "those that sent the most images over the last 15 minutes; the "
          "rest are summed into one series, \"_other\". 1..1024.");
ABSL_FLAG(std::string, workers, Defaults().workers,
          "Decode worker threads, shared by all streams: a number, or "
          "\"auto\" to size the pool from the trainers' measured wait, "
          "between --min-workers and --max-workers (docs/autoscaling.md). "
          "Default: the CPUs this process may use.");
ABSL_FLAG(int, min_workers, Defaults().min_workers,
          "Fewest decode workers under --workers auto.");
ABSL_FLAG(int, max_workers, Defaults().max_workers,
          "Most decode workers, under --workers auto and for SetWorkers. "
          "0 (the default): the CPUs this process may use (its CPU affinity "
          "and cgroup quota), or --workers N when that is more.");
ABSL_FLAG(int, readers, Defaults().readers,
          "File reader threads (reads run ahead of decode).");
ABSL_FLAG(uint64_t, max_buffer_bytes, Defaults().max_buffer_bytes,
          "Bound on batch buffer memory over all streams, bytes.");
ABSL_FLAG(uint32_t, max_batch_size, Defaults().max_batch_size,
          "Largest batch_size a plan may ask.");
ABSL_FLAG(uint32_t, default_window, Defaults().default_window,
          "Outstanding batches granted to a client that asks for 0.");
ABSL_FLAG(uint32_t, max_window, Defaults().max_window,
          "Most outstanding batches per stream.");
ABSL_FLAG(uint64_t, idle_buffer_bytes, Defaults().idle_buffer_bytes,
          "Finished batches' buffers kept mapped for the next batches of the "
          "same size (saves page faults), bytes; beyond it the oldest are "
          "freed. 0 frees every buffer at once.");
ABSL_FLAG(uint64_t, max_image_pixels, Defaults().max_image_pixels,
          "Images with more pixels are substituted (TOO_MANY_PIXELS).");
ABSL_FLAG(std::string, corrupt_policy, Defaults().corrupt_policy,
          "What to do with a JPEG whose entropy-coded data is damaged or "
          "truncated: `substitute` (replace it with another sample, as for "
          "any bad file, and report it in the batch) or `decode` (deliver "
          "what libjpeg decodes, grey where data is missing, as PIL does; "
          "counted in batchd_damaged_samples_decoded_total).");
ABSL_FLAG(int, max_scans, Defaults().max_scans,
          "Progressive JPEGs with more scans are substituted.");
ABSL_FLAG(FlagDuration, drain_deadline, FlagDuration{Defaults().drain_deadline},
          "After SIGTERM or SIGINT, how long batches already requested are "
          "still built and sent before open streams are cancelled and the "
          "daemon exits; seconds (10, 2.5) or a duration (10s, 1500ms).");
ABSL_FLAG(bool, reflection, Defaults().reflection,
          "Serve gRPC server reflection (grpcurl can then list and call the "
          "API without .proto files); --reflection=false turns it off.");
ABSL_FLAG(uint32_t, max_streams_per_job, Defaults().max_streams_per_job,
          "Most StreamBatches calls one job (Plan.job) may have open at "
          "once; more are refused with RESOURCE_EXHAUSTED.");
ABSL_FLAG(double, max_job_buffer_share, Defaults().max_job_buffer_share,
          "Share of --max-buffer-bytes the streams of one job may reserve "
          "together, 0..1: one job cannot take the whole budget. With share "
          "s, 1/s jobs at their limit fill it; 1 turns the limit off.");
ABSL_FLAG(double, max_identity_buffer_share,
          Defaults().max_identity_buffer_share,
          "Share of --max-buffer-bytes the streams of one identity (a token "
          "of --auth-token-file, else a client host) may reserve together, "
          "0..1; every stream is charged at least --max-buffer-bytes / "
          "--max-open-streams, whatever its plan asks.");
ABSL_FLAG(uint32_t, max_open_streams, Defaults().max_open_streams,
          "Most StreamBatches calls open at once, over all clients. When "
          "full, the oldest call without a plan ends to admit a new one; "
          "with none, a caller below its fair share (this divided by the "
          "identities holding streams) takes the newest stream of the "
          "identity holding the most; else RESOURCE_EXHAUSTED.");
ABSL_FLAG(uint32_t, max_streams_per_identity,
          Defaults().max_streams_per_identity,
          "Most StreamBatches calls one identity (a token of "
          "--auth-token-file, else a client host) may have open; at the cap "
          "its oldest call without a plan ends to admit a new one, else "
          "RESOURCE_EXHAUSTED. 0 (the default): half of --max-open-streams.");
ABSL_FLAG(FlagDuration, open_timeout, FlagDuration{Defaults().open_timeout},
          "A StreamBatches call must send its plan (`open`) within this, or "
          "it ends with DEADLINE_EXCEEDED; seconds or a duration.");
ABSL_FLAG(uint32_t, max_planless_streams_per_connection,
          Defaults().max_planless_streams_per_connection,
          "Most StreamBatches calls one connection may have open that have "
          "not sent their plan yet; at the cap the connection's oldest such "
          "call ends with RESOURCE_EXHAUSTED to admit the new one.");
ABSL_FLAG(bool, share_batches, Defaults().share_batches,
          "Streams whose plans are identical in everything that decides the "
          "bytes (dataset, pipeline, seed, shuffle, batch size, layout, "
          "rank/world size, drop_last; not the job) share each batch: it "
          "is built once and sent to all. --share-batches=false builds "
          "every stream's own.");
ABSL_FLAG(int64_t, shared_batch_bytes, Defaults().shared_batch_bytes,
          "Finished shared batches kept for streams that ask for them later, "
          "bytes, evicted oldest first; -1: a sixteenth of "
          "--max-buffer-bytes. "
          "On top of the buffer budget in the memory bound.");
ABSL_FLAG(int, remote_connections, Defaults().remote_connections,
          "Requests in flight at once to the store of each remote dataset "
          "(s3://, http://, https:// paths), over kept-alive connections.");
ABSL_FLAG(bool, range_prefetch, Defaults().range_prefetch,
          "With --cache-dir: fetch the image members of accepted batches "
          "ahead, many requests at once (half of --remote-connections), for "
          "shards the cache reads by member ranges: for stores with high "
          "latency (docs/datasets.md). Off by default: with a shard-aware "
          "shuffle, a shard's reads can go by ranges ahead and then whole, "
          "fetching some members twice.");
ABSL_FLAG(uint64_t, s3_request_cost_bytes, Defaults().s3_request_cost_bytes,
          "What one request to an s3:// store weighs against a byte when the "
          "shard cache chooses between downloading a shard whole and "
          "reading just the members the plans need by ranges. The default "
          "(64 KiB) is about what a GET costs in time with a few tens of "
          "connections in flight; raise it for a store far away, lower it "
          "toward 4 KiB when internet egress is what you pay for.");
ABSL_FLAG(uint64_t, http_request_cost_bytes,
          Defaults().http_request_cost_bytes,
          "The same for http:// and https:// stores (default 16 KiB: a "
          "kept-alive request to a nearby web server).");
ABSL_FLAG(std::string, remote_redirects, Defaults().remote_redirects,
          "HTTP redirects that unsigned http:// and https:// datasets "
          "follow: none (the default: a 3xx answer is an error naming its "
          "target), or same-origin (only to the same scheme, host and port; "
          "at most 5). Signed s3:// requests follow none.");
ABSL_FLAG(int64_t, remote_low_speed_bytes_per_s,
          Defaults().remote_low_speed_bytes_per_s,
          "A request to a remote dataset's store that transfers fewer bytes "
          "per second than this for --remote-low-speed-seconds fails (it is "
          "retried, then its sample is substituted), and the store is named "
          "slow in the log and the daemon's verdict: a store that drips "
          "costs seconds, not the 2-minute request deadline. 0: no minimum.");
ABSL_FLAG(int64_t, remote_low_speed_seconds,
          Defaults().remote_low_speed_seconds,
          "How long a store request may stay under "
          "--remote-low-speed-bytes-per-s, seconds (1..120).");
ABSL_FLAG(uint64_t, max_shards, Defaults().max_shards,
          "Most shards a remote dataset may have, and most keys an s3:// "
          "prefix listing may return (.tar or not): past it, or when the "
          "store repeats a continuation token, the daemon refuses the "
          "dataset at start instead of growing without bound.");
ABSL_FLAG(uint64_t, read_cache_bytes, Defaults().read_cache_bytes,
          "Encoded samples kept in memory for every plan and job, bytes, "
          "least recently used out; concurrent reads of one sample are "
          "made once. 0: no cache. On top of the buffer budget in the "
          "memory bound.");
ABSL_FLAG(int64_t, log_augment_sample, Defaults().log_augment_sample,
          "Debugging: each time the sample with this dataset index is built "
          "by a plan with augmentation ops (pipeline.augment), write its "
          "drawn calls to stderr as torchvision functional calls, one line "
          "with the plan's label, the epoch and the sample. -1 (the "
          "default): never.");
ABSL_FLAG(uint64_t, decoded_cache_bytes, Defaults().decoded_cache_bytes,
          "Capped decoded images (plans with pipeline.decoded_max_side) kept "
          "in memory for every plan and job, bytes, least recently used "
          "out; concurrent decodes of one image are made once. A hit gives "
          "the bytes a miss would. 0: no cache. On top of the buffer budget "
          "in the memory bound.");
ABSL_FLAG(std::string, cache_dir, Defaults().cache_dir,
          "Remote TAR_SHARDS datasets (s3://, http://, https://): keep whole "
          "shards in this directory, downloaded on first read and reused "
          "across restarts (named by URL, size and ETag), and the remote "
          "index sidecars. Empty: samples are read by member range "
          "requests and shards re-indexed at every start.");
ABSL_FLAG(uint64_t, cache_bytes, Defaults().cache_bytes,
          "Bound on the shard bytes in --cache-dir, held at all times: least "
          "recently used shards are deleted before a new one is admitted; a "
          "shard larger than this is read by member ranges.");
ABSL_FLAG(uint64_t, cache_ram_bytes, Defaults().cache_ram_bytes,
          "Whole remote shards of at most a quarter of this many bytes also "
          "kept in memory, least recently used out. 0: none. On top of the "
          "buffer budget in the memory bound.");
ABSL_FLAG(int, cache_prefetch_batches, Defaults().cache_prefetch_batches,
          "When a batch starts, download the shards of this many following "
          "batches into --cache-dir in the background (at most half the "
          "cache; never evicting shards in use). 0: no prefetch.");
ABSL_FLAG(uint32_t, max_idle_jobs, Defaults().max_idle_jobs,
          "Jobs with no stream open that GetStatus, batchd top and /metrics "
          "still list, most recently active first; older ones are summed "
          "under job \"_other\", so that many short-lived job names cannot "
          "grow the daemon or its metrics.");
ABSL_FLAG(int, max_concurrent_streams, Defaults().max_concurrent_streams,
          "Most calls open at once on one client connection "
          "(GRPC_ARG_MAX_CONCURRENT_STREAMS); more wait on the client. 0: "
          "no limit.");
ABSL_FLAG(FlagDuration, keepalive_time, FlagDuration{Defaults().keepalive_time},
          "The daemon pings a connection silent this long "
          "(GRPC_ARG_KEEPALIVE_TIME_MS), to notice clients that vanished.");
ABSL_FLAG(FlagDuration, keepalive_timeout,
          FlagDuration{Defaults().keepalive_timeout},
          "A connection whose ping is not answered within this is closed "
          "and its streams cancelled (GRPC_ARG_KEEPALIVE_TIMEOUT_MS).");
ABSL_FLAG(FlagDuration, keepalive_min_ping_interval,
          FlagDuration{Defaults().keepalive_min_ping_interval},
          "Shortest interval between client pings accepted without data in "
          "flight (GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS); "
          "pings without calls are allowed.");
ABSL_FLAG(FlagDuration, handshake_timeout,
          FlagDuration{Defaults().handshake_timeout},
          "A connection that has not finished its TLS and HTTP/2 handshake "
          "within this is closed (GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS).");
ABSL_FLAG(FlagDuration, max_connection_idle,
          FlagDuration{Defaults().max_connection_idle},
          "A connection with no call open for this long is closed with "
          "GOAWAY (GRPC_ARG_MAX_CONNECTION_IDLE_MS); clients reconnect when "
          "they next call.");
ABSL_FLAG(int, keepalive_max_ping_strikes,
          Defaults().keepalive_max_ping_strikes,
          "Too-frequent client pings tolerated before the connection is "
          "closed with GOAWAY too_many_pings (GRPC_ARG_HTTP2_MAX_PING_STRIKES); "
          "0: any number.");

namespace batchd::server {

DaemonOptions OptionsFromFlags(std::vector<std::string> datasets) {
  DaemonOptions o;
  o.config = absl::GetFlag(FLAGS_config);
  o.datasets = std::move(datasets);
  o.host = absl::GetFlag(FLAGS_host);
  o.port = absl::GetFlag(FLAGS_port);
  o.unix_socket = absl::GetFlag(FLAGS_unix_socket);
  o.shm = absl::GetFlag(FLAGS_shm);
  o.shm_socket = absl::GetFlag(FLAGS_shm_socket);
  o.shm_allowed_uids = absl::GetFlag(FLAGS_shm_allowed_uids);
  o.shm_handshake_timeout_ms = absl::GetFlag(FLAGS_shm_handshake_timeout_ms);
  o.shm_max_handshakes_per_uid =
      absl::GetFlag(FLAGS_shm_max_handshakes_per_uid);
  o.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  o.tls_key = absl::GetFlag(FLAGS_tls_key);
  o.tls_client_ca = absl::GetFlag(FLAGS_tls_client_ca);
  o.tls_reload_interval = absl::GetFlag(FLAGS_tls_reload_interval);
  o.auth_token_file = absl::GetFlag(FLAGS_auth_token_file);
  o.insecure = absl::GetFlag(FLAGS_insecure);
  o.metrics_host = absl::GetFlag(FLAGS_metrics_host);
  o.port_file = absl::GetFlag(FLAGS_port_file);
  o.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  o.metrics_port_file = absl::GetFlag(FLAGS_metrics_port_file);
  o.metrics_auth = absl::GetFlag(FLAGS_metrics_auth);
  o.metrics_max_connections = absl::GetFlag(FLAGS_metrics_max_connections);
  o.metrics_request_deadline =
      absl::GetFlag(FLAGS_metrics_request_deadline).value;
  o.timeline_max_jobs = absl::GetFlag(FLAGS_timeline_max_jobs);
  o.workers = absl::GetFlag(FLAGS_workers);
  o.min_workers = absl::GetFlag(FLAGS_min_workers);
  o.max_workers = absl::GetFlag(FLAGS_max_workers);
  o.readers = absl::GetFlag(FLAGS_readers);
  o.max_buffer_bytes = absl::GetFlag(FLAGS_max_buffer_bytes);
  o.max_batch_size = absl::GetFlag(FLAGS_max_batch_size);
  o.default_window = absl::GetFlag(FLAGS_default_window);
  o.max_window = absl::GetFlag(FLAGS_max_window);
  o.idle_buffer_bytes = absl::GetFlag(FLAGS_idle_buffer_bytes);
  o.max_image_pixels = absl::GetFlag(FLAGS_max_image_pixels);
  o.corrupt_policy = absl::GetFlag(FLAGS_corrupt_policy);
  o.max_scans = absl::GetFlag(FLAGS_max_scans);
  o.drain_deadline = absl::GetFlag(FLAGS_drain_deadline).value;
  o.reflection = absl::GetFlag(FLAGS_reflection);
  o.max_streams_per_job = absl::GetFlag(FLAGS_max_streams_per_job);
  o.max_job_buffer_share = absl::GetFlag(FLAGS_max_job_buffer_share);
  o.max_open_streams = absl::GetFlag(FLAGS_max_open_streams);
  o.open_timeout = absl::GetFlag(FLAGS_open_timeout).value;
  o.max_planless_streams_per_connection =
      absl::GetFlag(FLAGS_max_planless_streams_per_connection);
  o.max_streams_per_identity = absl::GetFlag(FLAGS_max_streams_per_identity);
  o.max_identity_buffer_share =
      absl::GetFlag(FLAGS_max_identity_buffer_share);
  o.share_batches = absl::GetFlag(FLAGS_share_batches);
  o.shared_batch_bytes = absl::GetFlag(FLAGS_shared_batch_bytes);
  o.remote_connections = absl::GetFlag(FLAGS_remote_connections);
  o.range_prefetch = absl::GetFlag(FLAGS_range_prefetch);
  o.remote_redirects = absl::GetFlag(FLAGS_remote_redirects);
  o.s3_request_cost_bytes = absl::GetFlag(FLAGS_s3_request_cost_bytes);
  o.http_request_cost_bytes = absl::GetFlag(FLAGS_http_request_cost_bytes);
  o.remote_low_speed_bytes_per_s =
      absl::GetFlag(FLAGS_remote_low_speed_bytes_per_s);
  o.remote_low_speed_seconds = absl::GetFlag(FLAGS_remote_low_speed_seconds);
  o.max_shards = absl::GetFlag(FLAGS_max_shards);
  o.read_cache_bytes = absl::GetFlag(FLAGS_read_cache_bytes);
  o.decoded_cache_bytes = absl::GetFlag(FLAGS_decoded_cache_bytes);
  o.log_augment_sample = absl::GetFlag(FLAGS_log_augment_sample);
  o.cache_dir = absl::GetFlag(FLAGS_cache_dir);
  o.cache_bytes = absl::GetFlag(FLAGS_cache_bytes);
  o.cache_ram_bytes = absl::GetFlag(FLAGS_cache_ram_bytes);
  o.cache_prefetch_batches = absl::GetFlag(FLAGS_cache_prefetch_batches);
  o.max_idle_jobs = absl::GetFlag(FLAGS_max_idle_jobs);
  o.max_concurrent_streams = absl::GetFlag(FLAGS_max_concurrent_streams);
  o.keepalive_time = absl::GetFlag(FLAGS_keepalive_time).value;
  o.keepalive_timeout = absl::GetFlag(FLAGS_keepalive_timeout).value;
  o.keepalive_min_ping_interval =
      absl::GetFlag(FLAGS_keepalive_min_ping_interval).value;
  o.handshake_timeout = absl::GetFlag(FLAGS_handshake_timeout).value;
  o.max_connection_idle = absl::GetFlag(FLAGS_max_connection_idle).value;
  o.keepalive_max_ping_strikes =
      absl::GetFlag(FLAGS_keepalive_max_ping_strikes);
  return o;
}

}  // namespace batchd::server
