#include "client/endpoints.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace batchd::client {

absl::StatusOr<EndpointSpec> ParseEndpoints(const std::string& spec) {
  EndpointSpec out;
  std::vector<std::string> parts =
      absl::StrSplit(spec, ',', absl::AllowEmpty());
  if (spec.empty()) {
    return absl::InvalidArgumentError(
        "the endpoint is empty; give \"host:port\", a comma-separated list, "
        "or \"dns:///name:port\"");
  }
  for (std::string& part : parts) {
    part = std::string(absl::StripAsciiWhitespace(part));
    if (part.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "endpoint list \"", spec, "\" has an empty entry"));
    }
    absl::string_view name = part;
    if (absl::ConsumePrefix(&name, "dns:///")) {
      if (parts.size() != 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            "\"", part, "\" must be the only endpoint: a DNS name stands for "
            "every daemon it resolves to"));
      }
      const size_t colon = name.rfind(':');
      const size_t bracket = name.rfind(']');
      if (colon == absl::string_view::npos ||
          (bracket != absl::string_view::npos && colon < bracket) ||
          colon + 1 == name.size() || colon == 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "\"", part, "\" needs a host and a port, as dns:///name:7070"));
      }
      out.dns_host = std::string(name.substr(0, colon));
      out.dns_port = std::string(name.substr(colon + 1));
      if (absl::StartsWith(out.dns_host, "[") &&
          absl::EndsWith(out.dns_host, "]")) {
        out.dns_host = out.dns_host.substr(1, out.dns_host.size() - 2);
      }
      return out;
    }
    out.addresses.push_back(part);
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> ResolveWithSystem(
    const std::string& host, const std::string& port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  const int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &result);
  if (rc != 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot resolve ", host, ":", port, ": ", gai_strerror(rc)));
  }
  std::vector<std::string> targets;
  for (addrinfo* ai = result; ai != nullptr; ai = ai->ai_next) {
    char text[INET6_ADDRSTRLEN] = {};
    if (ai->ai_family == AF_INET) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(ai->ai_addr);
      inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text));
      targets.push_back(absl::StrCat(text, ":", port));
    } else if (ai->ai_family == AF_INET6) {
      const auto* in6 = reinterpret_cast<const sockaddr_in6*>(ai->ai_addr);
      inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof(text));
      targets.push_back(absl::StrCat("[", text, "]:", port));
    }
  }
  freeaddrinfo(result);
  std::sort(targets.begin(), targets.end());
  targets.erase(std::unique(targets.begin(), targets.end()), targets.end());
  if (targets.empty()) {
    return absl::UnavailableError(
        absl::StrCat(host, ":", port, " resolves to no TCP address"));
  }
  return targets;
}

}  // namespace batchd::client
