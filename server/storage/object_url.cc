#include "server/storage/object_url.h"

#include <cstdlib>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace batchd::server {
namespace {

bool HasScheme(absl::string_view s) {
  return absl::StartsWith(s, "s3://") || absl::StartsWith(s, "http://") ||
         absl::StartsWith(s, "https://");
}

// The content of each <tag>...</tag> inside `xml`, unescaped.
std::vector<absl::string_view> Elements(absl::string_view xml,
                                        absl::string_view tag) {
  std::vector<absl::string_view> out;
  const std::string open = absl::StrCat("<", tag, ">");
  const std::string close = absl::StrCat("</", tag, ">");
  size_t pos = 0;
  while (true) {
    size_t start = xml.find(open, pos);
    if (start == absl::string_view::npos) break;
    start += open.size();
    size_t end = xml.find(close, start);
    if (end == absl::string_view::npos) break;
    out.push_back(xml.substr(start, end - start));
    pos = end + close.size();
  }
  return out;
}

void AppendUtf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace

absl::StatusOr<S3Location> ParseS3Url(absl::string_view url) {
  absl::string_view rest = url;
  if (!absl::ConsumePrefix(&rest, "s3://")) {
    return absl::InvalidArgumentError(
        absl::StrCat("not an s3:// URL: \"", url, "\""));
  }
  size_t slash = rest.find('/');
  S3Location loc;
  loc.bucket = std::string(rest.substr(0, slash));
  if (slash != absl::string_view::npos) {
    loc.key = std::string(rest.substr(slash + 1));
  }
  if (loc.bucket.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "s3 URL \"", url, "\" has no bucket (expected s3://bucket/key)"));
  }
  return loc;
}

absl::StatusOr<std::vector<std::string>> ExpandBraces(
    absl::string_view pattern, size_t max_urls) {
  size_t open = pattern.find('{');
  if (open == absl::string_view::npos) {
    if (pattern.find('}') != absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("unmatched '}' in \"", pattern, "\""));
    }
    return std::vector<std::string>{std::string(pattern)};
  }
  size_t close = pattern.find('}', open);
  if (close == absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("unclosed '{' in \"", pattern, "\""));
  }
  absl::string_view range = pattern.substr(open + 1, close - open - 1);
  std::vector<absl::string_view> ends = absl::StrSplit(range, "..");
  uint64_t first = 0;
  uint64_t last = 0;
  auto digits = [](absl::string_view s) {
    if (s.empty() || s.size() > 18) return false;
    for (char c : s) {
      if (!absl::ascii_isdigit(c)) return false;
    }
    return true;
  };
  if (ends.size() != 2 || !digits(ends[0]) || !digits(ends[1]) ||
      !absl::SimpleAtoi(ends[0], &first) || !absl::SimpleAtoi(ends[1], &last) ||
      first > last) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad brace range \"{", range, "}\" in \"", pattern,
        "\" (expected {A..B}, e.g. {000000..000099}, A <= B)"));
  }
  const int width = static_cast<int>(ends[0].size());
  absl::StatusOr<std::vector<std::string>> tails =
      ExpandBraces(pattern.substr(close + 1), max_urls);
  if (!tails.ok()) return tails.status();
  const uint64_t count = last - first + 1;
  if (count > max_urls || count * tails->size() > max_urls) {
    return absl::InvalidArgumentError(absl::StrCat(
        "\"", pattern, "\" stands for more than ", max_urls, " URLs"));
  }
  std::vector<std::string> out;
  out.reserve(count * tails->size());
  absl::string_view head = pattern.substr(0, open);
  for (uint64_t i = first; i <= last; ++i) {
    std::string n = absl::StrFormat("%0*d", width, i);
    for (const std::string& tail : *tails) {
      out.push_back(absl::StrCat(head, n, tail));
    }
  }
  return out;
}

std::string UriEncode(absl::string_view s, bool keep_slash) {
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.' ||
        c == '~' || (keep_slash && c == '/')) {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppendFormat(&out, "%%%02X", c);
    }
  }
  return out;
}

