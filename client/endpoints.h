// Where a client's daemons are: a list of addresses, or one DNS name that
// resolves to many (a Kubernetes headless Service).
//
//   "localhost:7070"                      one daemon
//   "host-a:7070,host-b:7070,unix:/s"     a fixed list
//   "dns:///batchd.ns.svc:7070"           every address of the name, looked
//                                         up again periodically
//
// Pure functions; thread-safe.
#ifndef BATCHD_CLIENT_ENDPOINTS_H_
#define BATCHD_CLIENT_ENDPOINTS_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace batchd::client {

struct EndpointSpec {
  // The fixed list, when no DNS name was given.
  std::vector<std::string> addresses;
  // For "dns:///host:port": the name and port to resolve.
  std::string dns_host;
  std::string dns_port;
  bool uses_dns() const { return !dns_host.empty(); }
};

// Parses a comma-separated endpoint list or one "dns:///host:port".
// INVALID_ARGUMENT, saying what is wrong, for an empty list, an empty
// element, a DNS name mixed with other entries, or a name without a port.
absl::StatusOr<EndpointSpec> ParseEndpoints(const std::string& spec);

// Resolves `host` and `port` to gRPC targets ("127.0.0.1:7070",
// "[::1]:7070"), sorted and without duplicates. Blocks on the system
// resolver.
using Resolver = std::function<absl::StatusOr<std::vector<std::string>>(
    const std::string& host, const std::string& port)>;
// The system resolver (getaddrinfo; TCP addresses of any family).
absl::StatusOr<std::vector<std::string>> ResolveWithSystem(
    const std::string& host, const std::string& port);

}  // namespace batchd::client

#endif  // BATCHD_CLIENT_ENDPOINTS_H_
