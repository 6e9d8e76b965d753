#include "python/native/native_loader.h"

#include <utility>

#include "client/daemon_status.h"
#include "common/status_macros.h"

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
  return client::ListDatasets(client::NewBatchdChannel(endpoint, loaded),
                              endpoint, loaded, timeout);
}

}  // namespace batchd::python
