#include "server/storage/http_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <random>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "server/storage/object_url.h"
#include "server/storage/response_check.h"

namespace batchd::server {
namespace {

constexpr size_t kMaxErrorBody = 4096;
// Same-origin redirects followed per request (--remote-redirects).
constexpr int kMaxRedirects = 5;
// A backoff sleep looks at the cancellation flag this often.
constexpr absl::Duration kCancelPoll = absl::Milliseconds(50);

void GlobalInit() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

// Where a response's body goes: `dest` (exactly `capacity` bytes wanted)
// or `text` (at most `max_text`); error bodies go to `error_body`.
struct Sink {
  uint8_t* dest = nullptr;
  uint64_t capacity = 0;
  std::string* text = nullptr;
  uint64_t max_text = 0;

  long status = 0;  // from the last status line
  std::string etag;
  std::string content_range;
  int64_t content_length = -1;
  uint64_t received = 0;
  bool overflow = false;
  std::string error_body;

  // Stall detection: the attempt fails when no byte arrives for
  // `stall_timeout`.
  absl::Duration stall_timeout = absl::InfiniteDuration();
  absl::Time last_byte;
  bool stalled = false;

  // The daemon's cancellation flag (may be null); `cancelled` records that
  // the transfer was aborted for it.
  const std::atomic<bool>* cancel = nullptr;
  bool cancelled = false;

  // The request, for judging a ranged read's headers before its body
  // (CheckHeaders); `headers_verdict` holds the refusal that aborted it.
  const RequestFacts* facts = nullptr;
  bool headers_refused = false;
  Verdict headers_verdict;
  // The last attempt ended too slow or stalled (for fault reports).
  bool slow_or_stalled = false;

  void ResetResponse() {
    status = 0;
    etag.clear();
    content_range.clear();
    content_length = -1;
    headers_refused = false;
    headers_verdict = Verdict();
    received = 0;
    overflow = false;
    error_body.clear();
    if (text != nullptr) text->clear();
  }
};

int OnProgress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  Sink& sink = *static_cast<Sink*>(user);
  if (sink.cancel != nullptr && sink.cancel->load(std::memory_order_relaxed)) {
    sink.cancelled = true;
    return 1;  // CURLE_ABORTED_BY_CALLBACK
  }
  if (absl::Now() - sink.last_byte > sink.stall_timeout) {
    sink.stalled = true;
    return 1;  // CURLE_ABORTED_BY_CALLBACK
  }
  return 0;
}

size_t OnHeader(char* data, size_t size, size_t n, void* user) {
  Sink& sink = *static_cast<Sink*>(user);
  sink.last_byte = absl::Now();
  absl::string_view line(data, size * n);
  line = absl::StripTrailingAsciiWhitespace(line);
  if (line.empty()) {
    // The end of a response's headers. A ranged read whose headers already
    // say the body is not the range asked (another ETag, the whole object,
    // another range, a longer body) ends here, before any of its body.
    if (sink.facts != nullptr && sink.facts->ranged && sink.status >= 200 &&
        sink.status < 300) {
      ResponseFacts headers;
      headers.http_status = sink.status;
      headers.etag = sink.etag;
      headers.content_range = sink.content_range;
      headers.content_length = sink.content_length;
      Verdict verdict = CheckHeaders(*sink.facts, headers);
      if (!verdict.status.ok()) {
        sink.headers_refused = true;
        sink.headers_verdict = std::move(verdict);
        return 0;  // CURLE_WRITE_ERROR
      }
    }
    return size * n;
  }
  if (absl::StartsWith(line, "HTTP/")) {
    // A new response (after a redirect or 100 Continue): forget the last.
    sink.ResetResponse();
    size_t sp = line.find(' ');
    if (sp != absl::string_view::npos) {
      int code = 0;
      if (absl::SimpleAtoi(line.substr(sp + 1, 3), &code)) sink.status = code;
    }
    return size * n;
  }
  size_t colon = line.find(':');
  if (colon == absl::string_view::npos) return size * n;
  std::string name = absl::AsciiStrToLower(line.substr(0, colon));
  absl::string_view value = absl::StripAsciiWhitespace(line.substr(colon + 1));
  if (name == "etag") sink.etag = std::string(value);
  if (name == "content-range") sink.content_range = std::string(value);
  if (name == "content-length") {
    int64_t length = -1;
    if (absl::SimpleAtoi(value, &length) && length >= 0) {
      sink.content_length = length;
    }
  }
  return size * n;
}

size_t OnBody(char* data, size_t size, size_t n, void* user) {
  Sink& sink = *static_cast<Sink*>(user);
  sink.last_byte = absl::Now();
  const size_t bytes = size * n;
  if (sink.status < 200 || sink.status >= 300) {
    size_t keep = std::min(bytes, kMaxErrorBody - std::min(
                                      kMaxErrorBody, sink.error_body.size()));
    sink.error_body.append(data, keep);
    return bytes;
  }
  if (sink.dest != nullptr) {
    if (sink.received + bytes > sink.capacity) {
      sink.overflow = true;
      return 0;  // CURLE_WRITE_ERROR: never more bytes than asked
    }
    std::memcpy(sink.dest + sink.received, data, bytes);
  } else if (sink.text != nullptr) {
    if (sink.received + bytes > sink.max_text) {
      sink.overflow = true;
      return 0;
    }
    sink.text->append(data, bytes);
  }
  sink.received += bytes;
  return bytes;
}

Transport TransportOf(CURLcode code, const Sink& sink,
                      const char* error_buffer) {
  switch (code) {
    case CURLE_OK:
      return Transport::kOk;
    case CURLE_ABORTED_BY_CALLBACK:
      return sink.cancelled ? Transport::kCancelled
             : sink.stalled ? Transport::kStalled
                            : Transport::kFatal;
    case CURLE_WRITE_ERROR:
      return sink.headers_refused ? Transport::kHeadersRefused
             : sink.overflow      ? Transport::kBodyRefused
                                  : Transport::kFatal;
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
      return Transport::kCertificate;
    case CURLE_OPERATION_TIMEDOUT:
      // libcurl words its low-speed abort "Operation too slow. Less than
      // N bytes/sec transferred the last T seconds".
      return absl::StrContains(error_buffer, "too slow") ? Transport::kTooSlow
                                                          : Transport::kTransient;
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_WEIRD_SERVER_REPLY:
      return Transport::kTransient;
    default:
      return Transport::kFatal;
  }
}

// Whether `etag` may go in If-Match (strong comparison: weak ETags never
// match).
bool StrongEtag(const std::string& etag) {
  return !etag.empty() && !absl::StartsWith(etag, "W/");
}

bool Cancelled(const std::shared_ptr<const std::atomic<bool>>& flag) {
  return flag != nullptr && flag->load(std::memory_order_relaxed);
}

// Why the redirect from `from` to `to` is not followed under `policy`;
// empty when it may be. `signed_request`: SigV4 names the host and path.
std::string RedirectRefusal(RemoteRedirects policy, bool signed_request,
                            const std::string& from, const std::string& to,
                            int followed) {
  if (signed_request) return "signed s3:// requests follow no redirect";
  if (policy == RemoteRedirects::kNone) return "--remote-redirects=none";
  if (followed >= kMaxRedirects) {
    return absl::StrCat("more than ", kMaxRedirects, " redirects");
  }
  const absl::StatusOr<UrlOrigin> a = ParseUrlOrigin(from);
  const absl::StatusOr<UrlOrigin> b = ParseUrlOrigin(to);
  if (!b.ok()) return "--remote-redirects=same-origin: not an http(s) URL";
  if (!a.ok() || !(*a == *b)) {
    return "--remote-redirects=same-origin: another scheme, host or port";
  }
  return "";
}

}  // namespace

