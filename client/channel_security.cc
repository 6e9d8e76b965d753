#include "client/channel_security.h"

#include <cstdlib>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/text_file.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/support/channel_arguments.h"
#include "grpcpp/support/client_interceptor.h"

namespace batchd::client {
namespace {

// The contents of `path`, the value of option `name`; INVALID_ARGUMENT when
// it cannot be read or is empty.
absl::StatusOr<std::string> ReadOptionFile(absl::string_view name,
                                           const std::string& path) {
  absl::StatusOr<std::string> text = common::ReadTextFile(path);
  if (!text.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " file: ", text.status().message()));
  }
  if (absl::StripAsciiWhitespace(*text).empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " file ", path, " is empty"));
  }
  return text;
}

// Adds the bearer token to every call's initial metadata. An interceptor
// rather than call credentials: gRPC sends call credentials only over TLS,
// and a token is also wanted on loopback and Unix-socket plaintext.
class TokenInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit TokenInterceptor(const std::string* header) : header_(header) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::
                PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->emplace("authorization", *header_);
    }
    methods->Proceed();
  }

 private:
  const std::string* const header_;  // owned by the factory
};

class TokenInterceptorFactory final
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit TokenInterceptorFactory(const std::string& token)
      : header_(absl::StrCat("Bearer ", token)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* /*info*/) override {
    return new TokenInterceptor(&header_);
  }

 private:
  const std::string header_;
};

}  // namespace

absl::StatusOr<ChannelSecurity> ChannelSecurity::Load(
    const SecurityOptions& options) {
  ChannelSecurity security;
  if (!options.token_file.empty()) {
    absl::StatusOr<std::string> text =
        ReadOptionFile("token", options.token_file);
    if (!text.ok()) return text.status();
    security.token = std::string(absl::StripAsciiWhitespace(
        absl::string_view(*text).substr(0, text->find('\n'))));
    if (security.token.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the first line of token file ", options.token_file,
          " is empty; write the token there"));
    }
  } else if (const char* env = std::getenv(kTokenEnvironmentVariable)) {
    security.token = std::string(absl::StripAsciiWhitespace(env));
  }
  if (options.tls_cert.empty() != options.tls_key.empty()) {
    return absl::InvalidArgumentError(
        "tls_cert and tls_key go together: give the client certificate and "
        "its private key");
  }
  if (options.tls_ca.empty()) {
    if (!options.tls_cert.empty() || !options.tls_server_name.empty()) {
      return absl::InvalidArgumentError(
          "tls_cert, tls_key and tls_server_name need tls_ca: the CA that "
          "signed the daemons' certificates");
    }
    return security;
  }
  grpc::SslCredentialsOptions ssl;
  absl::StatusOr<std::string> ca = ReadOptionFile("tls_ca", options.tls_ca);
  if (!ca.ok()) return ca.status();
  ssl.pem_root_certs = *std::move(ca);
  if (!options.tls_cert.empty()) {
    absl::StatusOr<std::string> cert =
        ReadOptionFile("tls_cert", options.tls_cert);
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key =
        ReadOptionFile("tls_key", options.tls_key);
    if (!key.ok()) return key.status();
    ssl.pem_cert_chain = *std::move(cert);
    ssl.pem_private_key = *std::move(key);
  }
  security.credentials = grpc::SslCredentials(ssl);
  security.server_name = options.tls_server_name;
  return security;
}

std::string WithConnectionHint(absl::string_view message,
                               const ChannelSecurity& security) {
  if (!absl::StrContains(message, "failed to connect")) {
    return std::string(message);
  }
  if (security.tls()) {
    return absl::StrCat(
        message,
        " (this client uses TLS: check that its tls_ca signed the daemon's "
        "certificate, that the certificate names the endpoint's host or "
        "tls_server_name, that the daemon serves TLS, and give tls_cert and "
        "tls_key if it requires client certificates)");
  }
  return absl::StrCat(message,
                      " (this client connects in plaintext: if the daemon "
                      "serves TLS, give tls_ca, the CA that signed its "
                      "certificate)");
}

std::shared_ptr<grpc::Channel> NewBatchdChannel(
    const std::string& endpoint, const ChannelSecurity& security,
    bool fresh_connection) {
  grpc::ChannelArguments args;
  if (fresh_connection) args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetMaxReceiveMessageSize(kMaxReceiveMessageBytes);
  // Keepalive: a ping every 10 s, with 5 s to answer, notices a daemon host
  // that vanished without closing its sockets (a crash closes them, and the
  // stream fails at once). It is allowed without calls so that an idle
  // channel to a standby daemon is checked too; the daemon accepts pings
  // this often (its --keepalive-min-ping-interval, 5 s).
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // No cap on pings between data frames: a long idle stream keeps pinging.
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  // Reconnects: the Loader's own backoff (LoaderOptions) decides when a
  // stream is tried again; the channel's must not add seconds to it, so it
  // starts at 100 ms and stays under 2 s. Connection attempts time out
  // after 5 s, shorter than the default 20 s, so an unroutable host is
  // given up quickly and its batches go elsewhere. gRPC core reads that
  // timeout from MIN_RECONNECT_BACKOFF (the connection-backoff spec's
  // MIN_CONNECT_TIMEOUT; grpc/grpc#33423): at 100 ms, a TLS handshake over
  // a slow link, or a loaded host's answer, never completes in time.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 5000);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  // A standby daemon's channel stays connected however long it is idle
  // (gRPC's default drops it after 30 min), so failing over costs no
  // handshake.
  args.SetInt(GRPC_ARG_CLIENT_IDLE_TIMEOUT_MS, std::numeric_limits<int>::max());
  args.SetInt(GRPC_ARG_ENABLE_RETRIES, 0);  // the Loader re-requests itself
  // The daemon serves its Unix socket in plaintext: the socket file's
  // permissions, not TLS, decide who connects there.
  const bool tls = security.tls() && !absl::StartsWith(endpoint, "unix:");
  if (tls && !security.server_name.empty()) {
    args.SetSslTargetNameOverride(security.server_name);
  }
  std::shared_ptr<grpc::ChannelCredentials> credentials =
      tls ? security.credentials : grpc::InsecureChannelCredentials();
  std::vector<
      std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
      interceptors;
  if (!security.token.empty()) {
    interceptors.push_back(
        std::make_unique<TokenInterceptorFactory>(security.token));
  }
  return grpc::experimental::CreateCustomChannelWithInterceptors(
      endpoint, credentials, args, std::move(interceptors));
}

}  // namespace batchd::client
