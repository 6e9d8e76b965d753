// Security through real daemon processes on localhost: TLS and mutual TLS
// with certificates from scripts/make_test_certs.sh, bearer tokens on every
// RPC (the methods come from the service descriptors), job-bound tokens,
// plaintext refused off the loopback, the Unix-socket listener and
// certificate rotation under a running stream. The per-job limits are in
// job_limits_e2e_test.cc.
#include <signal.h>
#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "batchd/v1/admin.grpc.pb.h"
#include "batchd/v1/data.grpc.pb.h"
#include "client/channel_security.h"
#include "client/loader.h"
#include "common/text_file.h"
#include "gmock/gmock.h"
#include "google/protobuf/descriptor.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "testing/daemon_process.h"
#include "testing/e2e_helpers.h"
#include "tests/security_suite.h"

#ifndef BATCHD_SOURCE_DIR
#error "BATCHD_SOURCE_DIR must be defined (tests/CMakeLists.txt sets it)"
#endif

namespace batchd::testing {
namespace {

using ::batchd::client::ChannelSecurity;
using ::batchd::client::Loader;
using ::batchd::client::NewBatchdChannel;
using ::batchd::client::SecurityOptions;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kAdminToken[] = "admin-token-5f0e9d8c7b6a";
constexpr char kJobToken[] = "job-a-token-1a2b3c4d5e6f";
constexpr char kWrongToken[] = "wrong-token-000000000000";

// Where make_test_certs.sh wrote one CA and its certificates.
struct Certs {
  std::string dir;
  std::string ca() const { return dir + "/ca.pem"; }
  std::string server_cert() const { return dir + "/server.pem"; }
  std::string server_key() const { return dir + "/server.key"; }
  std::string client_cert() const { return dir + "/client.pem"; }
  std::string client_key() const { return dir + "/client.key"; }
};

Certs MakeCerts(const std::string& name) {
  Certs certs{MakeTempDir(name)};
  CommandResult made = RunCommand(
      {std::string(BATCHD_SOURCE_DIR) + "/scripts/make_test_certs.sh",
       certs.dir});
  EXPECT_EQ(made.exit_code, 0) << made.output;
  return certs;
}

void WriteFile(const std::string& path, const std::string& text) {
  // Write then rename: a reader (the daemon's file watcher) never sees a
  // half-written file.
  const std::string tmp = path + ".tmp";
  std::ofstream(tmp) << text;
  std::filesystem::rename(tmp, path);
}

std::string ReadWhole(const std::string& path) {
  return common::ReadTextFile(path).value();
}

// The suite with two CAs and their certificates, and a token file.
class SecurityTest : public SecuritySuite {
 protected:
  static void SetUpTestSuite() {
    SecuritySuite::SetUpTestSuite();
    certs_a_ = new Certs(MakeCerts("ca-a"));
    certs_b_ = new Certs(MakeCerts("ca-b"));
    tokens_ = new std::string(MakeTempDir("tokens") + "/tokens");
    WriteFile(*tokens_, absl::StrCat("# admin\n", kAdminToken, "\n",
                                     kJobToken, " job-a\n"));
  }
  static void TearDownTestSuite() {
    for (const std::string* dir : {&certs_a_->dir, &certs_b_->dir}) {
      std::filesystem::remove_all(*dir);
    }
    std::filesystem::remove_all(std::filesystem::path(*tokens_).parent_path());
    delete certs_a_;
    delete certs_b_;
    delete tokens_;
    SecuritySuite::TearDownTestSuite();
  }

  void TearDown() override {
    for (const std::string& dir : dirs_) std::filesystem::remove_all(dir);
  }

  // A fresh directory, removed after the test.
  std::string TempDir(const std::string& name) {
    dirs_.push_back(MakeTempDir(name));
    return dirs_.back();
  }

  static std::vector<std::string> TlsArgs(const Certs& certs) {
    return {"--tls-cert", certs.server_cert(), "--tls-key", certs.server_key()};
  }

  static SecurityOptions Trusting(const Certs& ca) {
    SecurityOptions security;
    security.tls_ca = ca.ca();
    return security;
  }

