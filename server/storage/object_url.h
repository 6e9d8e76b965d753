// Pure functions on the URLs and responses of remote objects: s3:// URLs,
// WebDataset brace ranges, S3's ListObjectsV2 XML, Content-Range headers.
// No I/O; thread-safe.
//
//   ExpandBraces("https://h/s-{000..002}.tar")
//     -> {"https://h/s-000.tar", "https://h/s-001.tar", "https://h/s-002.tar"}
#ifndef BATCHD_SERVER_STORAGE_OBJECT_URL_H_
#define BATCHD_SERVER_STORAGE_OBJECT_URL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/storage/object_store.h"

namespace batchd::server {

// s3://bucket/key: `key` may be empty (the bucket's root) or end in '/'.
struct S3Location {
  std::string bucket;
  std::string key;
};
// INVALID_ARGUMENT naming `url` unless it is s3://<bucket>[/<key>].
absl::StatusOr<S3Location> ParseS3Url(absl::string_view url);

// Every URL `pattern` stands for, in order: each "{A..B}" (A and B
// non-negative decimal, A <= B) is replaced by A..B, zero-padded to the
// width of A as written; several braces multiply out, the rightmost
// varying fastest. A pattern without braces is itself. INVALID_ARGUMENT
// for an unclosed or malformed brace, or more than `max_urls` results.
absl::StatusOr<std::vector<std::string>> ExpandBraces(
    absl::string_view pattern, size_t max_urls = 1000000);

// S3's URI encoding (SigV4): every byte but A-Z a-z 0-9 - _ . ~ as %XX
// (upper-case hex); '/' kept when `keep_slash`.
std::string UriEncode(absl::string_view s, bool keep_slash);

// The HTTP(S) URL of s3://`bucket`/`key` at `endpoint` ("scheme://host[:port]",
// no trailing path): path style https://host/bucket/key, virtual-host
// style https://bucket.host/key. The key is URI-encoded, '/' kept.
std::string S3HttpUrl(absl::string_view endpoint, bool virtual_host,
                      absl::string_view bucket, absl::string_view key);

// &amp; &lt; &gt; &quot; &apos; and numeric references (&#NN; &#xHH;)
// decoded; anything else is kept as written.
std::string XmlUnescape(absl::string_view s);

// One page of a ListObjectsV2 response. Objects' urls are
// s3://`bucket`/<key>.
struct ListPage {
  std::vector<ObjectInfo> objects;
  bool truncated = false;
  std::string next_continuation_token;  // set when truncated
};
// Reads <Contents> (<Key>, <Size>, <ETag>), <IsTruncated> and
// <NextContinuationToken> from `xml`; INVALID_ARGUMENT (naming `bucket`)
// when the document is not a ListBucketResult or a truncated page has no
// token.
absl::StatusOr<ListPage> ParseListObjectsV2(absl::string_view xml,
                                            absl::string_view bucket);

// The text of the first <`tag`>...</`tag`> element of `xml`, unescaped;
// empty when there is none. For S3 error bodies (<Code>, <Message>).
std::string XmlElement(absl::string_view xml, absl::string_view tag);

// "bytes FIRST-LAST/TOTAL" (TOTAL may be '*').
struct ContentRange {
  uint64_t first = 0;
  uint64_t last = 0;   // inclusive
  int64_t total = -1;  // -1 for '*'
};
// INVALID_ARGUMENT for anything else, or LAST < FIRST.
absl::StatusOr<ContentRange> ParseContentRange(absl::string_view header);

// The scheme of `url` ("file" for "file:///etc/passwd"), lower-cased: the
// RFC 3986 scheme characters before the first ':', when that ':' comes
// before any '/', '?' or '#'. Empty for a relative path ("dir/x.tar",
// "./a:b.tar").
std::string UrlScheme(absl::string_view url);

// The entries of a shard-list text: one per line, blank lines and
// '#' comments skipped, surrounding whitespace trimmed. Entries without a
// scheme ("x.tar", "dir/x.tar") are resolved against `list_url`'s
// directory (the URL up to its last '/'). INVALID_ARGUMENT naming the line
// for an entry with a scheme other than s3, http or https (file://,
// gopher://, ftp://, ...), and for more than `max_entries` entries.
absl::StatusOr<std::vector<std::string>> ParseShardList(
    absl::string_view text, absl::string_view list_url,
    size_t max_entries = 1000000);

// Scheme, host and port of an http(s) URL, lower-cased, the port made
// explicit (80, 443). INVALID_ARGUMENT for anything else.
struct UrlOrigin {
  std::string scheme;
  std::string host;  // an IPv6 address keeps its brackets
  int port = 0;
  bool operator==(const UrlOrigin& o) const {
    return scheme == o.scheme && host == o.host && port == o.port;
  }
};
absl::StatusOr<UrlOrigin> ParseUrlOrigin(absl::string_view url);

}  // namespace batchd::server

#endif  // BATCHD_SERVER_STORAGE_OBJECT_URL_H_
