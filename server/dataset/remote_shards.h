// RemoteShards: the ShardSource of a remote TAR_SHARDS dataset. Members are
// read through the daemon's ShardCache (whole shards kept on local disk)
// when there is one, by ranged reads of the member otherwise.
//
// A shard whose ETag changed since it was indexed is FAILED_PRECONDITION
// naming its URL for every sample it holds (never other bytes). The first
// such read marks the shard and is logged; later reads of it fail at once,
// without a request to the store, until the daemon restarts (and
// re-indexes). All are counted.
//
// A store that ignores Range (answers a ranged read with 200 and the whole
// object) is logged once, and from then on its shards are read whole
// through the cache (ShardCache::Read's whole_object) when it can hold
// them; otherwise, or without a cache, reads fail naming the store and
// --cache-bytes.
//
// ObjectReadAt: a ReadAt over one object, for indexing a shard from its
// headers: reads `block_bytes` blocks (one kept), so a "cls" member's
// header, its data and the next image's header usually cost one request.
//
// RemoteShards is thread-safe; ObjectReadAt is thread-compatible.
#ifndef BATCHD_SERVER_DATASET_REMOTE_SHARDS_H_
#define BATCHD_SERVER_DATASET_REMOTE_SHARDS_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/dataset/read_at.h"
#include "server/dataset/shard_source.h"
#include "server/storage/object_store.h"
#include "server/storage/shard_cache.h"

namespace batchd::server {

// Counts of one remote dataset's reads (samples, not index reads).
struct RemoteReadCounts {
  uint64_t reads = 0;           // members read
  uint64_t bytes = 0;           // member bytes returned
  uint64_t changed_shard_errors = 0;  // reads refused: the ETag changed
  uint64_t errors = 0;          // all failed reads
};

class RemoteShards : public ShardSource {
 public:
  // `cache`: nullptr to read member ranges straight from `store`.
  // `dataset`: named in the log lines. `request_cost_bytes`: what one
  // request to `store` weighs against a byte in the cache's
  // whole-or-ranges choice.
  RemoteShards(std::shared_ptr<ObjectStore> store,
               std::vector<ObjectInfo> shards,
               std::shared_ptr<ShardCache> cache, std::string dataset = "",
               uint64_t request_cost_bytes = FetchCosts().request_bytes);

  size_t shard_count() const override { return shards_.size(); }
  const std::string& name(uint32_t shard) const override {
    return shards_[shard].url;
  }
  absl::StatusOr<FileBytes> Read(uint32_t shard, uint64_t offset,
                                 uint64_t size,
                                 absl::string_view member) const override;
  // Queues a background download through the cache; no-op without one.
  void Prefetch(uint32_t shard) const override;
  void PrefetchMembers(uint32_t shard,
                       std::vector<MemberRange> members) const override;
  bool prefetches() const override { return cache_ != nullptr; }
  void AttachDemand(const std::shared_ptr<ShardDemand>& demand) const override;
  void DetachDemand(const ShardDemand* demand) const override;
  bool remote() const override { return true; }

  const ObjectInfo& object(uint32_t shard) const { return shards_[shard]; }
  RemoteReadCounts counts() const;
  // Whether `shard` was found changed (and is no longer fetched).
  bool changed(uint32_t shard) const { return change_logged_[shard].load(); }
  // Whether the store was found to ignore Range.
  bool ignores_range() const { return ignores_range_.load(); }

 private:
  // One read of `object`'s bytes: by range, or whole through the cache
  // once the store is known to ignore Range.
  absl::Status ReadBytes(const ObjectInfo& object, uint64_t offset,
                         uint64_t size, uint8_t* dest) const;
  // The store's answer to a ranged read was the whole object: log it once
  // and read whole shards from now on.
  void MarkIgnoresRange(const absl::Status& status) const;

  // Constant after construction.
  const std::shared_ptr<ObjectStore> store_;
  const std::vector<ObjectInfo> shards_;
  const std::shared_ptr<ShardCache> cache_;
  const std::string dataset_;
  const uint64_t request_cost_bytes_;

  mutable std::atomic<uint64_t> reads_{0};
  mutable std::atomic<uint64_t> bytes_{0};
  mutable std::atomic<uint64_t> changed_{0};
  mutable std::atomic<uint64_t> errors_{0};
  // One flag per shard: it changed since it was indexed (logged once,
  // never fetched again).
  const std::unique_ptr<std::atomic<bool>[]> change_logged_;
  mutable std::atomic<bool> ignores_range_{false};
};

class ObjectReadAt : public ReadAt {
 public:
  static constexpr size_t kDefaultBlockBytes = 4 << 10;

  ObjectReadAt(ObjectStore& store, ObjectInfo object,
               size_t block_bytes = kDefaultBlockBytes)
      : store_(store), object_(std::move(object)), block_bytes_(block_bytes) {}

  absl::StatusOr<size_t> Read(uint64_t offset, char* out,
                              size_t size) override;
  uint64_t requests() const { return requests_; }
  uint64_t bytes() const { return bytes_; }  // read from the store

 private:
  ObjectStore& store_;
  const ObjectInfo object_;
  const size_t block_bytes_;
  std::string block_;         // the bytes at block_offset_
  uint64_t block_offset_ = 0;
  uint64_t requests_ = 0;
  uint64_t bytes_ = 0;
};

}  // namespace batchd::server

#endif  // BATCHD_SERVER_DATASET_REMOTE_SHARDS_H_
