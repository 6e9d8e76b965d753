#include "client/grpc_status.h"

namespace batchd::client {

absl::Status FromGrpc(const grpc::Status& status) {
  return FromGrpc(status, status.error_message());
}

absl::Status FromGrpc(const grpc::Status& status, absl::string_view message) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      message);
}

}  // namespace batchd::client
