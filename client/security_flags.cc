#include "client/security_flags.h"

#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"

ABSL_FLAG(std::string, tls_ca, "",
          "PEM bundle of the CA that signed the daemons' certificates: "
          "connect with TLS. Empty: plaintext.");
ABSL_FLAG(std::string, tls_cert, "",
          "Mutual TLS: this client's PEM certificate chain (with --tls_key).");
ABSL_FLAG(std::string, tls_key, "", "The PEM private key of --tls_cert.");
ABSL_FLAG(std::string, tls_server_name, "",
          "Check the daemons' certificates against this name instead of "
          "the endpoint's host.");
ABSL_FLAG(std::string, token_file, "",
          "File whose first line is the bearer token the daemons require "
          "(their --auth-token-file). Empty: $BATCHD_TOKEN, if set.");

namespace batchd::client {

SecurityOptions SecurityOptionsFromFlags() {
  SecurityOptions options;
  options.tls_ca = absl::GetFlag(FLAGS_tls_ca);
  options.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  options.tls_key = absl::GetFlag(FLAGS_tls_key);
  options.tls_server_name = absl::GetFlag(FLAGS_tls_server_name);
  options.token_file = absl::GetFlag(FLAGS_token_file);
  return options;
}

void ShowToolFlagsInHelp(absl::string_view tool_source) {
  absl::FlagsUsageConfig config;
  config.contains_help_flags = [tool = std::string(tool_source)](
                                   absl::string_view file) {
    return absl::EndsWith(file, tool) ||
           absl::EndsWith(file, "client/security_flags.cc");
  };
  config.contains_helpshort_flags = config.contains_help_flags;
  absl::SetFlagsUsageConfig(config);
}

}  // namespace batchd::client
