#include "server/storage/response_check.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/status_matchers.h"

namespace batchd::server {
namespace {

using ::batchd::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

// GET s3://b/k bytes=100-199 of a 1000-byte object with ETag "e1".
RequestFacts Ranged() {
  RequestFacts r;
  r.dataset = "ds";
  r.method = "GET";
  r.shown_url = "s3://b/k";
  r.ranged = true;
  r.offset = 100;
  r.size = 100;
  r.total_size = 1000;
  r.etag = "\"e1\"";
  return r;
}

// The right answer to Ranged().
ResponseFacts Good() {
  ResponseFacts r;
  r.http_status = 206;
  r.etag = "\"e1\"";
  r.content_range = "bytes 100-199/1000";
  r.received = 100;
  return r;
}

TEST(CheckResponseTest, ExactRangeIsOk) {
  const Verdict v = CheckResponse(Ranged(), Good());
  EXPECT_OK(v.status);
  EXPECT_FALSE(v.retry);
}

TEST(CheckResponseTest, WrongBytesAreRetriedNeverAccepted) {
  ResponseFacts wrong_range = Good();
  wrong_range.content_range = "bytes 101-200/1000";
  ResponseFacts short_body = Good();
  short_body.received = 60;
  ResponseFacts long_body = Good();
  long_body.transport = Transport::kBodyRefused;
  ResponseFacts no_range = Good();
  no_range.content_range = "";
  for (const ResponseFacts& r : {wrong_range, short_body, long_body, no_range}) {
    const Verdict v = CheckResponse(Ranged(), r);
    EXPECT_THAT(v.status, StatusIs(absl::StatusCode::kUnavailable,
                                   AllOf(HasSubstr("dataset \"ds\""),
                                         HasSubstr("GET s3://b/k bytes=100-199"))));
    EXPECT_TRUE(v.retry);
  }
  EXPECT_THAT(CheckResponse(Ranged(), short_body).status,
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("short body: 60 of 100")));
}

TEST(CheckResponseTest, TransientStatusesAndTransportsAreRetried) {
  for (long status : {500L, 502L, 503L, 504L, 429L, 408L}) {
    ResponseFacts r;
    r.http_status = status;
    const Verdict v = CheckResponse(Ranged(), r);
    EXPECT_TRUE(v.retry) << status;
    EXPECT_THAT(v.status, StatusIs(absl::StatusCode::kUnavailable,
                                   HasSubstr(absl::StrCat("HTTP ", status))));
  }
  ResponseFacts reset;
  reset.transport = Transport::kTransient;
  reset.transport_error = "Connection reset by peer";
  EXPECT_TRUE(CheckResponse(Ranged(), reset).retry);
  ResponseFacts stalled;
  stalled.transport = Transport::kStalled;
  stalled.stall_timeout = absl::Seconds(30);
  stalled.http_status = 206;
  const Verdict v = CheckResponse(Ranged(), stalled);
  EXPECT_TRUE(v.retry);
  EXPECT_THAT(v.status, StatusIs(absl::StatusCode::kUnavailable,
                                 HasSubstr("no byte for 30s (HTTP 206)")));
}

TEST(CheckResponseTest, FinalErrorsSayWhatToFix) {
  ResponseFacts denied;
  denied.http_status = 403;
  denied.error_body =
      "<Error><Code>SignatureDoesNotMatch</Code><Message>no</Message></Error>";
  Verdict v = CheckResponse(Ranged(), denied);
  EXPECT_FALSE(v.retry);
  EXPECT_THAT(v.status,
              StatusIs(absl::StatusCode::kPermissionDenied,
                       AllOf(HasSubstr("HTTP 403 SignatureDoesNotMatch: no"),
                             HasSubstr("check the credentials for dataset "
                                       "\"ds\""))));
  ResponseFacts missing;
  missing.http_status = 404;
  v = CheckResponse(Ranged(), missing);
  EXPECT_FALSE(v.retry);
  EXPECT_THAT(v.status, StatusIs(absl::StatusCode::kNotFound,
                                 HasSubstr("wrong prefix or URL")));
  ResponseFacts precondition;
  precondition.http_status = 412;
  EXPECT_THAT(CheckResponse(Ranged(), precondition).status,
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("changed since it was indexed")));
  ResponseFacts beyond;
  beyond.http_status = 416;
  EXPECT_THAT(CheckResponse(Ranged(), beyond).status,
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("HTTP 416")));
  ResponseFacts untrusted;
  untrusted.transport = Transport::kCertificate;
  untrusted.transport_error = "SSL peer certificate was not OK";
  v = CheckResponse(Ranged(), untrusted);
  EXPECT_FALSE(v.retry);
  EXPECT_THAT(v.status, StatusIs(absl::StatusCode::kFailedPrecondition,
                                 HasSubstr("ca_file")));
}

TEST(CheckResponseTest, ChangedObjectIsFailedPrecondition) {
  ResponseFacts other_etag = Good();
  other_etag.etag = "\"e2\"";
  Verdict v = CheckResponse(Ranged(), other_etag);
  EXPECT_FALSE(v.retry);
  EXPECT_THAT(v.status,
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("changed since it was indexed"),
                             HasSubstr("\"e2\""), HasSubstr("s3://b/k"))));
  ResponseFacts other_size = Good();
  other_size.content_range = "bytes 100-199/2000";
  EXPECT_THAT(CheckResponse(Ranged(), other_size).status,
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("2000 bytes, indexed as 1000")));
  // A store that sends no ETag is judged by the range and size alone.
  ResponseFacts no_etag = Good();
  no_etag.etag.clear();
  EXPECT_OK(CheckResponse(Ranged(), no_etag).status);
}

