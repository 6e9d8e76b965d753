#include "server/service/transport_security.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/local_address.h"
#include "common/text_file.h"
#include "grpcpp/security/tls_certificate_provider.h"
#include "grpcpp/security/tls_credentials_options.h"

namespace batchd::server {
namespace {

// OK when `path` (the value of `flag`) is readable and holds a PEM block.
absl::Status CheckPemFile(absl::string_view flag, const std::string& path) {
  absl::StatusOr<std::string> text = common::ReadTextFile(path);
  if (!text.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": ", text.status().message()));
  }
  if (text->find("-----BEGIN ") == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, " ", path, " holds no PEM block (-----BEGIN ...); give a "
        "PEM file (scripts/make_test_certs.sh makes some for local use)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsFiles& tls) {
  if (tls.cert_file.empty() || tls.key_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls-cert and --tls-key go together: give the certificate chain "
        "and its private key (PEM files)");
  }
  if (absl::Status s = CheckPemFile("--tls-cert", tls.cert_file); !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckPemFile("--tls-key", tls.key_file); !s.ok()) {
    return s;
  }
  const bool mutual = !tls.client_ca_file.empty();
  if (mutual) {
    if (absl::Status s = CheckPemFile("--tls-client-ca", tls.client_ca_file);
        !s.ok()) {
      return s;
    }
  }
  if (tls.reload_interval < absl::Seconds(1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tls-reload-interval is ", absl::FormatDuration(tls.reload_interval),
        "; it must be at least 1s"));
  }
  // gRPC's file watcher reads the files on a timer and hands changed
  // certificates to the next handshakes; connections already made are not
  // touched, so a reload never drops a stream.
  auto provider =
      std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
          tls.key_file, tls.cert_file, tls.client_ca_file,
          static_cast<unsigned int>(
              absl::ToInt64Seconds(tls.reload_interval)));
  grpc::experimental::TlsServerCredentialsOptions options(provider);
  options.watch_identity_key_cert_pairs();
  if (mutual) {
    options.watch_root_certs();
    options.set_cert_request_type(
        GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  } else {
    options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  }
  return grpc::experimental::TlsServerCredentials(options);
}

absl::Status CheckPlaintextAllowed(
    const std::vector<std::string>& plaintext_addresses, bool insecure) {
  if (insecure) return absl::OkStatus();
  for (const std::string& address : plaintext_addresses) {
    if (common::IsLocalAddress(address)) continue;
    return absl::FailedPreconditionError(absl::StrCat(
        "refusing to serve plaintext on ", address,
        ", which other hosts can reach: anyone there could read the "
        "datasets' pixels. Give --tls-cert and --tls-key (and "
        "--tls-client-ca for mutual TLS), listen on the loopback "
        "(--host 127.0.0.1) or a Unix socket (--unix-socket PATH), or pass "
        "--insecure on a network you trust"));
  }
  return absl::OkStatus();
}

}  // namespace batchd::server
