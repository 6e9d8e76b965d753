#include "server/decode/image_format.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"

namespace batchd::server {
namespace {

bool StartsWith(absl::Span<const uint8_t> data, const char* magic,
                size_t magic_size, size_t offset = 0) {
  return data.size() >= offset + magic_size &&
         memcmp(data.data() + offset, magic, magic_size) == 0;
}

// Markup: after an optional UTF-8 byte-order mark and whitespace, '<'
// followed by a letter, '!' or '?' ("<html", "<!DOCTYPE", "<?xml"): what a
// web server's error or login page looks like.
bool IsMarkup(absl::Span<const uint8_t> data) {
  constexpr size_t kLookBytes = 512;
  size_t pos = StartsWith(data, "\xEF\xBB\xBF", 3) ? 3 : 0;
  const size_t end = std::min(data.size(), kLookBytes);
  while (pos < end && absl::ascii_isspace(data[pos])) ++pos;
  if (pos + 1 >= end || data[pos] != '<') return false;
  const uint8_t next = data[pos + 1];
  return absl::ascii_isalpha(next) || next == '!' || next == '?';
}

}  // namespace

ContentKind SniffContent(absl::Span<const uint8_t> data) {
  if (data.empty()) return ContentKind::kEmpty;
  if (StartsWith(data, "\xFF\xD8", 2)) return ContentKind::kJpeg;
  if (StartsWith(data, "\x89PNG\r\n\x1a\n", 8)) return ContentKind::kPng;
  if (StartsWith(data, "RIFF", 4) && StartsWith(data, "WEBP", 4, 8)) {
    return ContentKind::kWebp;
  }
  if (StartsWith(data, "GIF87a", 6) || StartsWith(data, "GIF89a", 6)) {
    return ContentKind::kGif;
  }
  if (StartsWith(data, "II*\0", 4) || StartsWith(data, "MM\0*", 4)) {
    return ContentKind::kTiff;
  }
  if (StartsWith(data, "BM", 2) && data.size() >= 14) return ContentKind::kBmp;
  if (IsMarkup(data)) return ContentKind::kHtml;
  return ContentKind::kUnknown;
}

const char* ContentKindName(ContentKind kind) {
  switch (kind) {
    case ContentKind::kEmpty:
      return "empty";
    case ContentKind::kJpeg:
      return "jpeg";
    case ContentKind::kPng:
      return "png";
    case ContentKind::kWebp:
      return "webp";
    case ContentKind::kGif:
      return "gif";
    case ContentKind::kBmp:
      return "bmp";
    case ContentKind::kTiff:
      return "tiff";
    case ContentKind::kHtml:
      return "html";
    case ContentKind::kUnknown:
      break;
  }
  return "unknown";
}

std::optional<ContentKind> KindFromName(absl::string_view name) {
  const size_t dot = name.rfind('.');
  if (dot == absl::string_view::npos ||
      name.find('/', dot) != absl::string_view::npos) {
    return std::nullopt;
  }
  const std::string extension = absl::AsciiStrToLower(name.substr(dot + 1));
  if (extension == "jpg" || extension == "jpeg") return ContentKind::kJpeg;
  if (extension == "png") return ContentKind::kPng;
  if (extension == "webp") return ContentKind::kWebp;
  if (extension == "gif") return ContentKind::kGif;
  if (extension == "bmp") return ContentKind::kBmp;
  if (extension == "tif" || extension == "tiff") return ContentKind::kTiff;
  return std::nullopt;
}

}  // namespace batchd::server
