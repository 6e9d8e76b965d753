// ShardFiles: reads members' bytes out of a dataset's tar shards with pread,
// keeping up to `max_open` shards open (least recently used closed first),
// so that reading a sample never opens a file unless its shard was closed.
//
// Thread-safe. The lock covers the table of open files only: opens,
// closes and reads happen outside it, and a file being read stays open
// (shared ownership) even if it is evicted meanwhile.
//
//   ShardFiles files({"a.tar", "b.tar"}, /*max_open=*/64);
//   ASSIGN_OR_RETURN(FileBytes bytes, files.Read(1, offset, size, "k.jpg"));
#ifndef BATCHD_SERVER_DATASET_SHARD_FILES_H_
#define BATCHD_SERVER_DATASET_SHARD_FILES_H_

#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "server/dataset/dataset.h"
#include "server/dataset/shard_source.h"

namespace batchd::server {

class ShardFiles : public ShardSource {
 public:
  static constexpr size_t kDefaultMaxOpen = 64;

  // `paths`: the shards, by shard number. `max_open` >= 1.
  ShardFiles(std::vector<std::string> paths, size_t max_open);
  ~ShardFiles() override;
  ShardFiles(const ShardFiles&) = delete;
  ShardFiles& operator=(const ShardFiles&) = delete;

  // The `size` bytes at `offset` of shard `shard` (`member` names them in
  // messages). common::ErrnoStatus's code (NOT_FOUND, PERMISSION_DENIED,
  // UNAVAILABLE, ...) when the shard cannot be opened or read; UNAVAILABLE
  // naming the shard and member when it ends before offset + size (it
  // changed since it was indexed); INVALID_ARGUMENT for a shard number out
  // of range or more than 4 GiB.
  absl::StatusOr<FileBytes> Read(uint32_t shard, uint64_t offset,
                                 uint64_t size,
                                 absl::string_view member) const override;

  size_t shard_count() const override { return paths_.size(); }
  const std::string& name(uint32_t shard) const override {
    return paths_[shard];
  }
  const std::string& path(uint32_t shard) const { return paths_[shard]; }
  // Shards open now, and open() calls so far (for tests).
  size_t open_now() const;
  uint64_t opens() const;

 private:
  struct OpenFile;
  // An open shard, or an error; opens it unless it is already open.
  absl::StatusOr<std::shared_ptr<const OpenFile>> Acquire(
      uint32_t shard) const;

  // Constant after construction.
  const std::vector<std::string> paths_;
  const size_t max_open_;

  mutable absl::Mutex mu_;
  // Most recently used first.
  mutable std::list<uint32_t> lru_ ABSL_GUARDED_BY(mu_);
  struct Entry {
    std::shared_ptr<const OpenFile> file;
    std::list<uint32_t>::iterator lru_position;
  };
  mutable absl::flat_hash_map<uint32_t, Entry> open_ ABSL_GUARDED_BY(mu_);
  mutable uint64_t opens_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace batchd::server

#endif  // BATCHD_SERVER_DATASET_SHARD_FILES_H_
