#include "server/pipeline/read_cache.h"

namespace batchd::server {

ReadCache::ReadCache(uint64_t capacity_bytes)
    : cache_(
          capacity_bytes,
          /*charge=*/
          [](const Key&, const absl::StatusOr<FileBytes>& bytes) {
            return uint64_t{bytes->size()};
          },
          /*keep=*/
          [](const absl::StatusOr<FileBytes>& bytes) { return bytes.ok(); }) {}

absl::StatusOr<FileBytes> ReadCache::Read(
    const Key& key, const std::function<absl::StatusOr<FileBytes>()>& read) {
  return cache_.Get(key, read);
}

}  // namespace batchd::server
