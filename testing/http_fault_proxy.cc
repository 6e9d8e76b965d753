#include "testing/http_fault_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/hmac.h>
#include <openssl/sha.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace batchd::testing {
namespace {

bool SendAll(int fd, absl::string_view data) {
  while (!data.empty()) {
    const ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      return false;
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// Reads from `fd` into `buffer` until it holds "\r\n\r\n"; returns the head
// (terminator included) and leaves the rest in `buffer`. Empty at EOF.
std::string ReadHead(int fd, std::string& buffer) {
  while (true) {
    const size_t end = buffer.find("\r\n\r\n");
    if (end != std::string::npos) {
      std::string head = buffer.substr(0, end + 4);
      buffer.erase(0, end + 4);
      return head;
    }
    char chunk[16384];
    const ssize_t n = recv(fd, chunk, sizeof(chunk), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return "";
    buffer.append(chunk, static_cast<size_t>(n));
  }
}

int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// `head` (a request or response head) without its Connection header, with
// `extra` lines added before the blank line.
std::string RewriteHead(absl::string_view head, absl::string_view extra,
                        HttpFault fault) {
  std::string out;
  bool first = true;
  for (absl::string_view line : absl::StrSplit(head, "\r\n")) {
    if (line.empty()) continue;
    if (!first) {
      const size_t colon = line.find(':');
      const std::string name =
          absl::AsciiStrToLower(line.substr(0, colon));
      absl::string_view value =
          colon == absl::string_view::npos
              ? absl::string_view()
              : absl::StripAsciiWhitespace(line.substr(colon + 1));
      if (name == "connection" || name == "keep-alive") continue;
      if (fault == HttpFault::kChangedEtag && name == "etag") {
        absl::StrAppend(&out, "ETag: \"changed-by-proxy\"\r\n");
        continue;
      }
      if (fault == HttpFault::kWrongContentRange && name == "content-range") {
        // "bytes A-B/T" -> one byte off.
        uint64_t a = 0, b = 0;
        const size_t dash = value.find('-');
        const size_t slash = value.find('/');
        if (absl::StartsWith(value, "bytes ") && dash != absl::string_view::npos &&
            slash != absl::string_view::npos &&
            absl::SimpleAtoi(value.substr(6, dash - 6), &a) &&
            absl::SimpleAtoi(value.substr(dash + 1, slash - dash - 1), &b)) {
          if (a > 0) {
            --a;
            --b;
          } else {
            ++a;
            ++b;
          }
          absl::StrAppend(&out, "Content-Range: bytes ", a, "-", b,
                          value.substr(slash), "\r\n");
          continue;
        }
      }
    }
    first = false;
    absl::StrAppend(&out, line, "\r\n");
  }
  absl::StrAppend(&out, extra, "\r\n");
  return out;
}

std::string Hex(const unsigned char* data, size_t size) {
  std::string out;
  for (size_t i = 0; i < size; ++i) absl::StrAppendFormat(&out, "%02x", data[i]);
  return out;
}

std::string Sha256Hex(absl::string_view data) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(),
         digest);
  return Hex(digest, sizeof(digest));
}

std::string Hmac(absl::string_view key, absl::string_view data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), out,
       &size);
  return std::string(reinterpret_cast<char*>(out), size);
}

// %XX decoded.
std::string PercentDecode(absl::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    int value = 0;
    if (s[i] == '%' && i + 2 < s.size() &&
        absl::SimpleHexAtoi(s.substr(i + 1, 2), &value)) {
      out.push_back(static_cast<char>(value));
      i += 2;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

// SigV4's URI encoding (every byte but unreserved ones as %XX).
std::string AwsEncode(absl::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppendFormat(&out, "%%%02X", c);
    }
  }
  return out;
}