std::string S3HttpUrl(absl::string_view endpoint, bool virtual_host,
                      absl::string_view bucket, absl::string_view key) {
  absl::string_view base = endpoint;
  while (absl::ConsumeSuffix(&base, "/")) {
  }
  const std::string encoded_key = UriEncode(key, /*keep_slash=*/true);
  if (!virtual_host) {
    return absl::StrCat(base, "/", bucket, "/", encoded_key);
  }
  size_t scheme_end = base.find("://");
  if (scheme_end == absl::string_view::npos) {
    return absl::StrCat(bucket, ".", base, "/", encoded_key);
  }
  return absl::StrCat(base.substr(0, scheme_end + 3), bucket, ".",
                      base.substr(scheme_end + 3), "/", encoded_key);
}

std::string XmlUnescape(absl::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    if (s[i] != '&') {
      out.push_back(s[i++]);
      continue;
    }
    size_t semi = s.find(';', i);
    if (semi == absl::string_view::npos || semi - i > 10) {
      out.push_back(s[i++]);
      continue;
    }
    absl::string_view entity = s.substr(i + 1, semi - i - 1);
    uint32_t cp = 0;
    bool ok = true;
    if (entity == "amp") {
      out.push_back('&');
    } else if (entity == "lt") {
      out.push_back('<');
    } else if (entity == "gt") {
      out.push_back('>');
    } else if (entity == "quot") {
      out.push_back('"');
    } else if (entity == "apos") {
      out.push_back('\'');
    } else if (absl::ConsumePrefix(&entity, "#x") ||
               absl::ConsumePrefix(&entity, "#X")) {
      ok = !entity.empty() &&
           absl::SimpleHexAtoi(entity, &cp) && cp <= 0x10FFFF;
      if (ok) AppendUtf8(cp, out);
    } else if (absl::ConsumePrefix(&entity, "#")) {
      ok = !entity.empty() && absl::SimpleAtoi(entity, &cp) && cp <= 0x10FFFF;
      if (ok) AppendUtf8(cp, out);
    } else {
      ok = false;
    }
    if (ok) {
      i = semi + 1;
    } else {
      out.push_back(s[i++]);
    }
  }
  return out;
}

std::string XmlElement(absl::string_view xml, absl::string_view tag) {
  std::vector<absl::string_view> found = Elements(xml, tag);
  return found.empty() ? std::string() : XmlUnescape(found.front());
}

absl::StatusOr<ListPage> ParseListObjectsV2(absl::string_view xml,
                                            absl::string_view bucket) {
  if (xml.find("<ListBucketResult") == absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "listing bucket \"", bucket,
        "\": the response is not a ListBucketResult document"));
  }
  ListPage page;
  for (absl::string_view contents : Elements(xml, "Contents")) {
    std::vector<absl::string_view> key = Elements(contents, "Key");
    std::vector<absl::string_view> size = Elements(contents, "Size");
    if (key.empty() || size.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "listing bucket \"", bucket, "\": an entry without Key or Size"));
    }
    ObjectInfo info;
    info.url = absl::StrCat("s3://", bucket, "/", XmlUnescape(key.front()));
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(size.front()),
                          &info.size)) {
      return absl::InvalidArgumentError(
          absl::StrCat("listing bucket \"", bucket, "\": bad Size \"",
                       size.front(), "\" for ", info.url));
    }
    info.etag = XmlElement(contents, "ETag");
    page.objects.push_back(std::move(info));
  }
  page.truncated = absl::StripAsciiWhitespace(
                       XmlElement(xml, "IsTruncated")) == "true";
  page.next_continuation_token = XmlElement(xml, "NextContinuationToken");
  if (page.truncated && page.next_continuation_token.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "listing bucket \"", bucket,
        "\": a truncated page without NextContinuationToken"));
  }
  return page;
}

absl::StatusOr<ContentRange> ParseContentRange(absl::string_view header) {
  absl::string_view rest = absl::StripAsciiWhitespace(header);
  auto bad = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat("bad Content-Range \"", header, "\""));
  };
  if (!absl::ConsumePrefix(&rest, "bytes ")) return bad();
  size_t dash = rest.find('-');
  size_t slash = rest.find('/');
  if (dash == absl::string_view::npos || slash == absl::string_view::npos ||
      slash < dash) {
    return bad();
  }
  ContentRange range;
  if (!absl::SimpleAtoi(rest.substr(0, dash), &range.first) ||
      !absl::SimpleAtoi(rest.substr(dash + 1, slash - dash - 1),
                        &range.last) ||
      range.last < range.first) {
    return bad();
  }
  absl::string_view total = rest.substr(slash + 1);
  if (total != "*") {
    uint64_t t = 0;
    if (!absl::SimpleAtoi(total, &t) || t <= range.last) return bad();
    range.total = static_cast<int64_t>(t);
  }
  return range;
}