// One logical request, retried as a whole.
struct HttpClient::Request {
  std::string url;  // what is fetched (s3:// already mapped to http(s))
  RequestFacts facts;
  Sink sink;
  int64_t content_length = -1;  // HEAD's answer
  // Set by an attempt answered by a redirect that may be followed: the
  // next attempt fetches it. `redirects`: how many were followed.
  std::string follow;
  int redirects = 0;
};


HttpClient::HttpClient(HttpClientOptions options)
    : options_(std::move(options)) {
  GlobalInit();
}

HttpClient::~HttpClient() {
  absl::MutexLock lock(&mu_);
  for (void* handle : idle_) curl_easy_cleanup(static_cast<CURL*>(handle));
  idle_.clear();
}

void* HttpClient::Acquire() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](HttpClient* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
        return !self->idle_.empty() ||
               self->created_ < std::max(1, self->options_.store.connections);
      },
      this));
  if (!idle_.empty()) {
    void* handle = idle_.back();
    idle_.pop_back();
    return handle;
  }
  ++created_;
  return curl_easy_init();
}

void HttpClient::Release(void* handle) {
  absl::MutexLock lock(&mu_);
  if (handle == nullptr) {
    --created_;
    return;
  }
  idle_.push_back(handle);
}

Verdict HttpClient::Attempt(Request& request, absl::Time deadline) {
  CURL* curl = static_cast<CURL*>(Acquire());
  if (curl == nullptr) {
    Release(nullptr);
    ResponseFacts none;
    none.transport = Transport::kTransient;
    none.transport_error = "curl_easy_init failed";
    return CheckResponse(request.facts, none);
  }
  curl_easy_reset(curl);  // keeps the connection cache
  const RequestFacts& facts = request.facts;
  Sink& sink = request.sink;
  sink.ResetResponse();

  curl_easy_setopt(curl, CURLOPT_URL, request.url.c_str());
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, &OnHeader);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &sink);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, &OnBody);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &sink);
  // Only http and https, whatever a URL or a redirect names (redirects are
  // followed here, not by libcurl, but the pin holds if that changes).