  std::vector<std::string> dirs_;
  static Certs* certs_a_;
  static Certs* certs_b_;
  static std::string* tokens_;
};

Certs* SecurityTest::certs_a_ = nullptr;
Certs* SecurityTest::certs_b_ = nullptr;
std::string* SecurityTest::tokens_ = nullptr;

TEST_F(SecurityTest, TlsWithTheRightCaStreamsTheSameBytes) {
  const std::vector<BatchRecord> reference = Reference();
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DaemonProcess> daemon,
                           StartDaemon(TlsArgs(*certs_a_)));
  ASSERT_OK_AND_ASSIGN(
      std::vector<BatchRecord> records,
      ReadEpoch(Options(daemon->endpoint(), Trusting(*certs_a_))));
  EXPECT_EQ(records, reference);
  EXPECT_THAT(daemon->Log(), HasSubstr("(TLS)"));
}

TEST_F(SecurityTest, TlsWithAnotherCaOrInPlaintextFailsSayingWhy) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DaemonProcess> daemon,
                           StartDaemon(TlsArgs(*certs_a_)));
  absl::StatusOr<std::unique_ptr<Loader>> wrong_ca =
      Loader::Create(Options(daemon->endpoint(), Trusting(*certs_b_)));
  ASSERT_FALSE(wrong_ca.ok());
  EXPECT_EQ(wrong_ca.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(wrong_ca.status().message(),
              HasSubstr("certificate verify failed"));
  EXPECT_THAT(wrong_ca.status().message(),
              HasSubstr("check that its tls_ca signed the daemon's"));

  absl::StatusOr<std::unique_ptr<Loader>> plaintext =
      Loader::Create(Options(daemon->endpoint(), {}));
  ASSERT_FALSE(plaintext.ok());
  EXPECT_EQ(plaintext.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(plaintext.status().message(),
              HasSubstr("if the daemon serves TLS, give tls_ca"));
}

TEST_F(SecurityTest, MutualTlsRejectsClientsWithoutACertificateOrFromAnotherCa) {
  std::vector<std::string> args = TlsArgs(*certs_a_);
  args.insert(args.end(), {"--tls-client-ca", certs_a_->ca()});
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DaemonProcess> daemon,
                           StartDaemon(args));
  EXPECT_THAT(daemon->Log(), HasSubstr("(mutual TLS)"));

  SecurityOptions no_cert = Trusting(*certs_a_);
  absl::StatusOr<std::unique_ptr<Loader>> without =
      Loader::Create(Options(daemon->endpoint(), no_cert));
  ASSERT_FALSE(without.ok());
  EXPECT_EQ(without.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(without.status().message(),
              HasSubstr("give tls_cert and tls_key if it requires client"));

  SecurityOptions other_ca = Trusting(*certs_a_);
  other_ca.tls_cert = certs_b_->client_cert();
  other_ca.tls_key = certs_b_->client_key();
  absl::StatusOr<std::unique_ptr<Loader>> foreign =
      Loader::Create(Options(daemon->endpoint(), other_ca));
  ASSERT_FALSE(foreign.ok());
  EXPECT_EQ(foreign.status().code(), absl::StatusCode::kUnavailable);

  SecurityOptions right = Trusting(*certs_a_);
  right.tls_cert = certs_a_->client_cert();
  right.tls_key = certs_a_->client_key();
  ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> records,
                           ReadEpoch(Options(daemon->endpoint(), right)));
  EXPECT_EQ(records.size(), 3u);
}

// One call of an RPC with a valid request over `channel`; its status.
using RpcCall =
    std::function<grpc::Status(const std::shared_ptr<grpc::Channel>& channel)>;

grpc::Status CallStreamBatches(const std::shared_ptr<grpc::Channel>& channel) {
  auto stub = v1::DataService::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(20)));
  auto stream = stub->StreamBatches(&context);
  v1::StreamRequest open;
  *open.mutable_open()->mutable_plan() = TrainPlan("d", kBatch, kSize, 5);
  open.mutable_open()->set_window(1);
  v1::StreamRequest request;
  request.mutable_request()->set_epoch(0);
  request.mutable_request()->add_batch_indices(0);
  stream->Write(open);
  stream->Write(request);
  stream->WritesDone();
  v1::StreamResponse response;
  bool opened = false;
  uint64_t expected = 0, received = 0;
  while (stream->Read(&response)) {
    opened |= response.has_opened();
    if (response.has_header()) expected = response.header().total_bytes();
    if (response.has_chunk()) received += response.chunk().data().size();
  }
  grpc::Status status = stream->Finish();
  if (status.ok() && !(opened && expected > 0 && received == expected)) {
    return grpc::Status(grpc::StatusCode::INTERNAL,
                        "the stream ended OK without a whole batch");
  }
  return status;
}

