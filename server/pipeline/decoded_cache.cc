#include "server/pipeline/decoded_cache.h"

#include <utility>

namespace batchd::server {

DecodedCache::DecodedCache(uint64_t capacity_bytes)
    : capacity_bytes_(capacity_bytes) {}

uint64_t DecodedCache::ChargeFor(const Key& key, const CappedImage& image) {
  // The map node, the list node, the entry and the image's header: about
  // 256 bytes on a 64-bit build, plus the dataset name held twice.
  constexpr uint64_t kOverheadBytes = 256;
  return image.bytes() + 2 * std::get<0>(key).size() + kOverheadBytes;
}

std::shared_ptr<const CappedImage> DecodedCache::Lookup(const Key& key) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(key);
  if (it == entries_.end() || it->second->decoding) return nullptr;
  ++counts_.hits;
  lru_.splice(lru_.end(), lru_, it->second->lru);  // most recently used
  return it->second->sample.image;
}

DecodedSample DecodedCache::Get(const Key& key,
                                const std::function<DecodedSample()>& decode) {
  std::shared_ptr<Entry> entry;
  {
    absl::MutexLock lock(&mu_);
    auto [it, inserted] = entries_.try_emplace(key);
    if (!inserted) {
      entry = it->second;
      if (!entry->decoding) {
        ++counts_.hits;
        lru_.splice(lru_.end(), lru_, entry->lru);
        return entry->sample;
      }
      ++counts_.coalesced;
      mu_.Await(absl::Condition(
          +[](Entry* e) { return !e->decoding; }, entry.get()));
      return entry->sample;
    }
    it->second = entry = std::make_shared<Entry>();
    ++counts_.misses;
  }
  DecodedSample sample = decode();
  absl::MutexLock lock(&mu_);
  entry->sample = sample;
  entry->decoding = false;
  const uint64_t charge =
      sample.image != nullptr ? ChargeFor(key, *sample.image) : 0;
  if (sample.result.ok() && sample.image != nullptr &&
      charge <= capacity_bytes_) {
    entry->charge = charge;
    entry->lru = lru_.insert(lru_.end(), key);
    counts_.bytes += charge;
    EvictLocked();
  } else {
    // Errors are not kept (the next use tries again), nor is an image
    // larger than the whole cache; waiters still get it.
    entries_.erase(key);
  }
  return sample;
}

void DecodedCache::EvictLocked() {
  while (counts_.bytes > capacity_bytes_) {
    auto it = entries_.find(lru_.front());
    counts_.bytes -= it->second->charge;
    lru_.pop_front();
    entries_.erase(it);
    ++counts_.evictions;
  }
}

DecodedCacheCounts DecodedCache::counts() const {
  absl::MutexLock lock(&mu_);
  return counts_;
}

}  // namespace batchd::server