#if LIBCURL_VERSION_NUM >= 0x075500  // 7.85: the _STR forms
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(curl, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
#else
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS,
                   static_cast<long>(CURLPROTO_HTTP | CURLPROTO_HTTPS));
  curl_easy_setopt(curl, CURLOPT_REDIR_PROTOCOLS,
                   static_cast<long>(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
  curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(absl::ToInt64Milliseconds(
                       options_.store.connect_timeout)));
  const int64_t left_ms =
      std::max<int64_t>(1, absl::ToInt64Milliseconds(deadline - absl::Now()));
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, static_cast<long>(left_ms));
  // libcurl's own low-speed check averages over seconds of history, so a
  // stall after a burst would go unnoticed for long: time the last byte.
  sink.stall_timeout = options_.store.stall_timeout;
  sink.last_byte = absl::Now();
  sink.stalled = false;
  sink.cancel = options_.store.cancelled.get();
  sink.cancelled = false;
  sink.facts = &facts;
  char error_buffer[CURL_ERROR_SIZE] = {0};
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error_buffer);
  if (options_.store.low_speed_bytes_per_s > 0 &&
      options_.store.low_speed_time > absl::ZeroDuration()) {
    curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT,
                     static_cast<long>(options_.store.low_speed_bytes_per_s));
    curl_easy_setopt(
        curl, CURLOPT_LOW_SPEED_TIME,
        static_cast<long>(std::max<int64_t>(
            1, absl::ToInt64Seconds(options_.store.low_speed_time))));
  }
  curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, &OnProgress);
  curl_easy_setopt(curl, CURLOPT_XFERINFODATA, &sink);
  if (!options_.ca_file.empty()) {
    curl_easy_setopt(curl, CURLOPT_CAINFO, options_.ca_file.c_str());
  }
  if (facts.method == "HEAD") curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
  std::string range;
  if (facts.ranged) {
    range = absl::StrCat(facts.offset, "-", facts.offset + facts.size - 1);
    curl_easy_setopt(curl, CURLOPT_RANGE, range.c_str());
  }
  curl_slist* headers = nullptr;
  std::string if_match;
  if (facts.ranged && StrongEtag(facts.etag)) {
    if_match = absl::StrCat("If-Match: ", facts.etag);
    headers = curl_slist_append(headers, if_match.c_str());
  }
  std::string token_header;
  if (!options_.access_key.empty()) {
    std::string userpwd =
        absl::StrCat(options_.access_key, ":", options_.secret_key);
    curl_easy_setopt(curl, CURLOPT_AWS_SIGV4, options_.sigv4.c_str());
    curl_easy_setopt(curl, CURLOPT_USERPWD, userpwd.c_str());
    // libcurl copies the string; wipe ours.
    std::fill(userpwd.begin(), userpwd.end(), '\0');
    headers = curl_slist_append(headers,
                                "x-amz-content-sha256: UNSIGNED-PAYLOAD");
    if (!options_.session_token.empty()) {
      token_header =
          absl::StrCat("x-amz-security-token: ", options_.session_token);
      headers = curl_slist_append(headers, token_header.c_str());
    }
  }
  if (headers != nullptr) curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);

  const CURLcode code = curl_easy_perform(curl);
  curl_off_t content_length = -1;
  curl_easy_getinfo(curl, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &content_length);
  request.content_length = content_length;
  std::string redirect_url;
  if (sink.status >= 300 && sink.status < 400) {
    char* location = nullptr;
    curl_easy_getinfo(curl, CURLINFO_REDIRECT_URL, &location);
    if (location != nullptr) redirect_url = location;
  }
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, nullptr);
  curl_easy_setopt(curl, CURLOPT_USERPWD, nullptr);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, nullptr);
  curl_slist_free_all(headers);
  Release(curl);

  ResponseFacts response;
  response.transport = TransportOf(code, sink, error_buffer);
  sink.slow_or_stalled = response.transport == Transport::kTooSlow ||
                         response.transport == Transport::kStalled;
  if (response.transport == Transport::kHeadersRefused) {
    return sink.headers_verdict;
  }
  if (response.transport != Transport::kOk) {
    response.transport_error = curl_easy_strerror(code);
  }
  response.stall_timeout = options_.store.stall_timeout;
  response.low_speed_bytes_per_s = options_.store.low_speed_bytes_per_s;
  response.low_speed_time = options_.store.low_speed_time;
  response.content_length = sink.content_length;
  response.http_status = sink.status;
  response.etag = sink.etag;
  response.content_range = sink.content_range;
  response.error_body = sink.error_body;
  response.received = sink.received;
  if (response.transport == Transport::kOk && sink.status >= 300 &&
      sink.status < 400) {
    response.redirect_url = redirect_url;
    response.redirect_refused =
        redirect_url.empty()
            ? "no Location"
            : RedirectRefusal(options_.store.redirects,
                              !options_.access_key.empty(), request.url,
                              redirect_url, request.redirects);
    if (response.redirect_refused.empty()) {
      request.follow = redirect_url;
      return Verdict{absl::OkStatus(), false};
    }
  }
  return CheckResponse(facts, response);
}

