#include "server/server_lib.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <ctime>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "grpc/grpc.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "server/service/protobuf_log_filter.h"
#include "server/service/transport_security.h"
#include "server/web/web_assets.h"

#ifndef BATCHD_VERSION
#error "BATCHD_VERSION must be defined (server/CMakeLists.txt sets it)"
#endif

namespace batchd::server {
namespace {

// Turns server reflection on or off for one ServerBuilder. Loading
// libgrpc++_reflection registers its plugin for every server of the process
// (a static initializer calls InitProtoReflectionServerBuilderPlugin), so
// this removes any reflection plugin the builder got that way and adds one
// back only when `enabled`.
// grpc::ServerBuilderOption is public API, declared through
// grpcpp/server_builder.h.
class ReflectionOption final : public grpc::ServerBuilderOption {
 public:
  explicit ReflectionOption(bool enabled) : enabled_(enabled) {}
  void UpdateArguments(grpc::ChannelArguments* /*args*/) override {}
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>*
                         plugins) override {
    auto reflection = std::make_unique<
        grpc::reflection::ProtoServerReflectionPlugin>();
    const std::string name = reflection->name();
    plugins->erase(
        std::remove_if(plugins->begin(), plugins->end(),
                       [&name](const auto& p) { return p->name() == name; }),
        plugins->end());
    if (enabled_) plugins->push_back(std::move(reflection));
  }

 private:
  const bool enabled_;
};

// Longest wait of an /api/timeline request for a point after its since=
// (a point comes each second), and then for its turn among the answers;
// each at most a third of the request deadline, so that both fit in it.
constexpr absl::Duration kTimelineLongPoll = absl::Seconds(2);

// A duration as gRPC's int milliseconds, at most INT_MAX.
int Millis(absl::Duration d) {
  return static_cast<int>(
      std::min<int64_t>(absl::ToInt64Milliseconds(d), INT_MAX));
}

}  // namespace

const char* DaemonVersion() { return BATCHD_VERSION; }

