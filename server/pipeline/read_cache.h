// ReadCache: the encoded bytes of recently read samples, shared by every
// plan and job of the daemon (--read-cache-bytes), so that jobs reading
// one dataset in different orders (a sweep with different seeds) read each
// file once per pass over the cache. Least recently used first out; the
// bound holds at all times (a sample larger than the whole cache is read
// and not kept). Concurrent reads of one sample are coalesced: one read,
// every caller gets its bytes (or its error; errors are not kept).
//
//   ReadCache cache(64 << 20);
//   absl::StatusOr<FileBytes> bytes = cache.Read(
//       {dataset.name(), index}, [&] { return dataset.ReadSample(index); });
//
// Thread-safe; a read runs without the lock.
#ifndef BATCHD_SERVER_PIPELINE_READ_CACHE_H_
#define BATCHD_SERVER_PIPELINE_READ_CACHE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "server/dataset/dataset.h"
#include "server/pipeline/lru_cache.h"

namespace batchd::server {

// hits: served from the cache; misses: read from storage; coalesced: waited
// for another caller's read of the same sample; bytes: held now.
using ReadCacheCounts = LruCacheCounts;

class ReadCache {
 public:
  // (dataset name, sample index).
  using Key = std::pair<std::string, uint64_t>;

  explicit ReadCache(uint64_t capacity_bytes);

  // The bytes of `key`: cached, being read by another caller (waits for
  // that read), or read now with `read`.
  absl::StatusOr<FileBytes> Read(
      const Key& key, const std::function<absl::StatusOr<FileBytes>()>& read);

  uint64_t capacity_bytes() const { return cache_.capacity_bytes(); }
  ReadCacheCounts counts() const { return cache_.counts(); }

 private:
  // A sample is charged its size; errors are not kept.
  LruCache<Key, absl::StatusOr<FileBytes>> cache_;
};

}  // namespace batchd::server

#endif  // BATCHD_SERVER_PIPELINE_READ_CACHE_H_
