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
#include <list>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/dataset/dataset.h"

namespace batchd::server {

struct ReadCacheCounts {
  uint64_t hits = 0;       // served from the cache
  uint64_t misses = 0;     // read from storage
  uint64_t coalesced = 0;  // waited for another caller's read of the same
  uint64_t evictions = 0;
  uint64_t bytes = 0;      // held now
};

class ReadCache {
 public:
  // (dataset name, sample index).
  using Key = std::pair<std::string, uint64_t>;

  explicit ReadCache(uint64_t capacity_bytes);

  // The bytes of `key`: cached, being read by another caller (waits for
  // that read), or read now with `read`.
  absl::StatusOr<FileBytes> Read(
      const Key& key, const std::function<absl::StatusOr<FileBytes>()>& read)
      ABSL_LOCKS_EXCLUDED(mu_);

  uint64_t capacity_bytes() const { return capacity_bytes_; }
  ReadCacheCounts counts() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // Shared with the callers waiting for its read, so that evicting it
  // never pulls it from under them.
  struct Entry {
    bool reading = true;  // a caller is reading it; the others wait
    absl::StatusOr<FileBytes> bytes;
    std::list<Key>::iterator lru;  // once cached
  };
  void EvictLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const uint64_t capacity_bytes_;
  mutable absl::Mutex mu_;
  std::map<Key, std::shared_ptr<Entry>> entries_ ABSL_GUARDED_BY(mu_);
  std::list<Key> lru_ ABSL_GUARDED_BY(mu_);  // cached keys, oldest first
  ReadCacheCounts counts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace batchd::server

#endif  // BATCHD_SERVER_PIPELINE_READ_CACHE_H_
