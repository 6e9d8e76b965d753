// Temporary stand-ins for the object store's factory functions, linked only
// while the libcurl store (batchd_storage) is not in the tree: IsRemoteUrl
// is the real rule, the rest say UNIMPLEMENTED. Replaced by the real store
// when it lands (cache.cmake links batchd_storage when it exists).
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/storage/object_store.h"

namespace batchd::server {

bool IsRemoteUrl(absl::string_view path) {
  return absl::StartsWith(path, "s3://") || absl::StartsWith(path, "http://") ||
         absl::StartsWith(path, "https://");
}

absl::StatusOr<std::unique_ptr<ObjectStore>> MakeObjectStore(
    const batchd::v1::DatasetConfig& config, int /*connections*/) {
  return absl::UnimplementedError(absl::StrCat(
      "dataset '", config.name(),
      "': this build has no S3/HTTP object store"));
}

absl::StatusOr<std::vector<ObjectInfo>> ResolveShardObjects(
    const batchd::v1::DatasetConfig& config, ObjectStore& /*store*/) {
  return absl::UnimplementedError(absl::StrCat(
      "dataset '", config.name(),
      "': this build cannot resolve remote shards"));
}

}  // namespace batchd::server