// Empty when `head` (a request head) carries a valid SigV4 signature by
// `access_key`/`secret`; else the S3 error code to answer with.
std::string CheckSigV4(absl::string_view head, const std::string& access_key,
                       const std::string& secret) {
  std::vector<absl::string_view> lines = absl::StrSplit(head, "\r\n");
  std::vector<absl::string_view> request_line = absl::StrSplit(lines[0], ' ');
  if (request_line.size() != 3) return "InvalidRequest";
  std::vector<std::pair<std::string, std::string>> headers;
  for (size_t i = 1; i < lines.size(); ++i) {
    const size_t colon = lines[i].find(':');
    if (colon == absl::string_view::npos) continue;
    headers.emplace_back(
        absl::AsciiStrToLower(lines[i].substr(0, colon)),
        std::string(absl::StripAsciiWhitespace(lines[i].substr(colon + 1))));
  }
  auto header = [&](absl::string_view name) {
    for (const auto& [n, v] : headers) {
      if (n == name) return v;
    }
    return std::string();
  };
  const std::string authorization = header("authorization");
  absl::string_view auth = authorization;
  if (!absl::ConsumePrefix(&auth, "AWS4-HMAC-SHA256 ")) return "AccessDenied";
  std::string credential, signed_headers, signature;
  for (absl::string_view part : absl::StrSplit(auth, ',')) {
    part = absl::StripAsciiWhitespace(part);
    if (absl::ConsumePrefix(&part, "Credential=")) credential = std::string(part);
    if (absl::ConsumePrefix(&part, "SignedHeaders=")) signed_headers = std::string(part);
    if (absl::ConsumePrefix(&part, "Signature=")) signature = std::string(part);
  }
  std::vector<std::string> scope = absl::StrSplit(credential, '/');
  if (scope.size() != 5 || scope[3] != "s3" || scope[4] != "aws4_request") {
    return "AuthorizationHeaderMalformed";
  }
  if (scope[0] != access_key) return "InvalidAccessKeyId";
  std::vector<std::string> signed_names = absl::StrSplit(signed_headers, ';');
  if (std::find(signed_names.begin(), signed_names.end(), "host") ==
          signed_names.end() ||
      std::find(signed_names.begin(), signed_names.end(), "x-amz-date") ==
          signed_names.end()) {
    return "AccessDenied";
  }
  absl::string_view target = request_line[1];
  const size_t question = target.find('?');
  absl::string_view path = target.substr(0, question);
  std::vector<std::string> params;
  if (question != absl::string_view::npos) {
    for (absl::string_view param :
         absl::StrSplit(target.substr(question + 1), '&', absl::SkipEmpty())) {
      const size_t eq = param.find('=');
      params.push_back(absl::StrCat(
          AwsEncode(PercentDecode(param.substr(0, eq))), "=",
          eq == absl::string_view::npos
              ? std::string()
              : AwsEncode(PercentDecode(param.substr(eq + 1)))));
    }
  }
  std::sort(params.begin(), params.end());
  std::string canonical_headers;
  for (const std::string& name : signed_names) {
    absl::StrAppend(&canonical_headers, name, ":", header(name), "\n");
  }
  std::string payload = header("x-amz-content-sha256");
  if (payload.empty()) payload = Sha256Hex("");
  const std::string canonical_request = absl::StrJoin(
      {std::string(request_line[0]), std::string(path),
       absl::StrJoin(params, "&"), canonical_headers, signed_headers, payload},
      "\n");
  const std::string string_to_sign = absl::StrCat(
      "AWS4-HMAC-SHA256\n", header("x-amz-date"), "\n", scope[1], "/",
      scope[2], "/s3/aws4_request\n", Sha256Hex(canonical_request));
  std::string key = Hmac(absl::StrCat("AWS4", secret), scope[1]);
  key = Hmac(key, scope[2]);
  key = Hmac(key, "s3");
  key = Hmac(key, "aws4_request");
  const std::string expected = Hex(
      reinterpret_cast<const unsigned char*>(Hmac(key, string_to_sign).data()),
      SHA256_DIGEST_LENGTH);
  return expected == signature ? "" : "SignatureDoesNotMatch";
}

}  // namespace

absl::StatusOr<std::unique_ptr<HttpFaultProxy>> HttpFaultProxy::Start(
    int upstream_port) {
  std::unique_ptr<HttpFaultProxy> proxy(new HttpFaultProxy());
  proxy->upstream_port_ = upstream_port;
  proxy->listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(proxy->listen_fd_, reinterpret_cast<sockaddr*>(&addr),
           sizeof(addr)) != 0 ||
      listen(proxy->listen_fd_, 128) != 0) {
    return absl::InternalError(
        absl::StrCat("fault proxy: bind/listen: ", strerror(errno)));
  }
  socklen_t len = sizeof(addr);
  getsockname(proxy->listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  proxy->port_ = ntohs(addr.sin_port);
  HttpFaultProxy* self = proxy.get();
  proxy->acceptor_ = std::thread([self] { self->AcceptLoop(); });
  return proxy;
}

HttpFaultProxy::~HttpFaultProxy() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    for (int fd : open_fds_) shutdown(fd, SHUT_RDWR);
  }
  shutdown(listen_fd_, SHUT_RDWR);
  if (acceptor_.joinable()) acceptor_.join();
  std::vector<std::thread> connections;
  {
    absl::MutexLock lock(&mu_);
    connections.swap(connections_);
  }
  for (std::thread& t : connections) t.join();
  close(listen_fd_);
}

std::string HttpFaultProxy::url() const {
  return absl::StrCat("http://127.0.0.1:", port_);
}

void HttpFaultProxy::FailNext(HttpFault fault, int count) {
  absl::MutexLock lock(&mu_);
  for (int i = 0; i < count; ++i) script_.push_back(fault);
}

void HttpFaultProxy::Always(HttpFault fault) {
  absl::MutexLock lock(&mu_);
  always_ = fault;
}

void HttpFaultProxy::RequireSigV4(const std::string& access_key,
                                  const std::string& secret_key) {
  absl::MutexLock lock(&mu_);
  sigv4_access_key_ = access_key;
  sigv4_secret_key_ = secret_key;
}

void HttpFaultProxy::SetStall(absl::Duration stall) {
  absl::MutexLock lock(&mu_);
  stall_ = stall;
}

