// CheckResponse: the verdict on one attempt of an HTTP request, from what
// the attempt saw: success, a failure worth retrying, or a final error
// with the message people read. Pure (no I/O, no libcurl): HttpClient runs
// the attempts, this decides, and its rules are unit-tested on made-up
// responses.
//
//   Verdict v = CheckResponse(request, response);
//   if (!v.status.ok() && v.retry) { back off, try again }
#ifndef BATCHD_SERVER_STORAGE_RESPONSE_CHECK_H_
#define BATCHD_SERVER_STORAGE_RESPONSE_CHECK_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace batchd::server {

// What was asked.
struct RequestFacts {
  std::string dataset;    // named in every error
  std::string method;     // "GET" or "HEAD"
  std::string shown_url;  // the URL as people know it (s3://...)
  bool ranged = false;    // GET of [offset, offset + size)
  uint64_t offset = 0;
  uint64_t size = 0;        // > 0 when ranged
  uint64_t total_size = 0;  // the object's size as indexed
  std::string etag;         // as indexed; empty: any
  uint64_t max_body = 0;    // unranged GET: the most bytes accepted

  // "GET s3://b/k bytes=0-9"
  std::string Describe() const;
};

// How the transfer itself ended.
enum class Transport {
  kOk,           // a complete response
  kTransient,    // reset, timeout, refused, truncated, ...
  kCertificate,  // the server's certificate was not trusted
  kFatal,        // anything else libcurl reports
  kStalled,      // no byte for the stall timeout
  kBodyRefused,  // more body than asked for (not written)
  kCancelled,    // aborted: the daemon is stopping
  // Slower than the store's minimum rate (low_speed_bytes_per_s over
  // low_speed_time: libcurl's low-speed limit).
  kTooSlow,
  // Aborted after the headers: CheckHeaders refused them, so no byte of
  // the body was taken.
  kHeadersRefused,
};

// What came back.
struct ResponseFacts {
  Transport transport = Transport::kOk;
  std::string transport_error;  // libcurl's words, when not kOk
  absl::Duration stall_timeout;  // for kStalled's message
  // For kTooSlow's message: the minimum rate and the time under it.
  int64_t low_speed_bytes_per_s = 0;
  absl::Duration low_speed_time;
  long http_status = 0;          // 0: no status line
  std::string etag;
  std::string content_range;
  int64_t content_length = -1;  // -1: none in the headers
  std::string error_body;  // the start of a non-2xx body (S3's XML)
  uint64_t received = 0;   // body bytes accepted
  // A 3xx answer: where it pointed (absolute), and why it was not
  // followed ("--remote-redirects=none", ...).
  std::string redirect_url;
  std::string redirect_refused;
};

struct Verdict {
  absl::Status status;
  bool retry = false;  // only with a non-OK status
};

// 2xx whose bytes are exactly what `request` asked for: OK. 5xx, 408, 429,
// transient transport errors, stalls, a wrong Content-Range and short or
// long bodies: UNAVAILABLE, retry. 401/403: PERMISSION_DENIED ("check the
// credentials for dataset X"); 404: NOT_FOUND ("wrong prefix or URL");
// 412, another ETag or another total size: FAILED_PRECONDITION ("changed
// since it was indexed"); 416: OUT_OF_RANGE; an untrusted certificate:
// FAILED_PRECONDITION (ca_file); a redirect not followed:
// FAILED_PRECONDITION naming its target and why; a cancelled transfer:
// CANCELLED. Messages start with the dataset and `request.Describe()`.
Verdict CheckResponse(const RequestFacts& request,
                      const ResponseFacts& response);

// The part of CheckResponse that the headers alone decide, for a final
// (non-1xx, non-3xx) answer to a ranged read: HTTP 200 to a range that is
// not the whole object (the store ignores Range: FAILED_PRECONDITION with
// StoreFault::kIgnoresRange), another ETag than the indexed one
// (FAILED_PRECONDITION with StoreFault::kChanged), a 206 whose
// Content-Range is not the range asked or whose Content-Length is larger
// (UNAVAILABLE, retried), another total size (kChanged). OK when the body
// may be read. HttpClient calls it from libcurl's header callback and
// aborts the transfer before the body when it fails.
Verdict CheckHeaders(const RequestFacts& request,
                     const ResponseFacts& response);

// What a failed read says about the object or the store, carried in the
// status's payload (so that callers need not parse messages).
enum class StoreFault {
  kNone,
  kChanged,       // the object changed since it was indexed (412, ETag)
  kIgnoresRange,  // the store answered 200 with the whole object
};
StoreFault StoreFaultOf(const absl::Status& status);
void SetStoreFault(absl::Status& status, StoreFault fault);

}  // namespace batchd::server

#endif  // BATCHD_SERVER_STORAGE_RESPONSE_CHECK_H_