absl::StatusOr<std::unique_ptr<BatchdServer>> BatchdServer::Start(
    ServerOptions options) {
  // The autoscaler's bound is the daemon's.
  options.autoscale.policy.max_workers = options.max_workers;
  batchd::v1::DaemonInfo& info = options.service.daemon_info;
  info.set_version(DaemonVersion());
  info.set_max_window(options.service.max_window);
  info.set_default_window(
      std::min(options.service.default_window, options.service.max_window));
  info.set_max_batch_size(options.service.limits.max_batch_size);
  info.set_max_inbound_message_bytes(kMaxInboundMessageBytes);
  info.set_max_chunk_bytes(kMaxChunkBytes);
  info.set_min_ping_interval_ms(
      absl::ToInt64Milliseconds(options.min_ping_interval));
  info.set_drain_deadline_ms(absl::ToInt64Milliseconds(options.drain_deadline));
  info.set_max_streams_per_job(options.service.max_streams_per_job);
  info.set_max_job_buffer_bytes(std::min(options.service.max_job_buffer_bytes,
                                         options.service.max_buffer_bytes));

  // Transport security: TLS on TCP when asked; plaintext only where no
  // other host can listen in, unless --insecure.
  std::shared_ptr<grpc::ServerCredentials> tcp_credentials =
      grpc::InsecureServerCredentials();
  // Every listen address, and those served in plaintext.
  const std::string unix_address =
      options.unix_socket.empty() ? "" : absl::StrCat("unix:", options.unix_socket);
  std::vector<std::string> addresses, plaintext;
  if (!options.listen_address.empty()) {
    addresses.push_back(options.listen_address);
  }
  if (!unix_address.empty()) addresses.push_back(unix_address);
  if (options.tls.enabled()) {
    absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> tls =
        MakeServerCredentials(options.tls);
    if (!tls.ok()) return tls.status();
    tcp_credentials = *std::move(tls);
  } else if (!options.listen_address.empty()) {
    plaintext.push_back(options.listen_address);
  }
  if (!unix_address.empty()) plaintext.push_back(unix_address);
  if (absl::Status allowed = CheckPlaintextAllowed(plaintext, options.insecure);
      !allowed.ok()) {
    return allowed;
  }
  absl::StatusOr<std::unique_ptr<Authorizer>> authorizer =
      Authorizer::Create(options.auth_token_file);
  if (!authorizer.ok()) return authorizer.status();
  batchd::v1::DaemonSecurity& security = *info.mutable_security();
  security.set_tls(options.tls.enabled());
  security.set_mutual_tls(options.tls.enabled() &&
                          !options.tls.client_ca_file.empty());
  security.set_tokens_required((*authorizer)->required());
  security.set_insecure(
      !CheckPlaintextAllowed(plaintext, /*insecure=*/false).ok());

  std::unique_ptr<BatchdServer> server(new BatchdServer());
  server->authorizer_ = *std::move(authorizer);
  options.service.authorizer = server->authorizer_.get();
  // gRPC's reflection service cannot check tokens.
  const bool reflection =
      options.reflection && !server->authorizer_->required();
  server->metrics_ = std::make_unique<ServerMetrics>();
  // gRPC logs one line per failed TLS handshake: counted, and a few logged.
  // Its other error lines, and libprotobuf's, are rate-limited too.
  InstallGrpcLogFilter(&server->metrics_->tls_handshake_failures());
  InstallProtobufLogFilter();
  server->metrics_->SetJobLimits(options.service.daemon_info);
  options.pipeline.metrics = server->metrics_.get();
  server->shard_cache_ = options.pipeline.shard_cache;
  server->store_counters_ = options.pipeline.store_counters;
  if (options.pipeline.shard_cache != nullptr) {
    options.pipeline.shard_cache->set_download_observer(
        [metrics = server->metrics_.get()](uint64_t /*bytes*/,
                                           absl::Duration elapsed) {
          metrics->shard_download_seconds().Observe(
              absl::ToDoubleSeconds(elapsed));
        });
  }
  if (options.pipeline.store_counters != nullptr) {
    options.pipeline.store_counters->set_latency_observer(
        [metrics = server->metrics_.get()](absl::Duration elapsed) {
          metrics->object_store_request_seconds().Observe(
              absl::ToDoubleSeconds(elapsed));
        });
  }
  options.service.metrics = server->metrics_.get();
  if (options.shm) {
    options.shared_memory.max_slots = options.service.max_window;
    options.shared_memory.metrics = server->metrics_.get();
    absl::StatusOr<std::unique_ptr<SharedMemoryBroker>> broker =
        SharedMemoryBroker::Start(options.shared_memory);
    if (!broker.ok()) return broker.status();
    server->shared_memory_ = *std::move(broker);
    options.service.shared_memory = server->shared_memory_.get();
  }
  server->stats_ = std::make_unique<JobStats>(options.max_idle_jobs);
  server->pipeline_ = std::make_unique<Pipeline>(options.pipeline);
  if (options.share_batches) {
    server->shared_batches_ = std::make_unique<SharedBatches>(
        server->pipeline_.get(), options.shared_batches);
    options.service.shared_batches = server->shared_batches_.get();
  }
  server->autoscaler_ = std::make_unique<Autoscaler>(
      options.autoscale, server->pipeline_.get(), &server->reports_);
  server->data_ = std::make_unique<DataServiceImpl>(
      options.datasets, options.service, server->pipeline_.get(),
      server->stats_.get(), &server->reports_);
  server->admin_ = std::make_unique<AdminServiceImpl>(
      server->pipeline_.get(), server->data_.get(), server->stats_.get(),
      &server->reports_, server->autoscaler_.get(),
      server->shared_batches_.get(), options.max_workers);

  // Process-wide, and read when a builder builds: every server of this
  // process gets grpc.health.v1.Health (Check and Watch).
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  if (!options.listen_address.empty()) {
    builder.AddListeningPort(options.listen_address, tcp_credentials,
                             &server->port_);
  }
  if (!unix_address.empty()) {
    builder.AddListeningPort(unix_address, grpc::InsecureServerCredentials());
  }
  builder.RegisterService(server->data_.get());
  builder.RegisterService(server->admin_.get());
  builder.SetOption(std::make_unique<ReflectionOption>(reflection));
  builder.SetMaxReceiveMessageSize(kMaxInboundMessageBytes);
  // Keepalive, both ways (the reasons are on the ServerOptions fields).
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS,
                             Millis(options.keepalive_time));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
                             Millis(options.keepalive_timeout));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                             Millis(options.min_ping_interval));
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES,
                             options.max_ping_strikes);
  // The daemon's own keepalive pings must not stop on a connection whose
  // stream is open but idle (a paused trainer): that is the peer most
  // likely to have died unnoticed. gRPC's default stops after 2.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                             Millis(options.handshake_timeout));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS,
                             Millis(options.max_connection_idle));
  if (options.max_concurrent_streams > 0) {
    builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                               options.max_concurrent_streams);
  }
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr ||
      (!options.listen_address.empty() && server->port_ == 0)) {
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on ", absl::StrJoin(addresses, " and "),
        ": an address is invalid or in use, or the socket's directory is "
        "missing or not writable"));
  }
  server->unix_socket_ = options.unix_socket;
  // The datasets were loaded before Start; the daemon serves from here on.
  if (grpc::HealthCheckServiceInterface* health =
          server->server_->GetHealthCheckService()) {
    health->SetServingStatus("", true);
    health->SetServingStatus(batchd::v1::DataService::service_full_name(),
                             true);
  }
  // Figures other objects keep are read when Prometheus scrapes.
  server->metrics_->registry().AddCollector(
      [admin = server->admin_.get(),
       pipeline = server->pipeline_.get()](MetricWriter& writer) {
        ServerMetrics::WriteStatus(admin->Status(), pipeline->read_queued(),
                                   writer);
      });
  if (options.metrics_port >= 0) {
    // The live page and its data (docs/observability.md).
    for (const WebAsset& asset : LivePageAssets()) {
      options.metrics_http.routes.push_back(
          {std::string(asset.path), std::string(asset.content_type),
           [body = asset.body](const HttpParams&) {
             return std::string(body);
           }});
    }
    // Served from a snapshot rendered at most once a second, however many
    // poll it; a since= request with nothing newer waits for the next one,
    // and answers are paced (kTimelineAnswersPerSecond), within the
    // request deadline.
    TimelineSnapshotOptions snapshots;
    snapshots.max_jobs = options.timeline_max_jobs;
    snapshots.max_wait = std::min(
        kTimelineLongPoll, options.metrics_http.request_deadline / 3);
    snapshots.render_seconds = &server->metrics_->timeline_render_seconds();
    server->timeline_snapshots_ = std::make_unique<TimelineSnapshots>(
        &server->admin_->timeline(), std::move(snapshots));
    options.metrics_http.routes.push_back(
        {"/api/timeline", "application/json",
         [snapshots = server->timeline_snapshots_.get()](
             const HttpParams& params) { return snapshots->Answer(params); }});
    if (options.metrics_auth) {
      options.metrics_http.authorize =
          [authorizer = server->authorizer_.get()](
              absl::string_view authorization) {
            return authorizer->AuthenticateHttp(authorization).ok();
          };
    }
    absl::StatusOr<std::unique_ptr<MetricsHttpServer>> http =
        MetricsHttpServer::Start(&server->metrics_->registry(),
                                 options.metrics_host, options.metrics_port,
                                 options.metrics_http);
    if (!http.ok()) return http.status();
    server->http_ = *std::move(http);
  }
  return server;
}

