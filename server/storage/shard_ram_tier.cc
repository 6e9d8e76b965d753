#include "server/storage/shard_ram_tier.h"

namespace batchd::server {

std::shared_ptr<const std::string> ShardRamTier::Lookup(
    const std::string& name) {
  auto it = entries_.find(name);
  if (it == entries_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second.lru_position);
  return it->second.bytes;
}

void ShardRamTier::Insert(const std::string& name,
                          std::shared_ptr<const std::string> bytes) {
  const uint64_t size = bytes->size();
  if (entries_.contains(name) || size > capacity_bytes_) return;
  while (bytes_ + size > capacity_bytes_) {
    auto oldest = entries_.find(lru_.back());
    bytes_ -= oldest->second.bytes->size();
    entries_.erase(oldest);
    lru_.pop_back();
  }
  lru_.push_front(name);
  entries_.emplace(name, Entry{std::move(bytes), lru_.begin()});
  bytes_ += size;
}

}  // namespace batchd::server
