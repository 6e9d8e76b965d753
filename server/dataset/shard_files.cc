#include "server/dataset/shard_files.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/errno_status.h"
#include "common/file_io.h"
#include "common/status_macros.h"

namespace batchd::server {
namespace {

constexpr uint64_t kMaxMemberBytes = uint64_t{4} << 30;

}  // namespace

// Closes the file when the last reader or the table lets go of it.
struct ShardFiles::OpenFile {
  explicit OpenFile(int fd_in) : fd(fd_in) {}
  ~OpenFile() { ::close(fd); }
  const int fd;
};

ShardFiles::ShardFiles(std::vector<std::string> paths, size_t max_open)
    : paths_(std::move(paths)), max_open_(std::max<size_t>(max_open, 1)) {}

ShardFiles::~ShardFiles() = default;

size_t ShardFiles::open_now() const {
  absl::MutexLock lock(&mu_);
  return open_.size();
}

uint64_t ShardFiles::opens() const {
  absl::MutexLock lock(&mu_);
  return opens_;
}

absl::StatusOr<std::shared_ptr<const ShardFiles::OpenFile>>
ShardFiles::Acquire(uint32_t shard) const {
  {
    absl::MutexLock lock(&mu_);
    auto it = open_.find(shard);
    if (it != open_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.lru_position);
      return it->second.file;
    }
  }
  // Open outside the lock: other shards' reads go on meanwhile.
  const std::string& path = paths_[shard];
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return common::ErrnoStatus(errno, absl::StrCat("open shard '", path, "'"));
  }
  auto file = std::make_shared<const OpenFile>(fd);
  // Evicted files are released after the lock (their close is I/O).
  std::vector<std::shared_ptr<const OpenFile>> evicted;
  absl::MutexLock lock(&mu_);
  ++opens_;
  auto it = open_.find(shard);
  if (it != open_.end()) {
    // Another thread opened it meanwhile: use theirs, close ours.
    evicted.push_back(std::move(file));
    lru_.splice(lru_.begin(), lru_, it->second.lru_position);
    return it->second.file;
  }
  lru_.push_front(shard);
  open_[shard] = Entry{file, lru_.begin()};
  while (open_.size() > max_open_) {
    const uint32_t oldest = lru_.back();
    lru_.pop_back();
    auto old = open_.find(oldest);
    evicted.push_back(std::move(old->second.file));
    open_.erase(old);
  }
  return file;
}

absl::StatusOr<FileBytes> ShardFiles::Read(uint32_t shard, uint64_t offset,
                                           uint64_t size,
                                           absl::string_view member) const {
  if (shard >= paths_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard ", shard, " of ", paths_.size()));
  }
  if (size > kMaxMemberBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("member '", member, "' of '", paths_[shard], "' is ",
                     size, " bytes, more than the limit of ", kMaxMemberBytes));
  }
  absl::StatusOr<std::shared_ptr<const OpenFile>> file = Acquire(shard);
  if (!file.ok()) return file.status();
  FileBytes bytes;
  bytes.data_.reset(new uint8_t[std::max<uint64_t>(size, 1)]);
  auto what = [&] {
    return absl::StrCat("read member '", member, "' of shard '", paths_[shard],
                        "'");
  };
  ASSIGN_OR_RETURN(const size_t done,
                   common::ReadFileRange((*file)->fd, offset, size,
                                         bytes.data_.get(), what));
  if (done < size) {
    return absl::UnavailableError(
        absl::StrCat("shard '", paths_[shard], "' ends inside member '", member,
                     "' (read ", done, " of ", size, " bytes at offset ",
                     offset, "): it changed since it was indexed"));
  }
  bytes.size_ = done;
  return bytes;
}

}  // namespace batchd::server