void HttpFaultProxy::SetLatency(absl::Duration latency) {
  absl::MutexLock lock(&mu_);
  latency_ = latency;
}

int HttpFaultProxy::requests() const {
  absl::MutexLock lock(&mu_);
  return requests_;
}

int HttpFaultProxy::faulted() const {
  absl::MutexLock lock(&mu_);
  return faulted_;
}

int HttpFaultProxy::connections_accepted() const {
  absl::MutexLock lock(&mu_);
  return accepted_;
}

int HttpFaultProxy::max_open_connections() const {
  absl::MutexLock lock(&mu_);
  return max_open_;
}

std::string HttpFaultProxy::last_request_head() const {
  absl::MutexLock lock(&mu_);
  return last_request_head_;
}

HttpFault HttpFaultProxy::NextFault() {
  absl::MutexLock lock(&mu_);
  ++requests_;
  HttpFault fault = always_;
  if (!script_.empty()) {
    fault = script_.front();
    script_.pop_front();
  }
  if (fault != HttpFault::kNone) ++faulted_;
  return fault;
}

bool HttpFaultProxy::Sleep(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&stopping_), d);
  return !stopping_;
}

void HttpFaultProxy::AcceptLoop() {
  while (true) {
    const int fd = accept(listen_fd_, nullptr, nullptr);
    if (fd < 0) {
      if (errno == EINTR) continue;
      return;  // shut down
    }
    absl::MutexLock lock(&mu_);
    if (stopping_) {
      close(fd);
      return;
    }
    open_fds_.insert(fd);
    ++accepted_;
    max_open_ = std::max(max_open_, static_cast<int>(open_fds_.size()));
    connections_.emplace_back([this, fd] { Serve(fd); });
  }
}

void HttpFaultProxy::Serve(int client_fd) {
  std::string buffer;
  bool keep_open = true;
  while (keep_open) {
    const std::string request_head = ReadHead(client_fd, buffer);
    if (request_head.empty()) break;
    absl::Duration latency, stall;
    std::string access_key, secret_key;
    {
      absl::MutexLock lock(&mu_);
      latency = latency_;
      stall = stall_;
      access_key = sigv4_access_key_;
      secret_key = sigv4_secret_key_;
      last_request_head_ = request_head;
    }
    if (!access_key.empty()) {
      const std::string error = CheckSigV4(request_head, access_key, secret_key);
      if (!error.empty()) {
        const std::string body = absl::StrCat(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>", error,
            "</Code><Message>checked by the test proxy</Message></Error>");
        keep_open = SendAll(
            client_fd, absl::StrCat("HTTP/1.1 403 Forbidden\r\n"
                                    "Content-Type: application/xml\r\n"
                                    "Content-Length: ",
                                    body.size(), "\r\n\r\n",
                                    absl::StartsWith(request_head, "HEAD ")
                                        ? ""
                                        : body));
        continue;
      }
    }
    const HttpFault fault = NextFault();
    if (fault == HttpFault::kLatency && !Sleep(latency)) break;
    if (fault == HttpFault::kStatus500 || fault == HttpFault::kStatus429) {
      const std::string body = "injected by the fault proxy\n";
      keep_open = SendAll(
          client_fd,
          absl::StrCat(fault == HttpFault::kStatus500
                           ? "HTTP/1.1 500 Internal Server Error\r\n"
                           : "HTTP/1.1 429 Too Many Requests\r\n",
                       "Content-Type: text/plain\r\nContent-Length: ",
                       body.size(), "\r\n\r\n", body));
      continue;
    }
    // Forward on a fresh upstream connection and read it to its end.
    const int upstream = Connect(upstream_port_);
    if (upstream < 0) break;
    const bool sent = SendAll(
        upstream,
        RewriteHead(request_head, "Connection: close\r\n", HttpFault::kNone));
    std::string response;
    if (sent) {
      char chunk[65536];
      while (true) {
        const ssize_t n = recv(upstream, chunk, sizeof(chunk), 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        response.append(chunk, static_cast<size_t>(n));
      }
    }
    close(upstream);
    const size_t head_end = response.find("\r\n\r\n");
    if (head_end == std::string::npos) break;
    const std::string head =
        RewriteHead(absl::string_view(response).substr(0, head_end + 4), "",
                    fault);
    absl::string_view body = absl::string_view(response).substr(head_end + 4);
    switch (fault) {
      case HttpFault::kResetMidBody:
      case HttpFault::kStall:
      case HttpFault::kTruncateBody: {
        SendAll(client_fd, absl::StrCat(head, body.substr(0, body.size() / 2)));
        if (fault == HttpFault::kStall) Sleep(stall);
        if (fault == HttpFault::kResetMidBody) {
          linger reset{1, 0};
          setsockopt(client_fd, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
        }
        keep_open = false;
        break;
      }
      default:
        keep_open = SendAll(client_fd, absl::StrCat(head, body));
        break;
    }
  }
  absl::MutexLock lock(&mu_);
  open_fds_.erase(client_fd);
  close(client_fd);
}

}  // namespace batchd::testing