absl::Status HttpClient::Run(Request& request) {
  const ObjectStoreOptions& o = options_.store;
  const absl::Time deadline = absl::Now() + o.deadline;
  thread_local std::minstd_rand rng(std::random_device{}());
  absl::Duration backoff = o.initial_backoff;
  Verdict outcome;
  int attempt = 0;
  auto cancelled = [&] {
    return absl::CancelledError(
        absl::StrCat("dataset \"", options_.dataset, "\": ",
                     request.facts.Describe(),
                     ": cancelled: the daemon is stopping"));
  };
  while (true) {
    if (Cancelled(o.cancelled)) return cancelled();
    ++attempt;
    outcome = Attempt(request, deadline);
    if (!request.follow.empty()) {
      // A redirect allowed by --remote-redirects: not an attempt.
      request.url = std::move(request.follow);
      request.follow.clear();
      ++request.redirects;
      --attempt;
      continue;
    }
    if (!outcome.status.ok()) Report(request, outcome.status);
    if (outcome.status.ok() || !outcome.retry) return outcome.status;
    if (attempt >= std::max(1, o.max_attempts)) break;
    // Full jitter in [backoff / 2, backoff].
    std::uniform_real_distribution<double> jitter(0.5, 1.0);
    const absl::Duration sleep = backoff * jitter(rng);
    if (absl::Now() + sleep >= deadline) break;
    for (const absl::Time end = absl::Now() + sleep; absl::Now() < end;) {
      if (Cancelled(o.cancelled)) return cancelled();
      absl::SleepFor(std::min(kCancelPoll, end - absl::Now()));
    }
    backoff = std::min(backoff * 2, o.max_backoff);
  }
  return absl::Status(
      outcome.status.code(),
      absl::StrCat(outcome.status.message(), " (gave up after ", attempt,
                   attempt == 1 ? " attempt)" : " attempts)"));
}

absl::StatusOr<HttpClient::HeadResult> HttpClient::Head(
    const std::string& url, const std::string& shown_url) {
  Request request;
  request.url = url;
  request.facts = Facts("HEAD", shown_url);
  absl::Status status = Run(request);
  if (!status.ok()) return status;
  if (request.content_length < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("dataset \"", options_.dataset, "\": HEAD ", shown_url,
                     ": no Content-Length in the response"));
  }
  HeadResult result;
  result.size = static_cast<uint64_t>(request.content_length);
  result.etag = request.sink.etag;
  return result;
}

absl::StatusOr<std::string> HttpClient::GetAll(const std::string& url,
                                               const std::string& shown_url,
                                               uint64_t max_bytes) {
  std::string text;
  Request request;
  request.url = url;
  request.facts = Facts("GET", shown_url);
  request.facts.max_body = max_bytes;
  request.sink.text = &text;
  request.sink.max_text = max_bytes;
  absl::Status status = Run(request);
  if (!status.ok()) return status;
  return text;
}

absl::Status HttpClient::GetRange(const std::string& url,
                                  const std::string& shown_url,
                                  uint64_t offset, uint64_t size,
                                  const std::string& etag, uint64_t total_size,
                                  uint8_t* dest) {
  if (size == 0) return absl::OkStatus();
  Request request;
  request.url = url;
  request.facts = Facts("GET", shown_url);
  request.facts.ranged = true;
  request.facts.offset = offset;
  request.facts.size = size;
  request.facts.total_size = total_size;
  request.facts.etag = etag;
  request.sink.dest = dest;
  request.sink.capacity = size;
  return Run(request);
}

void HttpClient::Report(const Request& request, const absl::Status& status) {
  if (!options_.store.on_fault || absl::IsCancelled(status) ||
      StoreFaultOf(status) != StoreFault::kNone) {
    return;
  }
  StoreFaultReport report;
  report.dataset = options_.dataset;
  report.url = request.facts.shown_url;
  report.slow = request.sink.slow_or_stalled;
  report.what = std::string(status.message());
  options_.store.on_fault(report);
}

RequestFacts HttpClient::Facts(const char* method,
                               const std::string& shown_url) const {
  RequestFacts facts;
  facts.dataset = options_.dataset;
  facts.method = method;
  facts.shown_url = shown_url;
  return facts;
}

}  // namespace batchd::server
