#include "testing/http_fault_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/errno_status.h"
#include "testing/loopback_socket.h"

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
      if (fault == HttpFault::kIgnoreRange &&
          (name == "range" || name == "if-match")) {
        continue;
      }
      if (fault == HttpFault::kEndlessBody && name == "content-length") {
        continue;
      }
      if ((fault == HttpFault::kChangedEtag ||
           fault == HttpFault::kObjectChanged) &&
          name == "etag") {
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

// The request target of a request head ("/bkt?list-type=2&...").
absl::string_view Target(absl::string_view head) {
  const size_t first = head.find(' ');
  if (first == absl::string_view::npos) return "";
  const size_t second = head.find(' ', first + 1);
  if (second == absl::string_view::npos) return "";
  return head.substr(first + 1, second - first - 1);
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

// The decoded value of query parameter `name` in `target`; empty if absent.
std::string QueryParam(absl::string_view target, absl::string_view name) {
  const size_t q = target.find('?');
  if (q == absl::string_view::npos) return "";
  for (absl::string_view pair :
       absl::StrSplit(target.substr(q + 1), '&')) {
    const size_t eq = pair.find('=');
    if (pair.substr(0, eq) == name && eq != absl::string_view::npos) {
      return PercentDecode(pair.substr(eq + 1));
    }
  }
  return "";
}

std::string Response(absl::string_view status, absl::string_view type,
                     absl::string_view extra, absl::string_view body) {
  return absl::StrCat("HTTP/1.1 ", status, "\r\nContent-Type: ", type,
                      "\r\nContent-Length: ", body.size(), "\r\n", extra,
                      "\r\n", body);
}

// A ListObjectsV2 page of keys [first, first + count) under `prefix`;
// truncated with `next_token` when that is not empty.
std::string ListingPage(const std::string& prefix, int first, int count,
                        const std::string& next_token) {
  std::string xml =
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ListBucketResult>";
  for (int i = first; i < first + count; ++i) {
    absl::StrAppendFormat(&xml,
                          "<Contents><Key>%sshard-%07d.tar</Key>"
                          "<Size>10240</Size><ETag>\"e%d\"</ETag></Contents>",
                          prefix, i, i);
  }
  absl::StrAppend(&xml, "<KeyCount>", count, "</KeyCount><IsTruncated>",
                  next_token.empty() ? "false" : "true", "</IsTruncated>");
  if (!next_token.empty()) {
    absl::StrAppend(&xml, "<NextContinuationToken>", next_token,
                    "</NextContinuationToken>");
  }
  absl::StrAppend(&xml, "</ListBucketResult>");
  return xml;
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
    return common::ErrnoStatus(errno, "fault proxy: bind/listen");
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

void HttpFaultProxy::SetStall(absl::Duration stall) {
  absl::MutexLock lock(&mu_);
  stall_ = stall;
}

void HttpFaultProxy::SetLatency(absl::Duration latency) {
  absl::MutexLock lock(&mu_);
  latency_ = latency;
}

void HttpFaultProxy::SetListing(int keys, int page_keys,
                                absl::Duration page_delay) {
  absl::MutexLock lock(&mu_);
  listing_keys_ = keys;
  listing_page_keys_ = std::max(1, page_keys);
  listing_page_delay_ = page_delay;
}

void HttpFaultProxy::SetDrip(absl::Duration interval) {
  absl::MutexLock lock(&mu_);
  drip_ = interval;
}

uint64_t HttpFaultProxy::bytes_sent() const {
  absl::MutexLock lock(&mu_);
  return bytes_sent_;
}

bool HttpFaultProxy::SendToClient(int fd, absl::string_view data) {
  // Only what the kernel took counts: a client that closes mid-body cuts
  // what the store sends.
  while (!data.empty()) {
    const ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      return false;
    }
    {
      absl::MutexLock lock(&mu_);
      bytes_sent_ += static_cast<uint64_t>(n);
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

void HttpFaultProxy::SetRedirect(std::string base) {
  absl::MutexLock lock(&mu_);
  redirect_base_ = std::move(base);
}

std::string HttpFaultProxy::Answer(HttpFault fault,
                                   absl::string_view request_head) {
  const absl::string_view target = Target(request_head);
  int keys = 0, page_keys = 0;
  std::string redirect_base;
  {
    absl::MutexLock lock(&mu_);
    keys = listing_keys_;
    page_keys = listing_page_keys_;
    redirect_base = redirect_base_;
  }
  if (fault == HttpFault::kRedirect) {
    return Response("302 Found", "text/plain",
                    absl::StrCat("Location: ", redirect_base, target, "\r\n"),
                    "moved\n");
  }
  const std::string prefix = QueryParam(target, "prefix");
  if (fault == HttpFault::kRepeatingListing) {
    return Response("200 OK", "application/xml", "",
                    ListingPage(prefix, 0, page_keys, "same-token"));
  }
  int first = 0;
  const std::string token = QueryParam(target, "continuation-token");
  if (!token.empty() && !absl::SimpleAtoi(token, &first)) first = keys;
  first = std::min(std::max(first, 0), keys);
  const int count = std::min(page_keys, keys - first);
  const std::string next =
      first + count < keys ? absl::StrCat(first + count) : std::string();
  return Response("200 OK", "application/xml", "",
                  ListingPage(prefix, first, count, next));
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
    {
      absl::MutexLock lock(&mu_);
      latency = latency_;
      stall = stall_;
      last_request_head_ = request_head;
    }
    const HttpFault fault = NextFault();
    if (fault == HttpFault::kLatency && !Sleep(latency)) break;
    if (fault == HttpFault::kListing || fault == HttpFault::kRepeatingListing ||
        fault == HttpFault::kRedirect) {
      absl::Duration page_delay;
      {
        absl::MutexLock lock(&mu_);
        page_delay = listing_page_delay_;
      }
      if (fault != HttpFault::kRedirect && page_delay > absl::ZeroDuration() &&
          !Sleep(page_delay)) {
        break;
      }
      keep_open = SendToClient(client_fd, Answer(fault, request_head));
      continue;
    }
    if (fault == HttpFault::kObjectChanged &&
        absl::StrContains(absl::AsciiStrToLower(request_head),
                          "\r\nif-match:")) {
      keep_open = SendToClient(
          client_fd,
          "HTTP/1.1 412 Precondition Failed\r\nContent-Length: 0\r\n"
          "ETag: \"changed-by-proxy\"\r\n\r\n");
      continue;
    }
    if (fault == HttpFault::kStatus500 || fault == HttpFault::kStatus429) {
      const std::string body = "injected by the fault proxy\n";
      keep_open = SendToClient(
          client_fd,
          absl::StrCat(fault == HttpFault::kStatus500
                           ? "HTTP/1.1 500 Internal Server Error\r\n"
                           : "HTTP/1.1 429 Too Many Requests\r\n",
                       "Content-Type: text/plain\r\nContent-Length: ",
                       body.size(), "\r\n\r\n", body));
      continue;
    }
    // Forward on a fresh upstream connection and read it to its end.
    const int upstream = ConnectLoopback(upstream_port_);
    if (upstream < 0) break;
    const bool sent = SendAll(
        upstream,
        RewriteHead(request_head, "Connection: close\r\n",
                    fault == HttpFault::kIgnoreRange ? fault
                                                     : HttpFault::kNone));
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
        SendToClient(client_fd, absl::StrCat(head, body.substr(0, body.size() / 2)));
        if (fault == HttpFault::kStall) Sleep(stall);
        if (fault == HttpFault::kResetMidBody) {
          linger reset{1, 0};
          setsockopt(client_fd, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
        }
        keep_open = false;
        break;
      }
      case HttpFault::kDrip: {
        absl::Duration interval;
        {
          absl::MutexLock lock(&mu_);
          interval = drip_;
        }
        keep_open = SendToClient(client_fd, head);
        for (size_t i = 0; keep_open && i < body.size(); ++i) {
          keep_open = Sleep(interval) &&
                      SendToClient(client_fd, body.substr(i, 1));
        }
        break;
      }
      case HttpFault::kEndlessBody: {
        // No Content-Length: the body ends when the connection does.
        bool open = SendToClient(client_fd, absl::StrCat(head, body));
        const std::string filler(16384, 'x');
        while (open) {
          {
            absl::MutexLock lock(&mu_);
            if (stopping_) break;
          }
          open = SendToClient(client_fd, filler);
        }
        keep_open = false;
        break;
      }
      default:
        keep_open = SendToClient(client_fd, absl::StrCat(head, body));
        break;
    }
  }
  absl::MutexLock lock(&mu_);
  open_fds_.erase(client_fd);
  close(client_fd);
}

}  // namespace batchd::testing
