// What a sample's bytes are, from their first bytes (magic numbers), and
// what its file or member name says they are. The daemon decodes by
// content, never by name (ImageDecoder routes with SniffContent); the name
// only serves to count files whose content is not what their extension
// says (an HTML error page saved as ".jpg", a PNG named ".jpg").
//
// Pure functions; thread-safe.
#ifndef BATCHD_SERVER_DECODE_IMAGE_FORMAT_H_
#define BATCHD_SERVER_DECODE_IMAGE_FORMAT_H_

#include <cstdint>
#include <optional>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace batchd::server {

enum class ContentKind {
  kEmpty,    // zero bytes
  kJpeg,     // FF D8
  kPng,      // the 8-byte PNG signature
  kWebp,     // "RIFF" <size> "WEBP"
  kGif,      // "GIF87a" / "GIF89a"
  kBmp,      // "BM"
  kTiff,     // "II*\0" / "MM\0*"
  kHtml,     // markup: '<' first, after any BOM and whitespace
  kUnknown,  // anything else
};

// The kind of `data`, from at most its first 512 bytes.
ContentKind SniffContent(absl::Span<const uint8_t> data);

// Lower-case name for logs and metric labels: "empty", "jpeg", "png",
// "webp", "gif", "bmp", "tiff", "html", "unknown".
const char* ContentKindName(ContentKind kind);

// The image kind a file or member name's extension says (".jpg" and
// ".jpeg" kJpeg, ".png", ".webp", ".gif", ".bmp", ".tif" and ".tiff"; any
// case); nullopt for any other name. Only the last extension counts
// ("a.seg.png" is a PNG).
std::optional<ContentKind> KindFromName(absl::string_view name);

}  // namespace batchd::server

#endif  // BATCHD_SERVER_DECODE_IMAGE_FORMAT_H_