// Every RPC of the batchd services with a valid request, keyed by full
// method name. A method missing here fails EveryRpcNeedsATokenButHealth.
std::map<std::string, RpcCall> AllRpcs() {
  auto deadline = [] {
    return absl::ToChronoTime(absl::Now() + absl::Seconds(10));
  };
  std::map<std::string, RpcCall> calls;
  calls["batchd.v1.DataService.ListDatasets"] =
      [deadline](const std::shared_ptr<grpc::Channel>& channel) {
        grpc::ClientContext context;
        context.set_deadline(deadline());
        v1::ListDatasetsResponse response;
        return v1::DataService::NewStub(channel)->ListDatasets(
            &context, v1::ListDatasetsRequest(), &response);
      };
  calls["batchd.v1.DataService.StreamBatches"] = CallStreamBatches;
  calls["batchd.v1.AdminService.GetStatus"] =
      [deadline](const std::shared_ptr<grpc::Channel>& channel) {
        grpc::ClientContext context;
        context.set_deadline(deadline());
        v1::ServerStatus response;
        return v1::AdminService::NewStub(channel)->GetStatus(
            &context, v1::GetStatusRequest(), &response);
      };
  calls["batchd.v1.AdminService.SetWorkers"] =
      [deadline](const std::shared_ptr<grpc::Channel>& channel) {
        grpc::ClientContext context;
        context.set_deadline(deadline());
        v1::SetWorkersRequest request;
        request.set_workers(1);
        v1::SetWorkersResponse response;
        return v1::AdminService::NewStub(channel)->SetWorkers(
            &context, request, &response);
      };
  return calls;
}

std::shared_ptr<grpc::Channel> ChannelWithToken(const std::string& endpoint,
                                                const std::string& token) {
  ChannelSecurity security;
  security.token = token;
  return NewBatchdChannel(endpoint, security);
}

TEST_F(SecurityTest, EveryRpcNeedsATokenButHealth) {
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<DaemonProcess> daemon,
      StartDaemon({"--auth-token-file", *tokens_}));
  const std::map<std::string, RpcCall> calls = AllRpcs();
  int checked = 0;
  const google::protobuf::DescriptorPool* pool =
      google::protobuf::DescriptorPool::generated_pool();
  for (const char* name : {v1::DataService::service_full_name(),
                           v1::AdminService::service_full_name()}) {
    const google::protobuf::ServiceDescriptor* service =
        pool->FindServiceByName(name);
    ASSERT_NE(service, nullptr) << name;
    for (int m = 0; m < service->method_count(); ++m) {
      const std::string method = service->method(m)->full_name();
      SCOPED_TRACE(method);
      auto call = calls.find(method);
      ASSERT_NE(call, calls.end())
          << method << " has no entry in AllRpcs(): add a valid call so "
          << "that its token check is tested";
      const grpc::Status missing =
          call->second(NewBatchdChannel(daemon->endpoint()));
      EXPECT_EQ(missing.error_code(), grpc::StatusCode::UNAUTHENTICATED)
          << missing.error_message();
      EXPECT_THAT(missing.error_message(), HasSubstr("has no token"));
      const grpc::Status wrong =
          call->second(ChannelWithToken(daemon->endpoint(), kWrongToken));
      EXPECT_EQ(wrong.error_code(), grpc::StatusCode::UNAUTHENTICATED)
          << wrong.error_message();
      EXPECT_THAT(wrong.error_message(), HasSubstr("not accepted"));
      EXPECT_THAT(wrong.error_message(), Not(HasSubstr(kWrongToken)));
      const grpc::Status right =
          call->second(ChannelWithToken(daemon->endpoint(), kAdminToken));
      EXPECT_TRUE(right.ok()) << right.error_message();
      ++checked;
    }
  }
  EXPECT_EQ(checked, static_cast<int>(calls.size()))
      << "AllRpcs() names a method the services no longer have";

  // Kubernetes probes call health without a token.
  auto health = grpc::health::v1::Health::NewStub(
      NewBatchdChannel(daemon->endpoint()));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status checked_health =
      health->Check(&context, grpc::health::v1::HealthCheckRequest(), &response);
  ASSERT_TRUE(checked_health.ok()) << checked_health.error_message();
  EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  // Reflection cannot check tokens, so it is not served.
  EXPECT_THAT(daemon->Log(), HasSubstr("reflection is off"));
  // The token never reaches the log.
  EXPECT_THAT(daemon->Log(), Not(HasSubstr(kAdminToken)));
  EXPECT_THAT(daemon->Log(), Not(HasSubstr(kWrongToken)));
}

