// ShardRamTier: whole shards kept in memory, least recently used dropped
// first, under a byte bound: the shard cache's tier above its directory
// (--cache-ram-bytes), so that a small shard read again and again is not
// read from disk each time.
//
// Thread-compatible: the shard cache calls it under its own mutex.
#ifndef BATCHD_SERVER_STORAGE_SHARD_RAM_TIER_H_
#define BATCHD_SERVER_STORAGE_SHARD_RAM_TIER_H_

#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"

namespace batchd::server {

class ShardRamTier {
 public:
  explicit ShardRamTier(uint64_t capacity_bytes)
      : capacity_bytes_(capacity_bytes) {}

  // Whether a shard of `size` bytes belongs in a tier of
  // `capacity_bytes`: at most a quarter of it, so that a few shards fit.
  static bool Holds(uint64_t capacity_bytes, uint64_t size) {
    return capacity_bytes > 0 && size <= capacity_bytes / 4;
  }
  // The bytes of shard `name`, now the most recently used; nullptr when
  // not held.
  std::shared_ptr<const std::string> Lookup(const std::string& name);
  // Keeps `bytes` as shard `name`, dropping the least recently used shards
  // until it fits; a shard already held, or larger than the bound, is not
  // kept again.
  void Insert(const std::string& name,
              std::shared_ptr<const std::string> bytes);

  uint64_t bytes() const { return bytes_; }
  uint64_t capacity_bytes() const { return capacity_bytes_; }

 private:
  struct Entry {
    std::shared_ptr<const std::string> bytes;
    std::list<std::string>::iterator lru_position;
  };
  const uint64_t capacity_bytes_;
  std::list<std::string> lru_;  // most recently used first
  absl::flat_hash_map<std::string, Entry> entries_;
  uint64_t bytes_ = 0;  // invariant: <= capacity_bytes_
};

}  // namespace batchd::server

#endif  // BATCHD_SERVER_STORAGE_SHARD_RAM_TIER_H_
