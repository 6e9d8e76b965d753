#include "server/dataset/remote_shards.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/storage/response_check.h"

namespace batchd::server {
namespace {

constexpr uint64_t kMaxMemberBytes = uint64_t{4} << 30;

}  // namespace

RemoteShards::RemoteShards(std::shared_ptr<ObjectStore> store,
                           std::vector<ObjectInfo> shards,
                           std::shared_ptr<ShardCache> cache,
                           std::string dataset, uint64_t request_cost_bytes)
    : store_(std::move(store)),
      shards_(std::move(shards)),
      cache_(std::move(cache)),
      dataset_(std::move(dataset)),
      request_cost_bytes_(request_cost_bytes),
      change_logged_(new std::atomic<bool>[shards_.size()]) {
  for (size_t i = 0; i < shards_.size(); ++i) change_logged_[i] = false;
}

RemoteReadCounts RemoteShards::counts() const {
  RemoteReadCounts counts;
  counts.reads = reads_.load();
  counts.bytes = bytes_.load();
  counts.changed_shard_errors = changed_.load();
  counts.errors = errors_.load();
  return counts;
}

absl::StatusOr<FileBytes> RemoteShards::Read(uint32_t shard, uint64_t offset,
                                             uint64_t size,
                                             absl::string_view member) const {
  if (shard >= shards_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard ", shard, " of ", shards_.size()));
  }
  const ObjectInfo& object = shards_[shard];
  if (size > kMaxMemberBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("member '", member, "' of '", object.url, "' is ", size,
                     " bytes, more than the limit of ", kMaxMemberBytes));
  }
  if (change_logged_[shard].load(std::memory_order_relaxed)) {
    // Marked changed: no request to the store until a restart.
    reads_.fetch_add(1, std::memory_order_relaxed);
    errors_.fetch_add(1, std::memory_order_relaxed);
    changed_.fetch_add(1, std::memory_order_relaxed);
    return absl::FailedPreconditionError(absl::StrCat(
        "member '", member, "' of '", object.url,
        "': the shard changed since it was indexed; its samples are "
        "substituted until the daemon restarts and re-indexes it"));
  }
  std::shared_ptr<uint8_t[]> data(new uint8_t[std::max<uint64_t>(size, 1)]);
  absl::Status status = ReadBytes(object, offset, size, data.get());
  if (StoreFaultOf(status) == StoreFault::kIgnoresRange) {
    MarkIgnoresRange(status);
    status = ReadBytes(object, offset, size, data.get());
  }
  reads_.fetch_add(1, std::memory_order_relaxed);
  if (!status.ok()) {
    errors_.fetch_add(1, std::memory_order_relaxed);
    if (StoreFaultOf(status) == StoreFault::kChanged) {
      changed_.fetch_add(1, std::memory_order_relaxed);
      if (!change_logged_[shard].exchange(true)) {
        std::fprintf(stderr,
                     "batchd: shard '%s' changed since it was indexed; it is "
                     "not fetched again and its samples are substituted "
                     "until the daemon restarts (%s)\n",
                     object.url.c_str(), std::string(status.message()).c_str());
      }
      return absl::FailedPreconditionError(absl::StrCat(
          "member '", member, "' of '", object.url,
          "': the shard changed since it was indexed (", status.message(),
          ")"));
    }
    return absl::Status(status.code(),
                        absl::StrCat("member '", member, "' of '", object.url,
                                     "': ", status.message()));
  }
  bytes_.fetch_add(size, std::memory_order_relaxed);
  return FileBytes(std::move(data), size);
}

void RemoteShards::AttachDemand(
    const std::shared_ptr<ShardDemand>& demand) const {
  if (cache_ != nullptr) {
    cache_->AddForecast(demand, store_, shards_, request_cost_bytes_);
  }
}

void RemoteShards::DetachDemand(const ShardDemand* demand) const {
  if (cache_ != nullptr) cache_->RemoveForecast(demand);
}

absl::Status RemoteShards::ReadBytes(const ObjectInfo& object, uint64_t offset,
                                     uint64_t size, uint8_t* dest) const {
  if (!ignores_range_.load(std::memory_order_relaxed)) {
    return cache_ != nullptr
               ? cache_->Read(store_, object, offset, size, dest)
               : store_->ReadRange(object, offset, size, dest);
  }
  if (cache_ == nullptr) {
    // Short: it ends up in a Substitution's detail, which is cut.
    return absl::FailedPreconditionError(absl::StrCat(
        "dataset \"", dataset_, "\": the store ignores Range; give the "
        "daemon --cache-dir and --cache-bytes (several shards; this one is ",
        object.size, " bytes) to read its shards whole"));
  }
  absl::Status status =
      cache_->Read(store_, object, offset, size, dest, /*whole_object=*/true);
  if (absl::IsResourceExhausted(status)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "dataset \"", dataset_, "\": the store ignores Range, so shards are "
        "read whole through the cache, and ", status.message()));
  }
  return status;
}

void RemoteShards::MarkIgnoresRange(const absl::Status& status) const {
  if (ignores_range_.exchange(true)) return;
  std::fprintf(stderr,
               "batchd: dataset \"%s\": the store ignores Range: answered "
               "200 with the whole object; its shards are read whole%s (%s)\n",
               dataset_.c_str(),
               cache_ != nullptr
                   ? " through the shard cache when it can hold them"
                   : ", which needs --cache-dir and --cache-bytes: reads fail "
                     "until then",
               std::string(status.message()).c_str());
}

void RemoteShards::Prefetch(uint32_t shard) const {
  if (cache_ == nullptr || shard >= shards_.size()) return;
  if (change_logged_[shard].load(std::memory_order_relaxed)) return;
  cache_->Prefetch(store_, shards_[shard],
                   ignores_range_.load(std::memory_order_relaxed));
}

void RemoteShards::PrefetchMembers(uint32_t shard,
                                   std::vector<MemberRange> members) const {
  if (cache_ == nullptr || shard >= shards_.size()) return;
  if (change_logged_[shard].load(std::memory_order_relaxed) ||
      ignores_range_.load(std::memory_order_relaxed)) {
    return;
  }
  cache_->PrefetchMembers(store_, shards_[shard], std::move(members));
}

absl::StatusOr<size_t> ObjectReadAt::Read(uint64_t offset, char* out,
                                          size_t size) {
  if (offset >= object_.size) return 0;
  size = static_cast<size_t>(std::min<uint64_t>(size, object_.size - offset));
  if (offset >= block_offset_ &&
      offset + size <= block_offset_ + block_.size()) {
    memcpy(out, block_.data() + (offset - block_offset_), size);
    return size;
  }
  ++requests_;
  if (size > block_bytes_) {
    bytes_ += size;
    // Large (a long pax header): read it alone, keep the block.
    absl::Status status = store_.ReadRange(
        object_, offset, size, reinterpret_cast<uint8_t*>(out));
    if (!status.ok()) return status;
    return size;
  }
  const uint64_t length = std::min<uint64_t>(block_bytes_, object_.size - offset);
  bytes_ += length;
  std::string block(length, '\0');
  absl::Status status = store_.ReadRange(
      object_, offset, length, reinterpret_cast<uint8_t*>(block.data()));
  if (!status.ok()) return status;
  block_ = std::move(block);
  block_offset_ = offset;
  memcpy(out, block_.data(), size);
  return size;
}

}  // namespace batchd::server
