#include "common/local_address.h"

#include <arpa/inet.h>

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/strip.h"

namespace batchd::common {
namespace {

// The host part of "host:port", "[v6]:port" or a bare host.
absl::string_view HostOf(absl::string_view address) {
  if (absl::StartsWith(address, "[")) {
    const size_t end = address.find(']');
    return end == absl::string_view::npos ? address.substr(1)
                                          : address.substr(1, end - 1);
  }
  const size_t colon = address.rfind(':');
  // More than one colon and no brackets: a bare IPv6 address.
  if (colon != absl::string_view::npos &&
      address.find(':') == colon) {
    return address.substr(0, colon);
  }
  return address;
}

}  // namespace

bool IsLocalAddress(absl::string_view address) {
  if (absl::StartsWith(address, "unix:") ||
      absl::StartsWith(address, "unix-abstract:")) {
    return true;
  }
  const std::string host(HostOf(address));
  if (host == "localhost") return true;
  in_addr v4;
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  in6_addr v6;
  if (inet_pton(AF_INET6, host.c_str(), &v6) == 1) {
    // An IPv4 client of a dual-stack listener shows as ::ffff:127.x.y.z.
    return IN6_IS_ADDR_LOOPBACK(&v6) ||
           (IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127);
  }
  return false;
}

bool IsLocalPeer(absl::string_view peer) {
  if (absl::StartsWith(peer, "unix:") || absl::StartsWith(peer, "unix-abstract:")) {
    return true;
  }
  for (absl::string_view scheme : {"ipv4:", "ipv6:"}) {
    if (absl::ConsumePrefix(&peer, scheme)) return IsLocalAddress(peer);
  }
  return false;
}

std::string PeerHost(absl::string_view peer) {
  if (absl::StartsWith(peer, "unix:") ||
      absl::StartsWith(peer, "unix-abstract:")) {
    return "unix";
  }
  for (absl::string_view scheme : {"ipv4:", "ipv6:"}) {
    if (!absl::ConsumePrefix(&peer, scheme)) continue;
    const size_t colon = peer.rfind(':');
    absl::string_view host =
        colon == absl::string_view::npos ? peer : peer.substr(0, colon);
    absl::ConsumePrefix(&host, "[");
    absl::ConsumeSuffix(&host, "]");
    return std::string(host);
  }
  return std::string(peer);
}

}  // namespace batchd::common
