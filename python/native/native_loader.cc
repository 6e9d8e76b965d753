#include "python/native/native_loader.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "batchd/v1/data.grpc.pb.h"
#include "common/status_macros.h"
#include "grpcpp/client_context.h"

namespace batchd::python {

absl::StatusOr<std::unique_ptr<NativeLoader>> CreateNativeLoader(
    client::LoaderOptions options) {
  ASSIGN_OR_RETURN(std::unique_ptr<client::Loader> loader,
                   client::Loader::Create(std::move(options)));
  return std::make_unique<NativeLoader>(std::move(loader));
}

absl::StatusOr<batchd::v1::ListDatasetsResponse> ListDatasets(
    const std::string& endpoint, const client::SecurityOptions& security,
    absl::Duration timeout) {
  ASSIGN_OR_RETURN(client::ChannelSecurity loaded,
                   client::ChannelSecurity::Load(security));
  auto stub = batchd::v1::DataService::NewStub(
      client::NewBatchdChannel(endpoint, loaded));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  batchd::v1::ListDatasetsResponse response;
  grpc::Status status = stub->ListDatasets(
      &context, batchd::v1::ListDatasetsRequest(), &response);
  if (!status.ok()) {
    return absl::Status(
        static_cast<absl::StatusCode>(status.error_code()),
        absl::StrCat("ListDatasets at ", endpoint, ": ",
                     client::WithConnectionHint(status.error_message(),
                                                loaded)));
  }
  return response;
}

}  // namespace batchd::python
