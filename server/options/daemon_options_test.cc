#include "server/options/daemon_options.h"

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/status_matchers.h"

namespace batchd::server {
namespace {

using ::batchd::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// The CPUs the tests pretend to have: --max-workers 0 stands for these.
constexpr int kCpus = 4;

TEST(DaemonOptionsTest, TheFlagsDefaultsAreValid) {
  EXPECT_OK(ValidateDaemonOptions(DaemonOptions(), kCpus));
  EXPECT_OK(ValidateDaemonOptions(DaemonOptions(), /*available_cpus=*/1));
}

// One option out of range or at odds with another, and what the message
// must say: the flag, and what to give instead.
struct Refusal {
  std::string name;
  std::function<void(DaemonOptions&)> change;
  std::vector<std::string> message;
};

std::vector<Refusal> Refusals() {
  return {
      {"port above 65535", [](DaemonOptions& o) { o.port = 99999; },
       {"--port is 99999", "it must be 0..65535, or -1 for no TCP listener"}},
      {"port below -1", [](DaemonOptions& o) { o.port = -2; },
       {"--port is -2", "it must be 0..65535"}},
      {"no port and no socket", [](DaemonOptions& o) { o.port = -1; },
       {"nothing to listen on", "give a --port, or --unix-socket PATH"}},
      {"no remote connections",
       [](DaemonOptions& o) { o.remote_connections = 0; },
       {"--remote-connections must be at least 1, not 0"}},
      {"an unknown redirect policy",
       [](DaemonOptions& o) { o.remote_redirects = "any"; },
       {"--remote-redirects is \"any\"", "it must be none or same-origin"}},
      {"a negative low speed",
       [](DaemonOptions& o) { o.remote_low_speed_bytes_per_s = -1; },
       {"--remote-low-speed-bytes-per-s is -1", "0 (no minimum)"}},
      {"no low-speed time",
       [](DaemonOptions& o) { o.remote_low_speed_seconds = 0; },
       {"--remote-low-speed-seconds is 0", "it must be 1..120"}},
      {"a low-speed time past the request deadline",
       [](DaemonOptions& o) { o.remote_low_speed_seconds = 121; },
       {"--remote-low-speed-seconds is 121", "it must be 1..120"}},
      {"no shards", [](DaemonOptions& o) { o.max_shards = 0; },
       {"--max-shards is 0", "it must be 1..2147483648"}},
      {"more shards than shard numbers",
       [](DaemonOptions& o) { o.max_shards = uint64_t{1} << 32; },
       {"--max-shards is 4294967296", "it must be 1..2147483648"}},
      {"a uid that is not a number",
       [](DaemonOptions& o) { o.shm_allowed_uids = "1000,me"; },
       {"--shm-allowed-uids: \"me\" is not a uid",
        "give numbers separated by commas"}},
      {"handshake timeout 0",
       [](DaemonOptions& o) { o.shm_handshake_timeout_ms = 0; },
       {"--shm-handshake-timeout-ms is 0", "give 1..60000 milliseconds"}},
      {"handshake timeout over a minute",
       [](DaemonOptions& o) { o.shm_handshake_timeout_ms = 60001; },
       {"--shm-handshake-timeout-ms is 60001", "give 1..60000"}},
      {"no handshakes per uid",
       [](DaemonOptions& o) { o.shm_max_handshakes_per_uid = 0; },
       {"--shm-max-handshakes-per-uid is 0", "give 1..64"}},
      {"more handshakes per uid than in all",
       [](DaemonOptions& o) { o.shm_max_handshakes_per_uid = 65; },
       {"--shm-max-handshakes-per-uid is 65", "give 1..64"}},
      {"a client CA without TLS",
       [](DaemonOptions& o) { o.tls_client_ca = "ca.pem"; },
       {"--tls-client-ca needs --tls-cert and --tls-key"}},
      {"a job share of 0",
       [](DaemonOptions& o) { o.max_job_buffer_share = 0; },
       {"--max-job-buffer-share is 0", "it must be in (0, 1]"}},
      {"a job share over 1",
       [](DaemonOptions& o) { o.max_job_buffer_share = 1.5; },
       {"--max-job-buffer-share is 1.5", "it must be in (0, 1]"}},
      {"a job share that is not a number",
       [](DaemonOptions& o) { o.max_job_buffer_share = std::nan(""); },
       {"--max-job-buffer-share is nan", "it must be in (0, 1]"}},
      {"workers that are not a number",
       [](DaemonOptions& o) { o.workers = "many"; },
       {"--workers is \"many\"", "give a number of threads, or auto"}},
      {"no workers", [](DaemonOptions& o) { o.workers = "0"; },
       {"--workers is 0", "it must be 1..4 (--max-workers)"}},
      {"more workers than --max-workers",
       [](DaemonOptions& o) {
         o.workers = "8";
         o.max_workers = 2;
       },
       {"--workers is 8", "it must be 1..2 (--max-workers)"}},
      {"negative --max-workers",
       [](DaemonOptions& o) { o.max_workers = -1; },
       {"--max-workers is -1",
        "give a number of threads, or 0 for the CPUs available (4)"}},
      {"auto with no minimum",
       [](DaemonOptions& o) {
         o.workers = "auto";
         o.min_workers = 0;
       },
       {"--min-workers is 0 and --max-workers 4",
        "need 1 <= --min-workers <= --max-workers"}},
      {"auto with the minimum over the maximum",
       [](DaemonOptions& o) {
         o.workers = "auto";
         o.min_workers = 3;
         o.max_workers = 2;
       },
       {"--min-workers is 3 and --max-workers 2",
        "need 1 <= --min-workers <= --max-workers"}},
      {"an unknown corrupt policy",
       [](DaemonOptions& o) { o.corrupt_policy = "repair"; },
       {"--corrupt-policy is \"repair\"", "it must be substitute or decode"}},
      {"a log-augment-sample below -1",
       [](DaemonOptions& o) { o.log_augment_sample = -2; },
       {"--log-augment-sample is -2", "or -1 (the default) for none"}},
      {"shared batch bytes below -1",
       [](DaemonOptions& o) { o.shared_batch_bytes = -2; },
       {"--shared-batch-bytes is -2",
        "give bytes, or -1 for a sixteenth of --max-buffer-bytes"}},
      {"metrics auth without tokens",
       [](DaemonOptions& o) { o.metrics_auth = true; },
       {"--metrics-auth checks the tokens of --auth-token-file",
        "give that file too"}},
      {"metrics port above 65535",
       [](DaemonOptions& o) { o.metrics_port = 70000; },
       {"--metrics-port is 70000",
        "it must be 0..65535, or -1 for no metrics endpoint"}},
      {"metrics port below -1",
       [](DaemonOptions& o) { o.metrics_port = -2; },
       {"--metrics-port is -2", "it must be 0..65535"}},
      {"no timeline jobs",
       [](DaemonOptions& o) { o.timeline_max_jobs = 0; },
       {"--timeline-max-jobs is 0", "give 1..1024"}},
      {"more timeline jobs than the page can draw",
       [](DaemonOptions& o) { o.timeline_max_jobs = 1025; },
       {"--timeline-max-jobs is 1025", "give 1..1024",
        "the rest summed into \"_other\""}},
      {"no streams per job",
       [](DaemonOptions& o) { o.max_streams_per_job = 0; },
       {"--max-streams-per-job must be at least 1"}},
      {"no open streams", [](DaemonOptions& o) { o.max_open_streams = 0; },
       {"--max-open-streams must be at least 1"}},
      {"no planless streams",
       [](DaemonOptions& o) { o.max_planless_streams_per_connection = 0; },
       {"--max-planless-streams-per-connection must be at least 1"}},
      {"more streams per identity than open",
       [](DaemonOptions& o) {
         o.max_open_streams = 64;
         o.max_streams_per_identity = 65;
       },
       {"--max-streams-per-identity is 65, more than --max-open-streams "
        "(64)",
        "or 0 for half of it"}},
      {"no identity buffer share",
       [](DaemonOptions& o) { o.max_identity_buffer_share = 0; },
       {"--max-identity-buffer-share is 0", "it must be in (0, 1]"}},
      {"identity buffer share above 1",
       [](DaemonOptions& o) { o.max_identity_buffer_share = 1.5; },
       {"--max-identity-buffer-share is 1.5"}},
      {"identity buffer share not a number",
       [](DaemonOptions& o) { o.max_identity_buffer_share = std::nan(""); },
       {"--max-identity-buffer-share is nan"}},
      {"no open timeout",
       [](DaemonOptions& o) { o.open_timeout = absl::ZeroDuration(); },
       {"--open-timeout is 0", "it must be positive"}},
      {"a negative drain deadline",
       [](DaemonOptions& o) { o.drain_deadline = absl::Seconds(-1); },
       {"--drain-deadline is -1s", "it must not be negative"}},
      {"keepalive time under 1s",
       [](DaemonOptions& o) { o.keepalive_time = absl::Milliseconds(500); },
       {"--keepalive-time is 500ms", "both must be at least 1s"}},
      {"no keepalive timeout",
       [](DaemonOptions& o) { o.keepalive_timeout = absl::ZeroDuration(); },
       {"--keepalive-timeout 0", "both must be at least 1s"}},
      {"handshake timeout under 100ms",
       [](DaemonOptions& o) { o.handshake_timeout = absl::Milliseconds(50); },
       {"--handshake-timeout is 50ms", "they must be at least 100ms and 1s"}},
      {"connection idle under 1s",
       [](DaemonOptions& o) {
         o.max_connection_idle = absl::Milliseconds(500);
       },
       {"--max-connection-idle 500ms", "they must be at least 100ms and 1s"}},
      {"a negative ping interval",
       [](DaemonOptions& o) {
         o.keepalive_min_ping_interval = absl::Seconds(-1);
       },
       {"--keepalive-min-ping-interval", "must not be negative"}},
      {"negative ping strikes",
       [](DaemonOptions& o) { o.keepalive_max_ping_strikes = -1; },
       {"--keepalive-max-ping-strikes", "must not be negative"}},
      {"negative concurrent streams",
       [](DaemonOptions& o) { o.max_concurrent_streams = -1; },
       {"--max-concurrent-streams", "must not be negative"}},
  };
}

TEST(DaemonOptionsTest, EachRefusalNamesTheFlagAndWhatToGive) {
  for (const Refusal& refusal : Refusals()) {
    SCOPED_TRACE(refusal.name);
    DaemonOptions options;
    refusal.change(options);
    const absl::Status status = ValidateDaemonOptions(options, kCpus);
    EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument,
                                 HasSubstr(refusal.message.front())));
    for (const std::string& part : refusal.message) {
      EXPECT_THAT(std::string(status.message()), HasSubstr(part));
    }
  }
}

