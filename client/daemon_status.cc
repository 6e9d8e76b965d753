#include "client/daemon_status.h"

#include "absl/strings/str_cat.h"
#include "batchd/v1/admin.grpc.pb.h"
#include "batchd/v1/data.grpc.pb.h"
#include "client/grpc_status.h"
#include "grpcpp/client_context.h"

namespace batchd::client {

absl::StatusOr<batchd::v1::ServerStatus> FetchServerStatus(
    const std::shared_ptr<grpc::Channel>& channel, absl::Duration timeout) {
  auto stub = batchd::v1::AdminService::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  batchd::v1::ServerStatus status;
  const grpc::Status result =
      stub->GetStatus(&context, batchd::v1::GetStatusRequest(), &status);
  if (!result.ok()) {
    return FromGrpc(result,
                    absl::StrCat("GetStatus: ", result.error_message()));
  }
  return status;
}

absl::StatusOr<batchd::v1::ListDatasetsResponse> ListDatasets(
    const std::shared_ptr<grpc::Channel>& channel, absl::string_view endpoint,
    const ChannelSecurity& security, absl::Duration timeout) {
  auto stub = batchd::v1::DataService::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  batchd::v1::ListDatasetsResponse response;
  const grpc::Status result = stub->ListDatasets(
      &context, batchd::v1::ListDatasetsRequest(), &response);
  if (!result.ok()) {
    return FromGrpc(
        result,
        absl::StrCat("ListDatasets at ", endpoint, ": ",
                     WithConnectionHint(result.error_message(), security)));
  }
  return response;
}

}  // namespace batchd::client
