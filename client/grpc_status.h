// FromGrpc: a gRPC status as an absl::Status, at the edge where the client
// library (and the tools and tests built on it) calls a daemon.
//
//   const grpc::Status rpc = stub->GetStatus(&context, request, &response);
//   if (!rpc.ok()) return FromGrpc(rpc);
//
// gRPC's codes and Abseil's share their numbers (OK = 0 ... UNAUTHENTICATED
// = 16), so the code carries over as it is. Thread-safe pure functions.
#ifndef BATCHD_CLIENT_GRPC_STATUS_H_
#define BATCHD_CLIENT_GRPC_STATUS_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "grpcpp/support/status.h"

namespace batchd::client {

// `status`'s code and message; OK for an OK `status`.
absl::Status FromGrpc(const grpc::Status& status);
// `status`'s code with `message` in place of gRPC's (which the caller may
// quote in it, e.g. "GetStatus: " + status.error_message()).
absl::Status FromGrpc(const grpc::Status& status, absl::string_view message);

}  // namespace batchd::client

#endif  // BATCHD_CLIENT_GRPC_STATUS_H_