TEST_F(SecurityTest, JobBoundTokensStreamOnlyTheirJob) {
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<DaemonProcess> daemon,
      StartDaemon({"--auth-token-file", *tokens_}));
  const std::string token_file = TempDir("client") + "/token";
  WriteFile(token_file, absl::StrCat(kJobToken, "\n"));
  SecurityOptions job_token;
  job_token.token_file = token_file;

  absl::StatusOr<std::unique_ptr<Loader>> other_job =
      Loader::Create(Options(daemon->endpoint(), job_token, "job-b"));
  ASSERT_FALSE(other_job.ok());
  EXPECT_EQ(other_job.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(other_job.status().message(),
              HasSubstr("may only stream for job \"job-a\", not \"job-b\""));

  ASSERT_OK_AND_ASSIGN(
      std::vector<BatchRecord> records,
      ReadEpoch(Options(daemon->endpoint(), job_token, "job-a")));
  EXPECT_EQ(records.size(), 3u);

  // Read-only calls are allowed; changing the daemon is not.
  const std::map<std::string, RpcCall> calls = AllRpcs();
  EXPECT_TRUE(calls.at("batchd.v1.AdminService.GetStatus")(
                       ChannelWithToken(daemon->endpoint(), kJobToken))
                  .ok());
  const grpc::Status set_workers = calls.at("batchd.v1.AdminService.SetWorkers")(
      ChannelWithToken(daemon->endpoint(), kJobToken));
  EXPECT_EQ(set_workers.error_code(), grpc::StatusCode::PERMISSION_DENIED);

  // $BATCHD_TOKEN stands in for a token file.
  ASSERT_EQ(setenv(client::kTokenEnvironmentVariable, kJobToken, 1), 0);
  absl::StatusOr<std::vector<BatchRecord>> from_env =
      ReadEpoch(Options(daemon->endpoint(), {}, "job-a"));
  unsetenv(client::kTokenEnvironmentVariable);
  ASSERT_TRUE(from_env.ok()) << from_env.status();
  EXPECT_EQ(*from_env, records);
}

