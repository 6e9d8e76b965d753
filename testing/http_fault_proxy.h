// HttpFaultProxy: an HTTP/1.1 proxy for tests that forwards each request
// to an upstream server on the loopback and can spoil the response, one
// request at a time, as a test scripts it:
//
//   ASSERT_OK_AND_ASSIGN(auto proxy, HttpFaultProxy::Start(nginx->port()));
//   proxy->FailNext(HttpFault::kResetMidBody, /*count=*/2);
//   // requests to proxy->url() + "/x.tar": the first two are reset halfway
//   // through the body, later ones pass through untouched.
//
// Faults are applied to requests in arrival order, scripted ones first,
// then `Always`'s. Each request goes to the upstream on a fresh connection
// (Connection: close); the client's connection is kept alive between
// requests except where a fault closes it.
//
// Thread-safe. The destructor stops the proxy: it closes every connection,
// ends stalls and joins its threads.
#ifndef BATCHD_TESTING_HTTP_FAULT_PROXY_H_
#define BATCHD_TESTING_HTTP_FAULT_PROXY_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace batchd::testing {

enum class HttpFault {
  kNone,               // forwarded untouched
  kStatus500,          // answered 500 Internal Server Error, not forwarded
  kStatus429,          // answered 429 Too Many Requests, not forwarded
  kResetMidBody,       // headers and half the body, then a TCP reset
  kStall,              // headers and half the body, then nothing for
                       // stall_duration (SetStall), then closed
  kTruncateBody,       // headers (the full Content-Length), half the body,
                       // then a clean close
  kWrongContentRange,  // Content-Range shifted by one byte, body untouched
  kChangedEtag,        // ETag replaced by another
  kLatency,            // forwarded after latency (SetLatency)
  // Answered by the proxy, not forwarded:
  kListing,            // a page of a made-up ListObjectsV2 listing
                       // (SetListing), from the request's
                       // continuation-token
  kRepeatingListing,   // a ListObjectsV2 page of SetListing's page_keys
                       // keys whose NextContinuationToken is always the
                       // same: a client that trusts it lists forever
  kRedirect,           // 302 Found to SetRedirect's base + the request's
                       // path and query
  // The object changed in the store (its ETag is no longer the one
  // indexed): a request with If-Match is answered 412 Precondition Failed
  // with no body; one without is forwarded with another ETag.
  kObjectChanged,
  // A store that ignores Range: forwarded without Range and If-Match, so
  // the upstream answers 200 with the whole object.
  kIgnoreRange,
  // Forwarded; the headers at once, then the body one byte every
  // SetDrip interval (default 1 s).
  kDrip,
  // Forwarded; the headers without Content-Length, the body, then filler
  // bytes without end, as fast as the client takes them, until it closes.
  kEndlessBody,
};

class HttpFaultProxy {
 public:
  // A proxy on 127.0.0.1 (a free port) to 127.0.0.1:`upstream_port`.
  static absl::StatusOr<std::unique_ptr<HttpFaultProxy>> Start(
      int upstream_port);
  ~HttpFaultProxy();
  HttpFaultProxy(const HttpFaultProxy&) = delete;
  HttpFaultProxy& operator=(const HttpFaultProxy&) = delete;

  int port() const { return port_; }
  std::string url() const;  // "http://127.0.0.1:<port>"

  // The next `count` requests not yet scripted get `fault`.
  void FailNext(HttpFault fault, int count = 1);
  // Every request after the scripted ones gets `fault` (kNone: none).
  void Always(HttpFault fault);
  // How long kStall stalls (default 60 s; Stop ends it) and the delay
  // kLatency adds (default 200 ms).
  void SetStall(absl::Duration stall);
  void SetLatency(absl::Duration latency);
  // The listing kListing serves: `keys` keys "<prefix>shard-NNNNNNN.tar"
  // (prefix as the request asks), `page_keys` a page, each page answered
  // after `page_delay`. kRepeatingListing's pages hold `page_keys` keys.
  void SetListing(int keys, int page_keys, absl::Duration page_delay);
  // Where kRedirect sends a request: "http://127.0.0.1:<port>".
  void SetRedirect(std::string base);
  // The time between two bytes of kDrip.
  void SetDrip(absl::Duration interval);
  // Requests received so far, and how many of them got a fault.
  int requests() const;
  int faulted() const;
  // Bytes sent to clients so far (heads and bodies).
  uint64_t bytes_sent() const;
  // Client connections accepted so far, and the most open at once.
  int connections_accepted() const;
  int max_open_connections() const;
  // The head (request line and headers) of the latest request.
  std::string last_request_head() const;

 private:
  HttpFaultProxy() = default;
  void AcceptLoop();
  void Serve(int client_fd);
  HttpFault NextFault();
  // The answer to a listing or redirect fault for `request_head`.
  std::string Answer(HttpFault fault, absl::string_view request_head);
  // Sleeps `d` or until Stop; false when stopped.
  bool Sleep(absl::Duration d);
  // SendAll to a client, counted in bytes_sent.
  bool SendToClient(int fd, absl::string_view data);

  // Constant after Start.
  int listen_fd_ = -1;
  int port_ = 0;
  int upstream_port_ = 0;
  std::thread acceptor_;

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<HttpFault> script_ ABSL_GUARDED_BY(mu_);
  HttpFault always_ ABSL_GUARDED_BY(mu_) = HttpFault::kNone;
  absl::Duration stall_ ABSL_GUARDED_BY(mu_) = absl::Seconds(60);
  absl::Duration latency_ ABSL_GUARDED_BY(mu_) = absl::Milliseconds(200);
  int listing_keys_ ABSL_GUARDED_BY(mu_) = 0;
  int listing_page_keys_ ABSL_GUARDED_BY(mu_) = 1000;
  absl::Duration listing_page_delay_ ABSL_GUARDED_BY(mu_);
  std::string redirect_base_ ABSL_GUARDED_BY(mu_);
  absl::Duration drip_ ABSL_GUARDED_BY(mu_) = absl::Seconds(1);
  uint64_t bytes_sent_ ABSL_GUARDED_BY(mu_) = 0;
  int requests_ ABSL_GUARDED_BY(mu_) = 0;
  int faulted_ ABSL_GUARDED_BY(mu_) = 0;
  int accepted_ ABSL_GUARDED_BY(mu_) = 0;
  int max_open_ ABSL_GUARDED_BY(mu_) = 0;
  std::string last_request_head_ ABSL_GUARDED_BY(mu_);
  std::set<int> open_fds_ ABSL_GUARDED_BY(mu_);  // client connections
  std::vector<std::thread> connections_ ABSL_GUARDED_BY(mu_);
};

}  // namespace batchd::testing

#endif  // BATCHD_TESTING_HTTP_FAULT_PROXY_H_
