// The command-line flags of batchd-client and batchd-top that say how to
// reach secured daemons: --tls_ca, --tls_cert, --tls_key, --tls_server_name
// and --token_file (a file: a token on the command line would show in `ps`;
// without one, $BATCHD_TOKEN is used).
#ifndef BATCHD_CLIENT_SECURITY_FLAGS_H_
#define BATCHD_CLIENT_SECURITY_FLAGS_H_

#include "client/channel_security.h"

namespace batchd::client {

// The flags' values, after absl::ParseCommandLine.
SecurityOptions SecurityOptionsFromFlags();

}  // namespace batchd::client

#endif  // BATCHD_CLIENT_SECURITY_FLAGS_H_