// Whether `text` appears in the daemon's log within 10 s (the daemon logs
// once it has acted on a signal).
bool WaitForLog(const DaemonProcess& daemon, const std::string& text) {
  const absl::Time until = absl::Now() + absl::Seconds(10);
  while (daemon.Log().find(text) == std::string::npos) {
    if (absl::Now() > until) return false;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return true;
}

TEST_F(SecurityTest, SighupReloadsTheTokenFile) {
  const std::string tokens = TempDir("reload") + "/tokens";
  WriteFile(tokens, absl::StrCat(kAdminToken, "\n"));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DaemonProcess> daemon,
                           StartDaemon({"--auth-token-file", tokens}));
  const RpcCall get_status = AllRpcs().at("batchd.v1.AdminService.GetStatus");
  ASSERT_TRUE(get_status(ChannelWithToken(daemon->endpoint(), kAdminToken)).ok());
  WriteFile(tokens, absl::StrCat(kJobToken, "\n"));
  kill(daemon->pid(), SIGHUP);
  ASSERT_TRUE(WaitForLog(*daemon, "tokens reloaded")) << daemon->Log();
  EXPECT_EQ(get_status(ChannelWithToken(daemon->endpoint(), kAdminToken))
                .error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(get_status(ChannelWithToken(daemon->endpoint(), kJobToken)).ok());
  // A broken file keeps the tokens in force.
  WriteFile(tokens, "short\n");
  kill(daemon->pid(), SIGHUP);
  EXPECT_TRUE(WaitForLog(*daemon, "keeping the old tokens")) << daemon->Log();
  EXPECT_TRUE(get_status(ChannelWithToken(daemon->endpoint(), kJobToken)).ok());
}

TEST_F(SecurityTest, PlaintextOffTheLoopbackNeedsInsecure) {
  absl::StatusOr<std::unique_ptr<DaemonProcess>> refused =
      StartDaemon({"--host", "0.0.0.0"});
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(),
              HasSubstr("refusing to serve plaintext on 0.0.0.0"));
  EXPECT_THAT(refused.status().message(), HasSubstr("--tls-cert"));

  // With --insecure it serves, warns, and says so in its status. Tokens
  // are required meanwhile, and the test talks to it on the loopback only.
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<DaemonProcess> daemon,
      StartDaemon({"--host", "0.0.0.0", "--insecure", "--auth-token-file",
                   *tokens_}));
  EXPECT_THAT(daemon->Log(), HasSubstr("WARNING: --insecure"));
  auto stub = v1::AdminService::NewStub(ChannelWithToken(
      absl::StrCat("127.0.0.1:", daemon->port()), kAdminToken));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  v1::ServerStatus status;
  ASSERT_TRUE(stub->GetStatus(&context, {}, &status).ok());
  EXPECT_TRUE(status.daemon().security().insecure());
  EXPECT_TRUE(status.daemon().security().tokens_required());
  EXPECT_FALSE(status.daemon().security().tls());
}

TEST_F(SecurityTest, UnixSocketServesTheSameBytes) {
  const std::vector<BatchRecord> reference = Reference();
  const std::string socket = TempDir("unix") + "/batchd.sock";
  {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<DaemonProcess> daemon,
                             StartDaemon({"--unix-socket", socket}));
    ASSERT_OK_AND_ASSIGN(
        std::vector<BatchRecord> records,
        ReadEpoch(Options(absl::StrCat("unix:", socket), {})));
    EXPECT_EQ(records, reference);
    // A TLS client still reaches the socket: it is served in plaintext.
    ASSERT_OK_AND_ASSIGN(
        std::vector<BatchRecord> tls_client,
        ReadEpoch(Options(absl::StrCat("unix:", socket), Trusting(*certs_a_))));
    EXPECT_EQ(tls_client, reference);
    EXPECT_EQ(daemon->Stop(), 0) << daemon->Log();
  }
  EXPECT_FALSE(std::filesystem::exists(socket))
      << "the daemon left its socket file behind";
}

TEST_F(SecurityTest, ReplacedCertificatesServeNewConnectionsAndKeepStreams) {
  const std::vector<BatchRecord> reference = Reference();
  const std::string dir = TempDir("rotate");
  const std::string cert = dir + "/server.pem";
  const std::string key = dir + "/server.key";
  WriteFile(cert, ReadWhole(certs_a_->server_cert()));
  WriteFile(key, ReadWhole(certs_a_->server_key()));
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<DaemonProcess> daemon,
      StartDaemon({"--tls-cert", cert, "--tls-key", key,
                   "--tls-reload-interval", "1"}));
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<Loader> running,
      Loader::Create(Options(daemon->endpoint(), Trusting(*certs_a_))));
  ASSERT_TRUE(running->StartEpoch(0).ok());
  ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> before,
                           ReadFrom(*running, /*max_batches=*/1));

  // Rotate to CA B's certificate; the key first, so that a reload between
  // the two renames finds a mismatched pair at worst, which gRPC rejects
  // and retries.
  WriteFile(key, ReadWhole(certs_b_->server_key()));
  WriteFile(cert, ReadWhole(certs_b_->server_cert()));
  const RpcCall list = AllRpcs().at("batchd.v1.DataService.ListDatasets");
  absl::StatusOr<ChannelSecurity> trust_b =
      ChannelSecurity::Load(Trusting(*certs_b_));
  ASSERT_TRUE(trust_b.ok());
  grpc::Status new_connection;
  const absl::Time until = absl::Now() + absl::Seconds(20);
  do {
    absl::SleepFor(absl::Milliseconds(200));
    new_connection = list(NewBatchdChannel(daemon->endpoint(), *trust_b));
  } while (!new_connection.ok() && absl::Now() < until);
  ASSERT_TRUE(new_connection.ok())
      << "new connections did not get the new certificate: "
      << new_connection.error_message();
  absl::StatusOr<ChannelSecurity> trust_a =
      ChannelSecurity::Load(Trusting(*certs_a_));
  ASSERT_TRUE(trust_a.ok());
  EXPECT_FALSE(list(NewBatchdChannel(daemon->endpoint(), *trust_a)).ok());

  // The stream opened before the rotation delivers the rest of its epoch
  // and a whole new one, without ever going down.
  ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> after, ReadFrom(*running));
  before.insert(before.end(), after.begin(), after.end());
  EXPECT_EQ(before, reference);
  ASSERT_TRUE(running->StartEpoch(1).ok());
  ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> next, ReadFrom(*running));
  EXPECT_EQ(next.size(), 3u);
  const Loader::Stats stats = running->stats();
  ASSERT_EQ(stats.daemons.size(), 1u);
  EXPECT_EQ(stats.daemons[0].lost, 0u);
  EXPECT_EQ(stats.daemons[0].state, "up");
}

