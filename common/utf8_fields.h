// The UTF-8 check of a serialized message's string fields, done before
// the message is parsed. Protobuf refuses a proto3 string that is not
// UTF-8, but says only that the parse failed, and libprotobuf logs an
// ERROR line for each such message: a peer could fill a log with them.
// Checking first names the field for the peer, and protobuf never sees
// the bytes.
//
//   absl::Status utf8 = CheckUtf8Fields(bytes, *StreamRequest::descriptor());
//   // INVALID_ARGUMENT "open.plan.job is not valid UTF-8 (byte 0xff at
//   // offset 3)"
//
// Pure functions; thread-safe.
#ifndef BATCHD_COMMON_UTF8_FIELDS_H_
#define BATCHD_COMMON_UTF8_FIELDS_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/descriptor.h"

namespace batchd::common {

// Length of the longest prefix of `text` that is well-formed UTF-8
// (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF):
// `text.size()` when all of it is, else the offset of the first byte that
// is not part of a well-formed character.
size_t ValidUtf8Prefix(absl::string_view text);

// Walks `bytes` as a serialized message of `type` and checks every string
// field, in nested messages too, as protobuf does when parsing. OK when
// all are UTF-8; INVALID_ARGUMENT naming the first that is not, by its
// path from `type` (`open.plan.job`, `shards[2]` for the third element of
// a repeated field), with the first bad byte and its offset in the
// string. Bytes that are not a well-formed message, or nest deeper than
// protobuf's limit of 100, are OK here: the parse that follows refuses
// them.
absl::Status CheckUtf8Fields(absl::string_view bytes,
                             const google::protobuf::Descriptor& type);

}  // namespace batchd::common

#endif  // BATCHD_COMMON_UTF8_FIELDS_H_