TEST(DaemonOptionsTest, TheEdgesOfEachRangeAreAccepted) {
  const std::vector<std::function<void(DaemonOptions&)>> edges = {
      [](DaemonOptions& o) { o.port = 0; },
      [](DaemonOptions& o) { o.port = 65535; },
      [](DaemonOptions& o) { o.timeline_max_jobs = 1; },
      [](DaemonOptions& o) { o.timeline_max_jobs = 1024; },
      [](DaemonOptions& o) {
        o.port = -1;
        o.unix_socket = "/run/batchd.sock";
      },
      [](DaemonOptions& o) { o.remote_connections = 1; },
      [](DaemonOptions& o) { o.remote_redirects = "same-origin"; },
      [](DaemonOptions& o) { o.max_shards = 1; },
      [](DaemonOptions& o) { o.max_shards = uint64_t{1} << 31; },
      [](DaemonOptions& o) { o.shm_allowed_uids = "1000, 1001"; },
      [](DaemonOptions& o) { o.shm_handshake_timeout_ms = 1; },
      [](DaemonOptions& o) { o.shm_handshake_timeout_ms = 60000; },
      [](DaemonOptions& o) { o.shm_max_handshakes_per_uid = 64; },
      [](DaemonOptions& o) {
        // Read when the server starts, not here.
        o.tls_cert = "server.pem";
        o.tls_key = "server.key";
        o.tls_client_ca = "ca.pem";
      },
      [](DaemonOptions& o) { o.max_job_buffer_share = 1; },
      [](DaemonOptions& o) { o.max_identity_buffer_share = 1; },
      [](DaemonOptions& o) { o.max_streams_per_identity = 1024; },
      [](DaemonOptions& o) { o.workers = "1"; },
      // --max-workers 0 rises to --workers N above the CPUs.
      [](DaemonOptions& o) { o.workers = "16"; },
      [](DaemonOptions& o) {
        o.workers = "auto";
        o.min_workers = 2;
        o.max_workers = 2;
      },
      [](DaemonOptions& o) { o.corrupt_policy = "decode"; },
      [](DaemonOptions& o) { o.shared_batch_bytes = 0; },
      [](DaemonOptions& o) { o.log_augment_sample = 0; },
      [](DaemonOptions& o) {
        o.metrics_auth = true;
        o.auth_token_file = "tokens";
      },
      [](DaemonOptions& o) { o.metrics_port = 0; },
      [](DaemonOptions& o) { o.metrics_port = 65535; },
      [](DaemonOptions& o) { o.drain_deadline = absl::ZeroDuration(); },
      [](DaemonOptions& o) {
        o.keepalive_time = absl::Seconds(1);
        o.keepalive_timeout = absl::Seconds(1);
        o.handshake_timeout = absl::Milliseconds(100);
        o.max_connection_idle = absl::Seconds(1);
      },
      [](DaemonOptions& o) {
        o.keepalive_min_ping_interval = absl::ZeroDuration();
        o.keepalive_max_ping_strikes = 0;
        o.max_concurrent_streams = 0;
      },
  };
  for (size_t i = 0; i < edges.size(); ++i) {
    SCOPED_TRACE(i);
    DaemonOptions options;
    edges[i](options);
    EXPECT_OK(ValidateDaemonOptions(options, kCpus));
  }
}

