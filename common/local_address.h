// Whether an address can only be reached from this host. Both the daemon
// (plaintext is served only on such addresses; shared memory is offered
// only to such peers) and the client (it offers shared memory only to such
// endpoints) decide with these.
#ifndef BATCHD_COMMON_LOCAL_ADDRESS_H_
#define BATCHD_COMMON_LOCAL_ADDRESS_H_

#include <string>

#include "absl/strings/string_view.h"

namespace batchd::common {

// Whether `address` ("host:port", "[::1]:port", "unix:/path") can only be
// reached from this host: a Unix socket, "localhost", 127.0.0.0/8 or ::1.
bool IsLocalAddress(absl::string_view address);

// Whether a gRPC peer string (grpc::ServerContext::peer(): "ipv4:1.2.3.4:5",
// "ipv6:[::1]:5", "unix:/path", "unix-abstract:name") is on this host:
// a Unix socket, 127.0.0.0/8, ::1 or ::ffff:127.0.0.0/104.
bool IsLocalPeer(absl::string_view peer);

// The host part of a gRPC peer string, which per-peer limits count by:
// "ipv4:1.2.3.4:5" -> "1.2.3.4", "ipv6:[::1]:5" -> "::1"; a Unix socket's
// peers are one host, "unix". Anything else is returned whole.
std::string PeerHost(absl::string_view peer);

}  // namespace batchd::common

#endif  // BATCHD_COMMON_LOCAL_ADDRESS_H_
