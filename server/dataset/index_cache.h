// The sidecar index cache of a TAR_SHARDS dataset: each shard's ShardIndex
// with the shard's size and a validator when it was indexed (a local file's
// modification time, a remote object's ETag), so that a restart re-reads
// only shards that changed.
//
// File format (little-endian): "BATCHDIX", u32 version, u32 shard count,
// the shards, then the FNV-1a 64 of all bytes before it. A file that is
// short, has another version or fails the checksum is rejected as a whole
// (the caller re-indexes; a cache is never trusted halfway).
//
// Pure functions; thread-safe (writes go to a temporary file renamed over
// the old one, so a reader never sees a half-written cache).
#ifndef BATCHD_SERVER_DATASET_INDEX_CACHE_H_
#define BATCHD_SERVER_DATASET_INDEX_CACHE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/dataset/shard_index.h"

namespace batchd::server {

struct CachedShard {
  std::string path;       // as the dataset names it
  uint64_t size = 0;      // bytes, when indexed
  // What else must match for the entry to be reused, when indexed:
  // LocalValidator(st_mtim) or RemoteValidator(etag).
  std::string validator;
  // The image extension list it was indexed with (ImageExtensions, joined
  // with ';'): another list picks other members, so the entry is reused
  // only under the same list.
  std::string image_extensions;
  ShardIndex index;
};

// Validators of the two kinds of shard; never equal to each other.
std::string LocalValidator(int64_t mtime_ns);
std::string RemoteValidator(const std::string& etag);

// NOT_FOUND when there is no cache; DATA_LOSS when it is malformed; the
// read's error otherwise.
absl::StatusOr<std::vector<CachedShard>> ReadIndexCache(
    const std::string& path);

// Writes `shards` to `path` atomically (temporary file + rename).
absl::Status WriteIndexCache(const std::string& path,
                             const std::vector<CachedShard>& shards);

}  // namespace batchd::server

#endif  // BATCHD_SERVER_DATASET_INDEX_CACHE_H_
