#include "common/utf8_fields.h"

#include <cstdint>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/wire_format_lite.h"

namespace batchd::common {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::io::CodedInputStream;
using google::protobuf::internal::WireFormatLite;

// Protobuf's default recursion limit for parsing.
constexpr int kMaxDepth = 100;

// Walks the message of `type` that `input` holds (up to its limit, or to
// the end of `bytes`). Returns false to stop the walk: `*error` is set
// when a string is not UTF-8, left OK when the bytes are not a
// well-formed message.
bool Walk(absl::string_view bytes, CodedInputStream* input,
          const Descriptor& type, const std::string& path, int depth,
          absl::Status* error) {
  if (depth > kMaxDepth) return false;
  std::map<int, int> seen;  // repeated field number -> elements so far
  while (true) {
    const uint32_t tag = input->ReadTag();
    if (tag == 0) return input->ConsumedEntireMessage();
    const FieldDescriptor* field =
        type.FindFieldByNumber(WireFormatLite::GetTagFieldNumber(tag));
    const bool nested =
        field != nullptr &&
        WireFormatLite::GetTagWireType(tag) ==
            WireFormatLite::WIRETYPE_LENGTH_DELIMITED &&
        (field->type() == FieldDescriptor::TYPE_STRING ||
         field->type() == FieldDescriptor::TYPE_MESSAGE);
    if (!nested) {
      if (!WireFormatLite::SkipField(input, tag)) return false;
      continue;
    }
    uint32_t length = 0;
    if (!input->ReadVarint32(&length)) return false;
    const size_t at = static_cast<size_t>(input->CurrentPosition());
    if (at > bytes.size() || length > bytes.size() - at) return false;
    std::string name =
        path.empty() ? field->name() : absl::StrCat(path, ".", field->name());
    if (field->is_repeated()) {
      absl::StrAppend(&name, "[", seen[field->number()]++, "]");
    }
    if (field->type() == FieldDescriptor::TYPE_STRING) {
      const absl::string_view text = bytes.substr(at, length);
      const size_t valid = ValidUtf8Prefix(text);
      if (valid < text.size()) {
        *error = absl::InvalidArgumentError(absl::StrCat(
            name, " is not valid UTF-8 (byte 0x",
            absl::Hex(static_cast<uint8_t>(text[valid]), absl::kZeroPad2),
            " at offset ", valid, ")"));
        return false;
      }
      if (!input->Skip(static_cast<int>(length))) return false;
      continue;
    }
    const CodedInputStream::Limit limit =
        input->PushLimit(static_cast<int>(length));
    if (!Walk(bytes, input, *field->message_type(), name, depth + 1, error)) {
      return false;
    }
    input->PopLimit(limit);
  }
}

}  // namespace

size_t ValidUtf8Prefix(absl::string_view text) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const uint8_t b = s[i];
    if (b < 0x80) {
      ++i;
      continue;
    }
    // The length of the character `b` starts, and the range its second
    // byte must be in (the others are 0x80..0xbf): RFC 3629's table.
    size_t length = 0;
    uint8_t low = 0x80;
    uint8_t high = 0xbf;
    if (b >= 0xc2 && b <= 0xdf) {
      length = 2;
    } else if (b == 0xe0) {
      length = 3;
      low = 0xa0;  // no overlong forms
    } else if ((b >= 0xe1 && b <= 0xec) || b == 0xee || b == 0xef) {
      length = 3;
    } else if (b == 0xed) {
      length = 3;
      high = 0x9f;  // no surrogates
    } else if (b == 0xf0) {
      length = 4;
      low = 0x90;  // no overlong forms
    } else if (b >= 0xf1 && b <= 0xf3) {
      length = 4;
    } else if (b == 0xf4) {
      length = 4;
      high = 0x8f;  // nothing above U+10FFFF
    } else {
      return i;  // a continuation byte, 0xc0, 0xc1 (overlong) or 0xf5..0xff
    }
    if (n - i < length || s[i + 1] < low || s[i + 1] > high) return i;
    for (size_t k = 2; k < length; ++k) {
      if (s[i + k] < 0x80 || s[i + k] > 0xbf) return i;
    }
    i += length;
  }
  return n;
}

absl::Status CheckUtf8Fields(absl::string_view bytes,
                             const google::protobuf::Descriptor& type) {
  if (bytes.size() > static_cast<size_t>(INT32_MAX)) return absl::OkStatus();
  CodedInputStream input(reinterpret_cast<const uint8_t*>(bytes.data()),
                         static_cast<int>(bytes.size()));
  absl::Status error;
  Walk(bytes, &input, type, /*path=*/"", /*depth=*/0, &error);
  return error;
}

}  // namespace batchd::common