std::string UrlScheme(absl::string_view url) {
  const size_t colon = url.find(':');
  if (colon == absl::string_view::npos || colon == 0) return "";
  const size_t delimiter = url.find_first_of("/?#");
  if (delimiter != absl::string_view::npos && delimiter < colon) return "";
  absl::string_view scheme = url.substr(0, colon);
  if (!absl::ascii_isalpha(scheme[0])) return "";
  for (char c : scheme) {
    if (!absl::ascii_isalnum(c) && c != '+' && c != '-' && c != '.') {
      return "";
    }
  }
  return absl::AsciiStrToLower(scheme);
}

absl::StatusOr<std::vector<std::string>> ParseShardList(
    absl::string_view text, absl::string_view list_url, size_t max_entries) {
  absl::string_view dir = list_url.substr(0, list_url.rfind('/') + 1);
  std::vector<std::string> out;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    if (out.size() >= max_entries) {
      return absl::InvalidArgumentError(absl::StrCat(
          "shard list ", list_url, " lists more than ", max_entries,
          " shards (line ", line_number, "; --max-shards)"));
    }
    const std::string scheme = UrlScheme(line);
    if (HasScheme(line)) {
      out.emplace_back(line);
    } else if (!scheme.empty()) {
      const bool allowed =
          scheme == "s3" || scheme == "http" || scheme == "https";
      return absl::InvalidArgumentError(absl::StrCat(
          "shard list ", list_url, " line ", line_number, ": \"",
          absl::CHexEscape(line.substr(0, 200)), "\" ",
          allowed ? "is not written in lower case with \"://\""
                  : absl::StrCat("has the scheme \"",
                                 absl::CHexEscape(scheme),
                                 "\", which is refused"),
          "; only s3://, http:// and https:// URLs and relative paths are "
          "read (a relative path with a ':' is written ./name)"));
    } else {
      absl::ConsumePrefix(&line, "./");
      out.push_back(absl::StrCat(dir, line));
    }
  }
  return out;
}

absl::StatusOr<UrlOrigin> ParseUrlOrigin(absl::string_view url) {
  UrlOrigin origin;
  origin.scheme = UrlScheme(url);
  absl::string_view rest = url;
  if ((origin.scheme != "http" && origin.scheme != "https") ||
      !absl::ConsumePrefix(&rest, url.substr(0, origin.scheme.size())) ||
      !absl::ConsumePrefix(&rest, "://")) {
    return absl::InvalidArgumentError(
        absl::StrCat("not an http:// or https:// URL: \"",
                     absl::CHexEscape(url), "\""));
  }
  absl::string_view authority = rest.substr(0, rest.find_first_of("/?#"));
  const size_t at = authority.rfind('@');
  if (at != absl::string_view::npos) authority.remove_prefix(at + 1);
  absl::string_view host = authority;
  absl::string_view port;
  if (absl::StartsWith(authority, "[")) {
    const size_t close = authority.find(']');
    if (close == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad host in \"", absl::CHexEscape(url), "\""));
    }
    host = authority.substr(0, close + 1);
    absl::string_view after = authority.substr(close + 1);
    if (absl::ConsumePrefix(&after, ":")) port = after;
  } else if (const size_t colon = authority.rfind(':');
             colon != absl::string_view::npos) {
    host = authority.substr(0, colon);
    port = authority.substr(colon + 1);
  }
  if (host.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("no host in \"", absl::CHexEscape(url), "\""));
  }
  origin.host = absl::AsciiStrToLower(host);
  origin.port = origin.scheme == "https" ? 443 : 80;
  if (!port.empty() &&
      (!absl::SimpleAtoi(port, &origin.port) || origin.port < 1 ||
       origin.port > 65535)) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad port in \"", absl::CHexEscape(url), "\""));
  }
  return origin;
}

}  // namespace batchd::server