TEST(CheckResponseTest, IgnoredRangeIsOkOnlyForTheWholeObject) {
  ResponseFacts full = Good();
  full.http_status = 200;
  full.content_range.clear();
  EXPECT_THAT(CheckResponse(Ranged(), full).status,
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("the store ignores Range: answered 200 "
                                 "with the whole object")));
  EXPECT_EQ(StoreFaultOf(CheckResponse(Ranged(), full).status),
            StoreFault::kIgnoresRange);
  RequestFacts whole = Ranged();
  whole.offset = 0;
  whole.size = 1000;
  full.received = 1000;
  EXPECT_OK(CheckResponse(whole, full).status);
}

TEST(CheckResponseTest, A412IsAChangedObject) {
  ResponseFacts precondition;
  precondition.http_status = 412;
  const Verdict v = CheckResponse(Ranged(), precondition);
  EXPECT_FALSE(v.retry);
  EXPECT_THAT(v.status, StatusIs(absl::StatusCode::kFailedPrecondition,
                                 HasSubstr("changed since it was indexed")));
  EXPECT_EQ(StoreFaultOf(v.status), StoreFault::kChanged);
  // Other failures carry no store fault.
  ResponseFacts unavailable;
  unavailable.http_status = 503;
  EXPECT_EQ(StoreFaultOf(CheckResponse(Ranged(), unavailable).status),
            StoreFault::kNone);
}

// The headers alone refuse an answer that is not the range asked, so that
// HttpClient ends it before its body.
TEST(CheckHeadersTest, RefusesWhatTheHeadersAlreadyGiveAway) {
  ResponseFacts good = Good();
  good.received = 0;  // no body yet
  good.content_length = 100;
  EXPECT_OK(CheckHeaders(Ranged(), good).status);

  ResponseFacts whole = good;
  whole.http_status = 200;
  whole.content_range.clear();
  whole.content_length = 1000;
  Verdict v = CheckHeaders(Ranged(), whole);
  EXPECT_FALSE(v.retry);
  EXPECT_THAT(v.status, StatusIs(absl::StatusCode::kFailedPrecondition,
                                 HasSubstr("the store ignores Range: answered "
                                           "200 with the whole object (1000 "
                                           "bytes)")));
  EXPECT_EQ(StoreFaultOf(v.status), StoreFault::kIgnoresRange);

  ResponseFacts other_etag = good;
  other_etag.etag = "\"e2\"";
  EXPECT_EQ(StoreFaultOf(CheckHeaders(Ranged(), other_etag).status),
            StoreFault::kChanged);

  ResponseFacts longer = good;
  longer.content_length = 1u << 30;
  v = CheckHeaders(Ranged(), longer);
  EXPECT_TRUE(v.retry);
  EXPECT_THAT(v.status,
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("Content-Length 1073741824 for a range of "
                                 "100 bytes")));

  ResponseFacts wrong_range = good;
  wrong_range.content_range = "bytes 0-99/1000";
  EXPECT_TRUE(CheckHeaders(Ranged(), wrong_range).retry);

  // An unranged GET or an error status is not the headers' to judge.
  RequestFacts get = Ranged();
  get.ranged = false;
  EXPECT_OK(CheckHeaders(get, whole).status);
  ResponseFacts error;
  error.http_status = 500;
  EXPECT_OK(CheckHeaders(Ranged(), error).status);
}

TEST(CheckResponseTest, TooSlowNamesTheFlagsAndIsRetried) {
  ResponseFacts slow;
  slow.transport = Transport::kTooSlow;
  slow.http_status = 206;
  slow.low_speed_bytes_per_s = 1024;
  slow.low_speed_time = absl::Seconds(10);
  const Verdict v = CheckResponse(Ranged(), slow);
  EXPECT_TRUE(v.retry);
  EXPECT_THAT(v.status,
              StatusIs(absl::StatusCode::kUnavailable,
                       AllOf(HasSubstr("too slow: under 1024 bytes/s for 10s"),
                             HasSubstr("--remote-low-speed-bytes-per-s"),
                             HasSubstr("s3://b/k"))));
}

TEST(CheckResponseTest, UnrangedGetAndHead) {
  RequestFacts get;
  get.dataset = "ds";
  get.method = "GET";
  get.shown_url = "s3://b/";
  get.max_body = 10;
  ResponseFacts ok;
  ok.http_status = 200;
  ok.received = 7;
  EXPECT_OK(CheckResponse(get, ok).status);
  ResponseFacts too_long = ok;
  too_long.transport = Transport::kBodyRefused;
  EXPECT_THAT(CheckResponse(get, too_long).status,
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("larger than 10 bytes")));
  RequestFacts head = get;
  head.method = "HEAD";
  EXPECT_OK(CheckResponse(head, ok).status);
}

}  // namespace
}  // namespace batchd::server
