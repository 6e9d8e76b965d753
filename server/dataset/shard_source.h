// ShardSource: where a TAR_SHARDS dataset's member bytes come from, by
// shard number: local files (shard_files.h) or remote objects, through the
// shard cache or by range reads (remote_shards.h). The Dataset reads
// samples through it and knows nothing else of either.
//
// Implementations are thread-safe.
#ifndef BATCHD_SERVER_DATASET_SHARD_SOURCE_H_
#define BATCHD_SERVER_DATASET_SHARD_SOURCE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/dataset/dataset.h"
#include "server/storage/range_prefetch.h"
#include "server/storage/shard_demand.h"

namespace batchd::server {

class ShardSource {
 public:
  virtual ~ShardSource() = default;

  virtual size_t shard_count() const = 0;
  // The shard's path or URL, as messages show it. REQUIRES: shard <
  // shard_count().
  virtual const std::string& name(uint32_t shard) const = 0;

  // The `size` bytes at `offset` of shard `shard`; `member` names them in
  // messages. Blocks on I/O. Errors name the shard and the member.
  virtual absl::StatusOr<FileBytes> Read(uint32_t shard, uint64_t offset,
                                         uint64_t size,
                                         absl::string_view member) const = 0;

  // A hint that `shard` will be read soon; never blocks. Local files: no-op.
  virtual void Prefetch(uint32_t /*shard*/) const {}
  // A hint that `members` of `shard` will be read soon, in that order (a
  // batch accepted for building); never blocks. Remote shards read by
  // ranges fetch them ahead. Local files: no-op.
  virtual void PrefetchMembers(uint32_t /*shard*/,
                               std::vector<MemberRange> /*members*/) const {}
  // Whether Prefetch does anything (callers skip computing hints if not).
  virtual bool prefetches() const { return false; }
  // What the plans will read of these shards (shard_demand.h), for the
  // shard cache's choices; no-ops without a cache. Detach before
  // `demand`'s locate function dies.
  virtual void AttachDemand(
      const std::shared_ptr<ShardDemand>& /*demand*/) const {}
  virtual void DetachDemand(const ShardDemand* /*demand*/) const {}
  // Whether the shards are remote objects.
  virtual bool remote() const { return false; }
};

}  // namespace batchd::server

#endif  // BATCHD_SERVER_DATASET_SHARD_SOURCE_H_
