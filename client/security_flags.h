// The command-line flags of batchd-client and batchd-top that say how to
// reach secured daemons: --tls_ca, --tls_cert, --tls_key, --tls_server_name
// and --token_file (a file: a token on the command line would show in `ps`;
// without one, $BATCHD_TOKEN is used).
#ifndef BATCHD_CLIENT_SECURITY_FLAGS_H_
#define BATCHD_CLIENT_SECURITY_FLAGS_H_

#include "absl/strings/string_view.h"
#include "client/channel_security.h"

namespace batchd::client {

// The flags' values, after absl::ParseCommandLine.
SecurityOptions SecurityOptionsFromFlags();

// Makes --help list the flags of `tool_source` (the tool's main file, e.g.
// "client/cli.cc") and these security flags; absl's default looks for a
// file named after the binary. Call before absl::ParseCommandLine.
void ShowToolFlagsInHelp(absl::string_view tool_source);

}  // namespace batchd::client

#endif  // BATCHD_CLIENT_SECURITY_FLAGS_H_