BatchdServer::~BatchdServer() {
  Stop();
  // The cache and counters may outlive this server; metrics_ does not.
  if (shard_cache_ != nullptr) shard_cache_->set_download_observer(nullptr);
  if (store_counters_ != nullptr) {
    store_counters_->set_latency_observer(nullptr);
  }
  if (metrics_ != nullptr) {
    RemoveGrpcLogCounter(&metrics_->tls_handshake_failures());
  }
}

absl::Status BatchdServer::Drain(absl::Duration deadline,
                                 absl::string_view reason) {
  // Held throughout: a second caller waits for the first drain to finish.
  absl::MutexLock lock(&stop_mu_);
  return DrainLocked(deadline, reason);
}

absl::Status BatchdServer::DrainLocked(absl::Duration deadline,
                                       absl::string_view reason) {
  if (drained_ || server_ == nullptr) return absl::OkStatus();
  drained_ = true;
  const absl::Time until = absl::Now() + deadline;
  // The server keeps accepting calls while draining, so that a new stream
  // gets a clear UNAVAILABLE and open streams can still be told, in-band,
  // which requests to take elsewhere. The data service first, so that a
  // client that sees NOT_SERVING finds the service already draining.
  data_->BeginDrain(reason);
  // NOT_SERVING for every service name, including those watched, and it
  // stays so: load balancers and Kubernetes stop sending traffic here.
  if (grpc::HealthCheckServiceInterface* health =
          server_->GetHealthCheckService()) {
    health->Shutdown();
  }
  const size_t open = data_->AwaitStreamsDone(until);
  if (open == 0) return absl::OkStatus();
  const std::string why =
      absl::StrCat("the drain deadline (", absl::FormatDuration(deadline),
                   ", --drain-deadline) passed");
  data_->CancelStreams(absl::UnavailableError(
      absl::StrCat(data_->DrainMessage(), ": ", why,
                   " before this stream's batches were sent; request them "
                   "from another daemon")));
  return absl::DeadlineExceededError(
      absl::StrCat(why, " with ", open, " stream", open == 1 ? "" : "s",
                   " still open; they were ended with UNAVAILABLE"));
}

