// How the daemon's listeners are secured: server TLS (and mutual TLS) from
// certificate files that are watched for changes, and the rule that
// plaintext is served only where nobody else can listen in.
//
//   ASSIGN_OR_RETURN(auto creds, MakeServerCredentials(tls));  // TLS
//   RETURN_IF_ERROR(CheckPlaintextAllowed(addresses, insecure));
//
// Thread-safe (pure functions).
#ifndef BATCHD_SERVER_SERVICE_TRANSPORT_SECURITY_H_
#define BATCHD_SERVER_SERVICE_TRANSPORT_SECURITY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "grpcpp/security/server_credentials.h"

namespace batchd::server {

struct TlsFiles {
  // PEM files: the server's certificate chain and its private key. Both
  // empty: no TLS.
  std::string cert_file;
  std::string key_file;
  // PEM CA bundle: when set, every client must present a certificate that
  // it signed (mutual TLS).
  std::string client_ca_file;
  // How often the files are read again; a changed certificate is used for
  // the next handshakes, and connections already made keep theirs.
  absl::Duration reload_interval = absl::Seconds(10);

  bool enabled() const { return !cert_file.empty() || !key_file.empty(); }
};

// TLS server credentials over `tls`, reloaded every `reload_interval`.
// INVALID_ARGUMENT, naming the flag, when only one of cert and key is set or
// a file is missing or holds no PEM block.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsFiles& tls);

// OK when every address in `plaintext_addresses` is local, or `insecure`;
// otherwise FAILED_PRECONDITION saying how to secure or restrict it.
absl::Status CheckPlaintextAllowed(
    const std::vector<std::string>& plaintext_addresses, bool insecure);

}  // namespace batchd::server

#endif  // BATCHD_SERVER_SERVICE_TRANSPORT_SECURITY_H_
