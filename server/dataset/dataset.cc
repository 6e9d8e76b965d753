// Dataset's own methods (its index, sample and member reads, the shard
// cache's hints) and ReadFileBytes. The loaders, from a config to a
// Dataset, are in dataset_loaders.cc and tar_shards.cc.
#include "server/dataset/dataset.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/errno_status.h"
#include "common/file_io.h"
#include "common/status_macros.h"
#include "server/dataset/shard_index.h"
#include "server/dataset/shard_source.h"

namespace batchd::server {
namespace {

constexpr uint64_t kMaxFileBytes = uint64_t{4} << 30;

// Dataset::shard_samples() of `samples`.
std::vector<uint64_t> ShardRuns(const std::vector<Sample>& samples) {
  std::vector<uint64_t> runs;
  bool sharded = false;
  for (size_t i = 0; i < samples.size(); ++i) {
    sharded |= samples[i].shard != kNotInShard;
    if (i == 0 || samples[i].shard != samples[i - 1].shard) {
      runs.push_back(0);
    }
    ++runs.back();
  }
  if (!sharded) runs.clear();
  return runs;
}

}  // namespace

Dataset::Dataset(std::string name, std::vector<Sample> samples,
                 std::vector<std::string> class_names,
                 std::shared_ptr<const ShardSource> shards,
                 IndexStats index_stats, SampleMembers members)
    : name_(std::move(name)),
      samples_(std::move(samples)),
      class_names_(std::move(class_names)),
      shards_(std::move(shards)),
      index_stats_(index_stats),
      members_(std::move(members)),
      shard_samples_(std::make_shared<const std::vector<uint64_t>>(
          ShardRuns(samples_))) {
  if (shards_ == nullptr || !shards_->prefetches()) return;
  demand_ = std::make_shared<ShardDemand>([this](uint64_t index) {
    // A sample's bytes are its image and its other members (a plan's
    // fields are read from them): the forecast weighs what may be read.
    const Sample& sample = samples_[index];
    uint64_t bytes = sample.size;
    for (uint64_t i = sample.first_member;
         i < sample.first_member + sample.member_count; ++i) {
      bytes += members_.members[i].size;
    }
    return SampleLocation{sample.shard, bytes};
  });
  shards_->AttachDemand(demand_);
}

Dataset::~Dataset() {
  if (demand_ != nullptr) shards_->DetachDemand(demand_.get());
}

void Dataset::PublishReads(const std::string& reader,
                           const common::ShardSpec& spec,
                           std::shared_ptr<const std::vector<uint64_t>> order,
                           uint64_t next_batch) const {
  if (demand_ != nullptr) {
    demand_->Publish(reader, spec, std::move(order), next_batch);
  }
}

void Dataset::PublishStart(const std::string& reader,
                           const common::ShardSpec& spec,
                           std::shared_ptr<const std::vector<uint64_t>> order,
                           uint64_t first_batch) const {
  if (demand_ != nullptr) {
    demand_->PublishStart(reader, spec, std::move(order), first_batch);
  }
}

absl::StatusOr<FileBytes> Dataset::ReadSample(uint64_t index) const {
  const Sample& sample = samples_[index];
  if (!sample.has_image) {
    return absl::NotFoundError(absl::StrCat(
        "key '", absl::CHexEscape(sample.path),
        "' has no image member (DatasetConfig.image_extensions)"));
  }
  if (sample.shard == kNotInShard || shards_ == nullptr) {
    return ReadFileBytes(sample.path);
  }
  return shards_->Read(sample.shard, sample.offset, sample.size, sample.path);
}

int Dataset::ExtensionNumber(absl::string_view extension) const {
  for (size_t i = 0; i < members_.extensions.size(); ++i) {
    if (members_.extensions[i] == extension) return static_cast<int>(i);
  }
  return -1;
}

const SampleMember* Dataset::FindMember(uint64_t index, int extension) const {
  if (extension < 0) return nullptr;
  const Sample& sample = samples_[index];
  for (uint64_t i = sample.first_member;
       i < sample.first_member + sample.member_count; ++i) {
    if (members_.members[i].extension == static_cast<uint32_t>(extension)) {
      return &members_.members[i];
    }
  }
  return nullptr;
}

absl::StatusOr<FileBytes> Dataset::ReadMember(uint64_t index,
                                              const SampleMember& member,
                                              uint64_t max_bytes) const {
  const Sample& sample = samples_[index];
  if (shards_ == nullptr || sample.shard == kNotInShard) {
    return absl::FailedPreconditionError(
        absl::StrCat("sample ", index, " of '", name_, "' is not in a shard"));
  }
  const std::string name =
      absl::StrCat(Key(index), ".", members_.extensions[member.extension]);
  return shards_->Read(sample.shard, member.offset,
                       std::min(member.size, max_bytes), name);
}

std::string Dataset::Key(uint64_t index) const {
  const Sample& sample = samples_[index];
  if (sample.shard == kNotInShard) {
    return sample.path.substr(std::min<size_t>(sample.key_start,
                                               sample.path.size()));
  }
  std::string key, extension;
  if (!SplitMemberName(sample.path, &key, &extension)) return sample.path;
  return key;
}

bool Dataset::remote() const {
  return shards_ != nullptr && shards_->remote();
}

bool Dataset::prefetches() const {
  return shards_ != nullptr && shards_->prefetches();
}

void Dataset::Prefetch(absl::Span<const uint64_t> indices) const {
  if (shards_ == nullptr) return;
  uint32_t last = kNotInShard;
  for (uint64_t index : indices) {
    if (index >= samples_.size()) continue;
    const uint32_t shard = samples_[index].shard;
    // Consecutive samples mostly share a shard; the cache ignores repeats.
    if (shard == kNotInShard || shard == last) continue;
    last = shard;
    shards_->Prefetch(shard);
  }
}

void Dataset::PrefetchMembers(absl::Span<const uint64_t> indices) const {
  if (shards_ == nullptr) return;
  // By shard, in the order of first need: the image members, in order.
  std::vector<std::pair<uint32_t, std::vector<MemberRange>>> by_shard;
  absl::flat_hash_map<uint32_t, size_t> position;
  for (uint64_t index : indices) {
    if (index >= samples_.size()) continue;
    const Sample& sample = samples_[index];
    if (sample.shard == kNotInShard) continue;
    auto [it, added] = position.try_emplace(sample.shard, by_shard.size());
    if (added) by_shard.emplace_back(sample.shard, std::vector<MemberRange>());
    by_shard[it->second].second.push_back({sample.offset, sample.size});
  }
  for (auto& [shard, members] : by_shard) {
    shards_->PrefetchMembers(shard, std::move(members));
  }
}

absl::StatusOr<FileBytes> ReadFileBytes(const std::string& path) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer. It changes nothing
  // for regular files.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    return common::ErrnoStatus(errno, absl::StrCat("open '", path, "'"));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};

  struct stat st;
  if (::fstat(fd, &st) != 0) {
    return common::ErrnoStatus(errno, absl::StrCat("fstat '", path, "'"));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", path, "' is not a regular file",
        S_ISDIR(st.st_mode) ? " (it is a directory)" : ""));
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size > kMaxFileBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", path, "' is ", size, " bytes, more than the limit of ",
        kMaxFileBytes));
  }
  FileBytes file;
  file.data_.reset(new uint8_t[std::max<uint64_t>(size, 1)]);
  auto what = [&] { return absl::StrCat("read '", path, "'"); };
  // Fewer bytes than fstat said when the file shrank since.
  ASSIGN_OR_RETURN(file.size_, common::ReadFileRange(fd, /*offset=*/0, size,
                                                     file.data_.get(), what));
  return file;
}

}  // namespace batchd::server
