#include "server/pipeline/read_cache.h"

namespace batchd::server {

ReadCache::ReadCache(uint64_t capacity_bytes)
    : capacity_bytes_(capacity_bytes) {}

absl::StatusOr<FileBytes> ReadCache::Read(
    const Key& key, const std::function<absl::StatusOr<FileBytes>()>& read) {
  std::shared_ptr<Entry> entry;
  {
    absl::MutexLock lock(&mu_);
    auto [it, inserted] = entries_.try_emplace(key);
    if (!inserted) {
      entry = it->second;
      if (!entry->reading) {
        ++counts_.hits;
        lru_.splice(lru_.end(), lru_, entry->lru);  // most recently used
        return entry->bytes;
      }
      ++counts_.coalesced;
      mu_.Await(absl::Condition(
          +[](Entry* e) { return !e->reading; }, entry.get()));
      return entry->bytes;
    }
    it->second = entry = std::make_shared<Entry>();
    ++counts_.misses;
  }
  absl::StatusOr<FileBytes> bytes = read();
  absl::MutexLock lock(&mu_);
  entry->bytes = bytes;
  entry->reading = false;
  if (bytes.ok() && bytes->size() <= capacity_bytes_) {
    entry->lru = lru_.insert(lru_.end(), key);
    counts_.bytes += bytes->size();
    EvictLocked();
  } else {
    // Errors are not kept (the next read tries again), nor is a sample
    // larger than the whole cache; waiters still get it.
    entries_.erase(key);
  }
  return bytes;
}

void ReadCache::EvictLocked() {
  while (counts_.bytes > capacity_bytes_) {
    auto it = entries_.find(lru_.front());
    counts_.bytes -= it->second->bytes->size();
    lru_.pop_front();
    entries_.erase(it);
    ++counts_.evictions;
  }
}

ReadCacheCounts ReadCache::counts() const {
  absl::MutexLock lock(&mu_);
  return counts_;
}

}  // namespace batchd::server