TEST(DaemonOptionsTest, DefaultsMakeTheServersDefaults) {
  const ServerOptions server = MakeServerOptions(DaemonOptions(), kCpus);
  EXPECT_EQ(server.listen_address, "127.0.0.1:7070");
  EXPECT_EQ(server.metrics_host, "127.0.0.1");
  EXPECT_EQ(server.metrics_port, -1);
  EXPECT_FALSE(server.autoscale.enabled);
  EXPECT_EQ(server.pipeline.workers, kCpus);
  EXPECT_EQ(server.max_workers, kCpus);
  EXPECT_EQ(server.pipeline.readers, 2);
  EXPECT_FALSE(server.pipeline.decode_limits.decode_damaged);
  EXPECT_EQ(server.pipeline.log_augment_sample, -1);
  EXPECT_EQ(server.service.max_buffer_bytes, uint64_t{2} << 30);
  EXPECT_EQ(server.service.max_job_buffer_bytes, uint64_t{1} << 30);
  EXPECT_EQ(server.service.max_identity_buffer_bytes, uint64_t{1} << 30);
  EXPECT_EQ(server.service.min_stream_buffer_bytes, uint64_t{2} << 20);
  EXPECT_EQ(server.service.max_open_streams, 1024u);
  EXPECT_EQ(server.service.max_streams_per_identity, 512u);
  EXPECT_EQ(server.service.max_planless_streams_per_connection, 64u);
  EXPECT_EQ(server.shared_batches.retention_bytes, (uint64_t{2} << 30) / 16);
  EXPECT_EQ(server.shared_memory.handshake_timeout, absl::Milliseconds(500));
  EXPECT_TRUE(server.shared_memory.allowed_uids.empty());
  EXPECT_EQ(server.tls.reload_interval, absl::Seconds(10));
  EXPECT_FALSE(server.tls.enabled());
  EXPECT_EQ(server.min_ping_interval, absl::Seconds(5));
  EXPECT_EQ(server.max_ping_strikes, 2);
  EXPECT_EQ(server.timeline_max_jobs, 32);
  EXPECT_TRUE(server.datasets.empty());
}

