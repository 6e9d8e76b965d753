// HttpClient: GET (whole or by byte range) and HEAD over libcurl, with a
// bounded pool of kept-alive connections, retries with jittered
// exponential backoff, and checks on every ranged read (status, Content-
// Range, body length, ETag). Optionally signs requests with AWS SigV4.
//
// Redirects are followed here, not by libcurl, and only as
// store.redirects allows (none by default; signed requests never);
// libcurl is pinned to http and https. When store.cancelled is set, a
// transfer in flight aborts and every request ends with CANCELLED.
//
// A ranged read's headers are judged before its body (CheckHeaders): an
// answer that is not the range asked (HTTP 200 with the whole object,
// another ETag or Content-Range, a longer Content-Length) is aborted
// before a byte of its body is taken, and a body is cut the moment it
// passes the range. An attempt slower than store.low_speed_bytes_per_s
// over store.low_speed_time fails. Each failed attempt goes to
// store.on_fault.
//
// Errors name the dataset, the method, the URL as shown to people, the
// range and the HTTP status; never a credential.
//
// Thread-safe: up to `options.connections` requests run at once; more wait
// for a free connection.
#ifndef BATCHD_SERVER_STORAGE_HTTP_CLIENT_H_
#define BATCHD_SERVER_STORAGE_HTTP_CLIENT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/storage/object_store.h"
#include "server/storage/response_check.h"

namespace batchd::server {

struct HttpClientOptions {
  std::string dataset;  // named in every error
  ObjectStoreOptions store;
  std::string ca_file;  // PEM CAs for https; empty: the system's
  // SigV4 signing when `access_key` is not empty: `sigv4` is libcurl's
  // CURLOPT_AWS_SIGV4 provider, e.g. "aws:amz:us-east-1:s3".
  std::string sigv4;
  std::string access_key;
  std::string secret_key;
  std::string session_token;  // sent as x-amz-security-token when set
};

class HttpClient {
 public:
  explicit HttpClient(HttpClientOptions options);
  // REQUIRES: no request in flight.
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  struct HeadResult {
    uint64_t size = 0;
    std::string etag;
  };
  // HEAD `url`. `shown_url` is the URL put in errors (s3://... for S3).
  // Blocks for the request and its retries (at most store.deadline).
  absl::StatusOr<HeadResult> Head(const std::string& url,
                                  const std::string& shown_url);

  // GET `url`'s whole body; RESOURCE_EXHAUSTED past `max_bytes`.
  absl::StatusOr<std::string> GetAll(const std::string& url,
                                     const std::string& shown_url,
                                     uint64_t max_bytes);

  // GET bytes [offset, offset + size) of `url` into `dest`, with
  // If-Match: `etag` when `etag` is a strong ETag. The response must be a
  // 206 whose Content-Range is exactly that range of `total_size` bytes
  // and whose body is `size` bytes, and its ETag (when given) `etag`; a
  // wrong range or a short body is retried, a changed object is
  // FAILED_PRECONDITION. `dest` may hold partial bytes after an error.
  absl::Status GetRange(const std::string& url, const std::string& shown_url,
                        uint64_t offset, uint64_t size,
                        const std::string& etag, uint64_t total_size,
                        uint8_t* dest);

 private:
  struct Request;

  // Runs `request` until it succeeds, fails for good, or runs out of
  // attempts or time.
  absl::Status Run(Request& request);
  // One attempt on a pooled connection, judged by CheckResponse.
  Verdict Attempt(Request& request, absl::Time deadline);
  RequestFacts Facts(const char* method, const std::string& shown_url) const;
  // Tells store.on_fault of a failed attempt (see StoreFaultReport).
  void Report(const Request& request, const absl::Status& status);

  void* Acquire();  // CURL*; blocks until one is free
  void Release(void* handle);

  // Constant after construction.
  const HttpClientOptions options_;

  absl::Mutex mu_;
  std::vector<void*> idle_ ABSL_GUARDED_BY(mu_);  // CURL* kept alive
  int created_ ABSL_GUARDED_BY(mu_) = 0;          // <= store.connections
};

}  // namespace batchd::server

#endif  // BATCHD_SERVER_STORAGE_HTTP_CLIENT_H_
