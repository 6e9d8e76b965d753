// How a client reaches its daemons off the loopback: TLS (with a client
// certificate for mutual TLS) and a bearer token, as the daemon's --tls-*
// and --auth-token-file flags ask.
//
//   SecurityOptions security;
//   security.tls_ca = "ca.pem";            // TLS, trusting this CA
//   security.token_file = "batchd.token";  // or $BATCHD_TOKEN
//   ASSIGN_OR_RETURN(ChannelSecurity loaded, ChannelSecurity::Load(security));
//   auto channel = NewBatchdChannel("batchd-0:7070", loaded);
//
// The token is read from a file or the environment, never from a command
// line (where `ps` shows it), and is sent on every call, never logged.
//
// Thread-safe (values).
#ifndef BATCHD_CLIENT_CHANNEL_SECURITY_H_
#define BATCHD_CLIENT_CHANNEL_SECURITY_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/channel.h"
#include "grpcpp/security/credentials.h"

namespace batchd::client {

// The environment variable a client takes its token from when no token file
// is given.
inline constexpr char kTokenEnvironmentVariable[] = "BATCHD_TOKEN";

struct SecurityOptions {
  // PEM bundle of the CAs that sign the daemons' certificates. Set: TLS on
  // every TCP endpoint ("unix:" endpoints stay plaintext, as the daemon
  // serves them). Empty: plaintext.
  std::string tls_ca;
  // Mutual TLS: this client's PEM certificate chain and private key.
  std::string tls_cert;
  std::string tls_key;
  // The name the daemons' certificates are checked against, when it is not
  // the endpoint's host (an IP address, or a name the certificate lacks).
  std::string tls_server_name;
  // A file whose first line is the bearer token. Empty: $BATCHD_TOKEN, and
  // no token when that is unset too.
  std::string token_file;
};

// SecurityOptions with its files read, ready for channels. Default: plaintext
// and no token.
struct ChannelSecurity {
  // INVALID_ARGUMENT naming the option for an unreadable or empty file, a
  // certificate without its key (or the reverse), or client certificates
  // without a CA.
  static absl::StatusOr<ChannelSecurity> Load(const SecurityOptions& options);

  bool tls() const { return credentials != nullptr; }

  // TLS credentials; nullptr for plaintext.
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  std::string server_name;
  // Sent as "authorization: Bearer <token>"; empty sends none.
  std::string token;
};

// `message`, the error of a call over a channel secured by `security`,
// followed by what to check when it says the connection failed (a TLS
// mismatch shows only as "Socket closed" or a handshake error there).
std::string WithConnectionHint(absl::string_view message,
                               const ChannelSecurity& security);

// Largest gRPC message the client accepts: the protocol's 4 MiB chunks plus
// headroom for headers with many samples.
inline constexpr int kMaxReceiveMessageBytes = 8 << 20;

// A gRPC channel to one batchd daemon at `endpoint` ("host:port" or
// "unix:/path"), secured as `security` says, with the receive limit above
// and the keepalive and reconnect settings of client/channel_security.cc
// (each value's reason is there). Connects lazily. `fresh_connection`:
// its connection is its own, not shared with other channels to the same
// address (gRPC's subchannel pool), so it carries no earlier failure's
// reconnect backoff.
std::shared_ptr<grpc::Channel> NewBatchdChannel(
    const std::string& endpoint, const ChannelSecurity& security = {},
    bool fresh_connection = false);

}  // namespace batchd::client

#endif  // BATCHD_CLIENT_CHANNEL_SECURITY_H_