TEST(DaemonOptionsTest, HostAndPortMakeTheListenAddress) {
  DaemonOptions options;
  options.host = "::1";
  options.port = 0;
  ServerOptions server = MakeServerOptions(options, kCpus);
  EXPECT_EQ(server.listen_address, "[::1]:0");
  EXPECT_EQ(server.metrics_host, "::1");

  options.host = "[::1]";
  EXPECT_EQ(MakeServerOptions(options, kCpus).listen_address, "[::1]:0");

  // No TCP port: the metrics endpoint stays on the loopback.
  options.host = "0.0.0.0";
  options.port = -1;
  options.unix_socket = "/run/batchd.sock";
  server = MakeServerOptions(options, kCpus);
  EXPECT_EQ(server.listen_address, "");
  EXPECT_EQ(server.unix_socket, "/run/batchd.sock");
  EXPECT_EQ(server.metrics_host, "127.0.0.1");

  options.metrics_host = "10.0.0.1";
  EXPECT_EQ(MakeServerOptions(options, kCpus).metrics_host, "10.0.0.1");
}

TEST(DaemonOptionsTest, WorkerFlagsSizeThePool) {
  DaemonOptions options;
  options.workers = "auto";
  options.min_workers = 2;
  ServerOptions server = MakeServerOptions(options, kCpus);
  EXPECT_TRUE(server.autoscale.enabled);
  EXPECT_EQ(server.pipeline.workers, 2);  // starts small
  EXPECT_EQ(server.max_workers, kCpus);
  EXPECT_EQ(server.autoscale.policy.min_workers, 2);
  EXPECT_EQ(server.autoscale.policy.max_workers, kCpus);

  options.workers = "16";
  server = MakeServerOptions(options, kCpus);
  EXPECT_FALSE(server.autoscale.enabled);
  EXPECT_EQ(server.pipeline.workers, 16);
  EXPECT_EQ(server.max_workers, 16);

  options.max_workers = 32;
  EXPECT_EQ(MakeServerOptions(options, kCpus).max_workers, 32);

  options.readers = 0;
  EXPECT_EQ(MakeServerOptions(options, kCpus).pipeline.readers, 1);
}