TEST_F(SecurityTest, HealthProbesAMutualTlsDaemonWithTheClientsFlags) {
  std::vector<std::string> args = TlsArgs(*certs_a_);
  args.insert(args.end(), {"--tls-client-ca", certs_a_->ca(),
                           "--auth-token-file", *tokens_});
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DaemonProcess> daemon,
                       StartDaemon(args));
  const std::string health = BuiltBinary("tools/batchd-health");
  const CommandResult secured = RunCommand(
      {health, "--endpoint", daemon->endpoint(), "--tls_ca", certs_a_->ca(),
       "--tls_cert", certs_a_->client_cert(), "--tls_key",
       certs_a_->client_key()});
  EXPECT_EQ(secured.exit_code, 0) << secured.output;
  EXPECT_THAT(secured.output,
              HasSubstr(daemon->endpoint() + ": SERVING"));
  // Plaintext against TLS: not serving, and the hint says what to give.
  const CommandResult plain =
      RunCommand({health, "--endpoint", daemon->endpoint()});
  EXPECT_EQ(plain.exit_code, 1) << plain.output;
  EXPECT_THAT(plain.output, HasSubstr("if the daemon serves TLS, give tls_ca"));
  // Another CA: refused too.
  const CommandResult foreign = RunCommand(
      {health, "--endpoint", daemon->endpoint(), "--tls_ca", certs_b_->ca(),
       "--timeout_ms", "3000"});
  EXPECT_EQ(foreign.exit_code, 1) << foreign.output;
  // A flag error is a usage error.
  const CommandResult half = RunCommand(
      {health, "--endpoint", daemon->endpoint(), "--tls_ca", certs_a_->ca(),
       "--tls_cert", certs_a_->client_cert()});
  EXPECT_EQ(half.exit_code, 1) << half.output;
  EXPECT_THAT(half.output, HasSubstr("tls_key"));
}

TEST_F(SecurityTest, HelpDocumentsEverySecurityFlag) {
  const CommandResult daemon = RunCommand({BuiltBinary("server/batchd"), "--help"});
  for (const char* flag :
       {"--tls_cert", "--tls_key", "--tls_client_ca", "--tls_reload_interval",
        "--auth_token_file", "--insecure", "--unix_socket", "--metrics_host",
        "--max_streams_per_job", "--max_job_buffer_share"}) {
    EXPECT_THAT(daemon.output, HasSubstr(flag)) << "batchd --help";
  }
  for (const char* tool :
       {"client/batchd-client", "client/batchd-top", "tools/batchd-health"}) {
    const CommandResult help = RunCommand({BuiltBinary(tool), "--help"});
    for (const char* flag : {"--tls_ca", "--tls_cert", "--tls_key",
                             "--tls_server_name", "--token_file",
                             "--endpoint"}) {
      EXPECT_THAT(help.output, HasSubstr(flag)) << tool << " --help";
    }
  }
}

}  // namespace
}  // namespace batchd::testing
