// ParseRequest: how the daemon reads every request message a client sends
// (the data stream's StreamRequests, the admin and dataset RPCs' bodies),
// so that each bad body gets one clear INVALID_ARGUMENT and none makes
// libprotobuf log. String fields are checked for UTF-8 before protobuf
// parses (common/utf8_fields.h): protobuf would refuse them too, but with
// one ERROR line in the daemon's log per message and nothing that says
// which field was wrong.
//
//   absl::Status parsed = ParseRequest(bytes, &request);
//   // INVALID_ARGUMENT "open.plan.job is not valid UTF-8 (byte 0xff at
//   // offset 3)", or "the request is not a batchd.v1.StreamRequest; ..."
//
// Thread-compatible (each call its own message).
#ifndef BATCHD_SERVER_SERVICE_PARSE_REQUEST_H_
#define BATCHD_SERVER_SERVICE_PARSE_REQUEST_H_

#include "absl/status/status.h"
#include "google/protobuf/message.h"
#include "grpcpp/support/byte_buffer.h"

namespace batchd::server {

// Parses `bytes` into `request` (cleared first). INVALID_ARGUMENT naming
// the field when a string field is not UTF-8, or naming the message type
// when the bytes do not parse as one; `request` is then unspecified.
absl::Status ParseRequest(const grpc::ByteBuffer& bytes,
                          google::protobuf::Message* request);

}  // namespace batchd::server

#endif  // BATCHD_SERVER_SERVICE_PARSE_REQUEST_H_