TEST(DaemonOptionsTest, ValuesThatNeedWorkingOut) {
  DaemonOptions options;
  options.shm_allowed_uids = "1000, 1001";
  options.shm_handshake_timeout_ms = 300;
  options.corrupt_policy = "decode";
  options.max_buffer_bytes = 1000;
  options.max_job_buffer_share = 0.2;
  options.max_identity_buffer_share = 0.3;
  options.max_open_streams = 3;
  options.shared_batch_bytes = 0;
  options.tls_reload_interval = 3;
  options.log_augment_sample = 17;
  const ServerOptions server = MakeServerOptions(options, kCpus);
  EXPECT_EQ(server.pipeline.log_augment_sample, 17);
  EXPECT_THAT(server.shared_memory.allowed_uids, ElementsAre(1000, 1001));
  EXPECT_EQ(server.shared_memory.handshake_timeout, absl::Milliseconds(300));
  EXPECT_TRUE(server.pipeline.decode_limits.decode_damaged);
  EXPECT_EQ(server.service.max_job_buffer_bytes, 200u);
  EXPECT_EQ(server.service.max_identity_buffer_bytes, 300u);
  EXPECT_EQ(server.service.min_stream_buffer_bytes, 200u);  // the job's share
  // Half of 3 streams, rounded down: one per identity.
  EXPECT_EQ(server.service.max_streams_per_identity, 1u);
  EXPECT_EQ(server.shared_batches.retention_bytes, 0u);
  EXPECT_EQ(server.tls.reload_interval, absl::Seconds(3));
}

}  // namespace
}  // namespace batchd::server
