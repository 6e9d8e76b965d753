// ServeRawUnary: one unary call of a method served raw (ByteBuffer in and
// out), so that a request body that does not parse is answered
// INVALID_ARGUMENT naming the message it should have been, or the string
// field that is not UTF-8 (ParseRequest); gRPC's typed handler answers
// UNIMPLEMENTED with no message, which reads as "no such method", and
// libprotobuf logs a line for each such string.
//
//   grpc::ServerUnaryReactor* AdminServiceImpl::GetStatus(
//       grpc::CallbackServerContext* context, const grpc::ByteBuffer* in,
//       grpc::ByteBuffer* out) {
//     return ServeRawUnary<GetStatusRequest, ServerStatus>(
//         context, *in, out, Authorize(*context),
//         [&](const GetStatusRequest& request, ServerStatus* response) {
//           ...; return grpc::Status::OK;
//         });
//   }
#ifndef BATCHD_SERVER_SERVICE_RAW_UNARY_H_
#define BATCHD_SERVER_SERVICE_RAW_UNARY_H_

#include <string>

#include "absl/status/status.h"
#include "common/chunk_codec.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/server_callback.h"
#include "grpcpp/support/status.h"
#include "server/service/parse_request.h"

namespace batchd::server {

// Finishes the call at once: with `allowed` when it is an error (the caller
// is checked before the body is looked at), INVALID_ARGUMENT when `in` is
// not a Request (ParseRequest), else with what `handle(request, &response)` returns (and
// the response, when OK).
template <typename Request, typename Response, typename Handler>
grpc::ServerUnaryReactor* ServeRawUnary(grpc::CallbackServerContext* context,
                                        const grpc::ByteBuffer& in,
                                        grpc::ByteBuffer* out,
                                        const absl::Status& allowed,
                                        Handler handle) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  Request request;
  Response response;
  grpc::Status status;
  if (!allowed.ok()) {
    status = grpc::Status(static_cast<grpc::StatusCode>(allowed.code()),
                          std::string(allowed.message()));
  } else if (absl::Status parsed = ParseRequest(in, &request); !parsed.ok()) {
    status = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          std::string(parsed.message()));
  } else {
    status = handle(request, &response);
    if (status.ok()) *out = common::EncodeMessage(response);
  }
  reactor->Finish(status);
  return reactor;
}

}  // namespace batchd::server

#endif  // BATCHD_SERVER_SERVICE_RAW_UNARY_H_
