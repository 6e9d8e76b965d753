#include "server/storage/response_check.h"

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/types/optional.h"
#include "server/storage/object_url.h"

namespace batchd::server {

namespace {

constexpr absl::string_view kStoreFaultUrl = "type.batchd.dev/store_fault";

Verdict Changed(Verdict verdict) {
  SetStoreFault(verdict.status, StoreFault::kChanged);
  return verdict;
}

}  // namespace

StoreFault StoreFaultOf(const absl::Status& status) {
  const absl::optional<absl::Cord> payload =
      status.GetPayload(kStoreFaultUrl);
  if (!payload.has_value()) return StoreFault::kNone;
  if (*payload == "changed") return StoreFault::kChanged;
  if (*payload == "ignores-range") return StoreFault::kIgnoresRange;
  return StoreFault::kNone;
}

void SetStoreFault(absl::Status& status, StoreFault fault) {
  if (status.ok()) return;
  switch (fault) {
    case StoreFault::kNone:
      status.ErasePayload(kStoreFaultUrl);
      break;
    case StoreFault::kChanged:
      status.SetPayload(kStoreFaultUrl, absl::Cord("changed"));
      break;
    case StoreFault::kIgnoresRange:
      status.SetPayload(kStoreFaultUrl, absl::Cord("ignores-range"));
      break;
  }
}

std::string RequestFacts::Describe() const {
  std::string out = absl::StrCat(method, " ", shown_url);
  if (ranged) absl::StrAppend(&out, " bytes=", offset, "-", offset + size - 1);
  return out;
}

namespace {

// The verdict that `request` failed: `message` after the dataset and the
// request, `retry` whether another attempt may do better.
Verdict Failed(const RequestFacts& request, absl::StatusCode code,
               absl::string_view message, bool retry) {
  return Verdict{
      absl::Status(code, absl::StrCat("dataset \"", request.dataset, "\": ",
                                      request.Describe(), ": ", message)),
      retry};
}

}  // namespace

Verdict CheckResponse(const RequestFacts& request,
                      const ResponseFacts& response) {
  auto fail = [&](absl::StatusCode code, absl::string_view message,
                  bool retry) { return Failed(request, code, message, retry); };
  const long http = response.http_status;
  const std::string with_status =
      http != 0 ? absl::StrCat(" (HTTP ", http, ")") : std::string();
  switch (response.transport) {
    case Transport::kOk:
    case Transport::kBodyRefused:
    case Transport::kHeadersRefused:
      break;
    case Transport::kTooSlow:
      return fail(
          absl::StatusCode::kUnavailable,
          absl::StrCat("too slow: under ", response.low_speed_bytes_per_s,
                       " bytes/s for ",
                       absl::FormatDuration(response.low_speed_time),
                       with_status,
                       " (--remote-low-speed-bytes-per-s, "
                       "--remote-low-speed-seconds)"),
          true);
    case Transport::kCancelled:
      return fail(absl::StatusCode::kCancelled,
                  "cancelled: the daemon is stopping", false);
    case Transport::kStalled:
      return fail(absl::StatusCode::kUnavailable,
                  absl::StrCat("stalled: no byte for ",
                               absl::FormatDuration(response.stall_timeout),
                               with_status),
                  true);
    case Transport::kCertificate:
      return fail(absl::StatusCode::kFailedPrecondition,
                  absl::StrCat(response.transport_error,
                               " (check the dataset's ca_file)"),
                  false);
    case Transport::kTransient:
      return fail(absl::StatusCode::kUnavailable,
                  absl::StrCat(response.transport_error, with_status), true);
    case Transport::kFatal:
      return fail(absl::StatusCode::kInternal,
                  absl::StrCat(response.transport_error, with_status), false);
  }

  if (http < 200 || http >= 300) {
    std::string status_text = absl::StrCat("HTTP ", http);
    const std::string s3_code = XmlElement(response.error_body, "Code");
    if (!s3_code.empty()) absl::StrAppend(&status_text, " ", s3_code);
    const std::string s3_message = XmlElement(response.error_body, "Message");
    if (!s3_message.empty()) absl::StrAppend(&status_text, ": ", s3_message);
    if (http == 401 || http == 403) {
      return fail(absl::StatusCode::kPermissionDenied,
                  absl::StrCat(status_text,
                               "; check the credentials for dataset \"",
                               request.dataset, "\""),
                  false);
    }
    if (http == 404) {
      return fail(absl::StatusCode::kNotFound,
                  absl::StrCat(status_text,
                               "; wrong prefix or URL in the dataset's path?"),
                  false);
    }
    if (http == 412) {
      return Changed(fail(absl::StatusCode::kFailedPrecondition,
                  absl::StrCat(status_text,
                               ": the object changed since it was indexed "
                               "(its ETag is no longer ",
                               request.etag, ")"),
                  false));
    }
    if (http >= 300 && http < 400) {
      return fail(absl::StatusCode::kFailedPrecondition,
                  absl::StrCat(status_text, " redirect",
                               response.redirect_url.empty()
                                   ? std::string(" without a Location")
                                   : absl::StrCat(" to ",
                                                  response.redirect_url),
                               ", not followed (", response.redirect_refused,
                               ")"),
                  false);
    }
    if (http == 416) {
      return fail(absl::StatusCode::kOutOfRange,
                  absl::StrCat(status_text, ": range beyond the object's end"),
                  false);
    }
    if (http == 408 || http == 429 || http >= 500 || http == 0) {
      return fail(absl::StatusCode::kUnavailable, status_text, true);
    }
    return fail(absl::StatusCode::kFailedPrecondition, status_text, false);
  }

  if (request.method == "HEAD" || !request.ranged) {
    if (!request.etag.empty() && !response.etag.empty() &&
        response.etag != request.etag) {
      return Changed(fail(absl::StatusCode::kFailedPrecondition,
                          absl::StrCat("the object changed since it was "
                                       "indexed (ETag ",
                                       response.etag, ", indexed as ",
                                       request.etag, ")"),
                          false));
    }
  }
  if (request.method == "HEAD") return {absl::OkStatus(), false};
  if (!request.ranged) {
    if (response.transport == Transport::kBodyRefused) {
      return fail(absl::StatusCode::kResourceExhausted,
                  absl::StrCat("the body is larger than ", request.max_body,
                               " bytes"),
                  false);
    }
    return {absl::OkStatus(), false};
  }

  // A ranged read: exactly the bytes asked for, or nothing.
  Verdict headers = CheckHeaders(request, response);
  if (!headers.status.ok()) return headers;
  if (response.transport == Transport::kBodyRefused) {
    return fail(absl::StatusCode::kUnavailable,
                absl::StrCat("more than the ", request.size,
                             " bytes asked for (HTTP ", http, ")"),
                true);
  }
  if (response.received != request.size) {
    return fail(absl::StatusCode::kUnavailable,
                absl::StrCat("short body: ", response.received, " of ",
                             request.size, " bytes"),
                true);
  }
  return {absl::OkStatus(), false};
}

Verdict CheckHeaders(const RequestFacts& request,
                     const ResponseFacts& response) {
  auto fail = [&](absl::StatusCode code, absl::string_view message,
                  bool retry) { return Failed(request, code, message, retry); };
  const long http = response.http_status;
  if (!request.ranged || http < 200 || http >= 300) {
    return {absl::OkStatus(), false};
  }
  if (!request.etag.empty() && !response.etag.empty() &&
      response.etag != request.etag) {
    return Changed(fail(absl::StatusCode::kFailedPrecondition,
                        absl::StrCat("the object changed since it was indexed "
                                     "(ETag ",
                                     response.etag, ", indexed as ",
                                     request.etag, ")"),
                        false));
  }
  const bool whole = request.offset == 0 && request.size == request.total_size;
  if (http == 200 && !whole) {
    Verdict verdict = fail(
        absl::StatusCode::kFailedPrecondition,
        absl::StrCat("the store ignores Range: answered 200 with the whole "
                     "object",
                     response.content_length >= 0
                         ? absl::StrCat(" (", response.content_length,
                                        " bytes)")
                         : std::string()),
        false);
    SetStoreFault(verdict.status, StoreFault::kIgnoresRange);
    return verdict;
  }
  if (http == 206) {
    absl::StatusOr<ContentRange> got = ParseContentRange(response.content_range);
    if (!got.ok()) {
      return fail(absl::StatusCode::kUnavailable,
                  absl::StrCat("HTTP 206 with ", got.status().message()), true);
    }
    if (got->first != request.offset ||
        got->last != request.offset + request.size - 1) {
      return fail(absl::StatusCode::kUnavailable,
                  absl::StrCat("HTTP 206 with the wrong Content-Range \"",
                               response.content_range, "\""),
                  true);
    }
    if (got->total >= 0 &&
        static_cast<uint64_t>(got->total) != request.total_size) {
      return Changed(fail(absl::StatusCode::kFailedPrecondition,
                          absl::StrCat("the object changed since it was "
                                       "indexed (",
                                       got->total, " bytes, indexed as ",
                                       request.total_size, ")"),
                          false));
    }
  } else if (http != 200) {
    return fail(absl::StatusCode::kUnavailable,
                absl::StrCat("unexpected HTTP ", http, " to a ranged read"),
                true);
  }
  if (response.content_length >= 0 &&
      static_cast<uint64_t>(response.content_length) > request.size) {
    return fail(absl::StatusCode::kUnavailable,
                absl::StrCat("Content-Length ", response.content_length,
                             " for a range of ", request.size,
                             " bytes (HTTP ", http, ")"),
                true);
  }
  return {absl::OkStatus(), false};
}

}  // namespace batchd::server