void BatchdServer::Stop() {
  absl::MutexLock lock(&stop_mu_);
  if (stopped_) return;
  stopped_ = true;
  DrainLocked(absl::ZeroDuration(), "the daemon is stopping").IgnoreError();
  if (server_ != nullptr) {
    server_->Shutdown(absl::ToChronoTime(absl::Now() + kShutdownGrace));
  }
  // A request waiting for the timeline's next point would hold up the
  // metrics server's stop.
  if (timeline_snapshots_ != nullptr) timeline_snapshots_->Stop();
  if (http_ != nullptr) http_->Stop();
  // gRPC leaves the socket file behind; a later daemon would replace it,
  // but a client must not find a path that no longer answers.
  if (!unix_socket_.empty()) unlink(unix_socket_.c_str());
}

void BatchdServer::Wait() {
  if (server_ != nullptr) server_->Wait();
}

// StartupSignals ---------------------------------------------------------
namespace {

// How often the watcher looks at done_.
constexpr long kPollNanoseconds = 100 * 1000 * 1000;

const char* SignalName(int signal) {
  return signal == SIGTERM ? "SIGTERM" : "SIGINT";
}

}  // namespace

StartupSignals::StartupSignals(const sigset_t& signals,
                               absl::Duration deadline,
                               std::shared_ptr<std::atomic<bool>> cancelled)
    : signals_(signals),
      deadline_(deadline),
      cancelled_(std::move(cancelled)),
      thread_([this] { Run(); }) {}

StartupSignals::~StartupSignals() { Finish(); }

int StartupSignals::Finish() {
  done_.store(true);
  if (thread_.joinable()) thread_.join();
  return signal_.load();
}

void StartupSignals::Run() {
  pthread_setname_np(pthread_self(), "batchd-startsig");
  absl::Time exit_at = absl::InfiniteFuture();
  while (!done_.load()) {
    const timespec poll = {0, kPollNanoseconds};
    const int signal = sigtimedwait(&signals_, nullptr, &poll);
    if ((signal == SIGINT || signal == SIGTERM) && signal_.load() == 0) {
      signal_.store(signal);
      cancelled_->store(true);
      exit_at = absl::Now() + deadline_;
      std::fprintf(stderr,
                   "batchd: %s received during start-up: cancelling it "
                   "(exit within %s, --drain-deadline)\n",
                   SignalName(signal), absl::FormatDuration(deadline_).c_str());
    }
    if (absl::Now() >= exit_at && !done_.load()) {
      std::fprintf(stderr,
                   "batchd: start-up still running %s after %s; exiting "
                   "without waiting for it\n",
                   absl::FormatDuration(deadline_).c_str(),
                   SignalName(signal_.load()));
      std::fflush(stderr);
      _exit(0);
    }
  }
}

}  // namespace batchd::server
