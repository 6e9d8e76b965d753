// The shard cache's files: their names, the directory's listing at start,
// downloads into place and reads. Free functions with no state: the cache
// (shard_cache.h) decides what is downloaded, kept and deleted.
//
// A cache file is named "<hash>-<size>.shard", the hash over (URL, ETag):
// a restart finds every complete shard again and a changed object has
// another name. A download writes "<name>.tmp.<pid>.<n>" beside it and
// renames it into place when whole, so a file with a shard's name is
// always complete. Thread-safe.
#ifndef BATCHD_SERVER_STORAGE_SHARD_CACHE_FILES_H_
#define BATCHD_SERVER_STORAGE_SHARD_CACHE_FILES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/storage/object_store.h"

namespace batchd::server {

// The cache file name of `shard`. A shard without an ETag gets a name for
// this process only (nothing tells it from a later object of the same size).
std::string ShardFileName(const ObjectInfo& shard);

// A complete shard file found in the cache directory.
struct ShardFile {
  int64_t mtime_ns = 0;
  std::string name;
  uint64_t size = 0;
};

// The complete shard files in `dir`, most recently modified first. Deletes
// what a crash left: temporary files, and files shorter or longer than
// their name says. The filesystem's error when `dir` cannot be listed.
absl::StatusOr<std::vector<ShardFile>> ListShardFiles(const std::string& dir);

// Downloads `shard` through `store` to `path`: in `chunk_bytes` range
// reads, `chunks_in_flight` at once, or (`whole_object`) by one read of the
// whole object into the mapped file. Written aside and renamed into place;
// on failure nothing is left. Blocks on I/O.
absl::Status DownloadShard(ObjectStore& store, const ObjectInfo& shard,
                           const std::string& path, bool whole_object,
                           uint64_t chunk_bytes, int chunks_in_flight);

// Reads bytes [`offset`, `offset` + `size`) of the cache file `path` of
// `shard` into `dest`, or (`whole` set) the whole file into *whole and the
// range from it. DATA_LOSS when the file is shorter than its name says.
absl::Status ReadShardFile(const std::string& path, const ObjectInfo& shard,
                           uint64_t offset, uint64_t size, uint8_t* dest,
                           std::string* whole);

}  // namespace batchd::server

#endif  // BATCHD_SERVER_STORAGE_SHARD_CACHE_FILES_H_
