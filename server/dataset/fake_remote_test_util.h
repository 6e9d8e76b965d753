// FakeRemoteOptions: RemoteOptions that load remote TAR_SHARDS datasets
// from a FakeObjectStore: its store, and as shards every *.tar object under
// the dataset's path (as ResolveShardObjects does for an s3:// prefix).
#ifndef BATCHD_SERVER_DATASET_FAKE_REMOTE_TEST_UTIL_H_
#define BATCHD_SERVER_DATASET_FAKE_REMOTE_TEST_UTIL_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "common/status_macros.h"
#include "server/dataset/dataset.h"
#include "server/storage/fake_object_store_test_util.h"

namespace batchd::server {

inline RemoteOptions FakeRemoteOptions(std::shared_ptr<FakeObjectStore> store) {
  RemoteOptions remote;
  remote.make_store = [store = std::move(store)](
                          const batchd::v1::DatasetConfig&)
      -> absl::StatusOr<std::shared_ptr<ObjectStore>> { return store; };
  remote.resolve_shards = [](const batchd::v1::DatasetConfig& config,
                             ObjectStore& store)
      -> absl::StatusOr<std::vector<ObjectInfo>> {
    ListOptions tars;
    tars.suffix = ".tar";
    return store.List(config.path(), tars);
  };
  return remote;
}

}  // namespace batchd::server

#endif  // BATCHD_SERVER_DATASET_FAKE_REMOTE_TEST_UTIL_H_
