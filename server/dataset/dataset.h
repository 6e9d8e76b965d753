// Dataset: an immutable, sorted index of a dataset's samples (path + label,
// or shard member + label), loaded once at daemon start. Datasets are registered by name in the
// daemon's configuration (proto/batchd/v1/config.proto, protobuf text format)
// and/or `--dataset name=path` flags; clients only ever name them.
//
// Thread-safe after construction (immutable).
#ifndef BATCHD_SERVER_DATASET_DATASET_H_
#define BATCHD_SERVER_DATASET_DATASET_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "batchd/v1/config.pb.h"
#include "common/sampler.h"
#include "server/storage/object_store.h"
#include "server/storage/shard_demand.h"

namespace batchd::server {

class ShardFiles;
class ShardSource;
class ShardCache;
class ObjectStore;
class ObjectStoreCounters;
struct ObjectInfo;

// A whole file's bytes. Its buffer is not zero-filled before the read, as a
// std::string's would be: the fill is wasted work on the sample read path
// (small: BM_ReadSampleFile, 18.5 against 17.7-18.3 us per 125 KB file).
// Read-only once read; copies share the bytes (the read cache hands the
// same bytes to every reader).
class FileBytes {
 public:
  FileBytes() = default;
  // Takes `data`, `size` bytes already written.
  FileBytes(std::shared_ptr<uint8_t[]> data, size_t size)
      : data_(std::move(data)), size_(size) {}
  absl::Span<const uint8_t> bytes() const { return {data_.get(), size_}; }
  absl::string_view text() const {
    return {reinterpret_cast<const char*>(data_.get()), size_};
  }
  size_t size() const { return size_; }

 private:
  friend absl::StatusOr<FileBytes> ReadFileBytes(const std::string& path);
  friend class ShardFiles;
  std::shared_ptr<uint8_t[]> data_;
  size_t size_ = 0;
};

inline constexpr uint32_t kNotInShard = ~uint32_t{0};

// How remote TAR_SHARDS datasets are read (local datasets ignore it).
struct RemoteOptions {
  // Shards are read through it when set; by member range reads otherwise.
  std::shared_ptr<ShardCache> cache;
  // Where the remote index sidecar is kept ("" with no index_cache in the
  // config: shards are re-indexed at every start).
  std::string cache_dir;
  // Every store's ReadRange calls are counted here when set (metrics).
  std::shared_ptr<ObjectStoreCounters> counters;
  int connections = 32;    // store requests in flight at once
  int index_threads = 8;   // shards indexed at once
  // More shards (or listed keys) than this refuses the dataset
  // (--max-shards).
  uint64_t max_shards = kDefaultMaxShards;
  RemoteRedirects redirects = RemoteRedirects::kNone;  // --remote-redirects
  // What one request weighs against a byte in the shard cache's
  // whole-or-ranges choice (--s3-request-cost-bytes,
  // --http-request-cost-bytes).
  uint64_t s3_request_cost_bytes = 64 << 10;
  uint64_t http_request_cost_bytes = 16 << 10;
  // The slowest a store request may be (ObjectStoreOptions'
  // low_speed_*; --remote-low-speed-bytes-per-s, --remote-low-speed-seconds).
  int64_t low_speed_bytes_per_s = kDefaultLowSpeedBytesPerSecond;
  absl::Duration low_speed_time = kDefaultLowSpeedTime;
  // Set on SIGTERM/SIGINT during start-up: the load ends with CANCELLED
  // (ObjectStoreOptions::cancelled).
  std::shared_ptr<const std::atomic<bool>> cancelled;
  // Tests: the store and the shard list to use instead of MakeObjectStore
  // and ResolveShardObjects.
  std::function<absl::StatusOr<std::shared_ptr<ObjectStore>>(
      const batchd::v1::DatasetConfig&)>
      make_store;
  std::function<absl::StatusOr<std::vector<ObjectInfo>>(
      const batchd::v1::DatasetConfig&, ObjectStore&)>
      resolve_shards;
};

struct Sample {
  // A file: absolute or relative to the daemon's working directory. A tar
  // shard's sample: the image member's path inside the shard.
  std::string path;
  int32_t label = 0;
  // TAR_SHARDS: the shard's number (shards()->name(shard)) and the member's
  // byte range in it. kNotInShard for a file.
  uint32_t shard = kNotInShard;
  uint64_t offset = 0;
  uint64_t size = 0;
  // A file: where its path relative to the dataset's root starts in
  // `path` (its __key__). Unused for a tar sample.
  uint32_t key_start = 0;
  // TAR_SHARDS: the sample's other members (txt, json, ...), entries
  // [first_member, first_member + member_count) of SampleMembers::members.
  uint64_t first_member = 0;
  uint32_t member_count = 0;
  // False for a tar shard key with a class but no image member (`path` is
  // then the key): ReadSample fails with NOT_FOUND, and the daemon
  // substitutes it (NO_IMAGE_MEMBER).
  bool has_image = true;
};

// A tar sample's member beside its image and cls (a plan's field): its
// extension, by number in SampleMembers::extensions, and its byte range in
// the sample's shard.
struct SampleMember {
  uint32_t extension = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
};

// Every sample's other members, as a Dataset keeps them: extensions are
// stored once each, so a member costs 24 bytes whatever its name.
struct SampleMembers {
  std::vector<std::string> extensions;
  std::vector<SampleMember> members;
};

// How a TAR_SHARDS dataset's index was built (all zero for other formats).
struct IndexStats {
  uint64_t shards = 0;
  uint64_t shards_from_cache = 0;  // reused from the sidecar index
  uint64_t damaged_shards = 0;     // indexed up to the damage
  // Keys without an image, without a class or with a bad class (or one
  // beyond classes.txt).
  uint64_t skipped_samples = 0;
  // Keys with a class but no image member: samples all the same,
  // substituted when read.
  uint64_t no_image_samples = 0;
  bool cache_written = false;  // the sidecar was (re)written at this load
};

class Dataset {
 public:
  // The largest label a list file may use (class_names() has one entry per
  // label up to the largest, so this bounds its memory).
  static constexpr int32_t kMaxListFileLabel = (1 << 20) - 1;

  // ImageFolder: root/<class>/<file>. Classes are the sorted names of root's
  // subdirectories (label = position); samples are the files in them with an
  // image extension (.jpg .jpeg .png .gif .bmp .ppm .pgm .tif .tiff .webp,
  // any case; hidden files skipped), sorted by (class, file name). Non-JPEG
  // images stay in the index and are substituted when read.
  // As torchvision, class directories are searched recursively (symlinks
  // followed, each directory visited once) and a class's samples are ordered
  // by (directory path, file name). Unlike torchvision, hidden directories
  // (".ipynb_checkpoints") are not classes, and non-regular files (FIFOs,
  // broken symlinks) are skipped.
  // Errors: NOT_FOUND / INVALID_ARGUMENT naming the path and the problem
  // (missing, not a directory, no classes, no images).
  static absl::StatusOr<std::shared_ptr<const Dataset>> LoadImageFolder(
      std::string name, const std::string& root);

  // List file: one "<relative path> <label>" per line (whitespace
  // separated; the path may not contain spaces; blank lines and lines
  // starting with '#' are skipped). Paths are relative to `root` (default:
  // the list file's directory). Samples are sorted by path (then label) for a
  // stable order. Class names are "0".."max label"; labels are at most
  // kMaxListFileLabel.
  // Errors name the file and line number, e.g.
  //   "train.txt:12: label 'x' is not a non-negative integer".
  static absl::StatusOr<std::shared_ptr<const Dataset>> LoadListFile(
      std::string name, const std::string& list_path, std::string root);

  // WebDataset tar shards (config.proto, TAR_SHARDS): the index is built
  // from the shards' headers and "cls" members (shard_index.h), cached in a
  // sidecar file (index_cache.h). Damaged shards are indexed up to the
  // damage and skipped keys counted; both are logged to stderr and counted
  // in index_stats(). Errors: NOT_FOUND for a missing shard or an empty
  // glob, INVALID_ARGUMENT for no shards or no samples or a bad
  // classes.txt, the read's error for an unreadable shard.
  // A path or shards that are remote URLs (s3://, http://, https://) are
  // read through an ObjectStore: shards are indexed with ranged reads of
  // their headers (never downloaded whole), several at once, the sidecar
  // kept in `remote.cache_dir` keyed by each shard's ETag and size; samples
  // are read through `remote.cache` or by member range reads.
  static absl::StatusOr<std::shared_ptr<const Dataset>> LoadTarShards(
      const batchd::v1::DatasetConfig& config,
      const RemoteOptions& remote);
  static absl::StatusOr<std::shared_ptr<const Dataset>> LoadTarShards(
      const batchd::v1::DatasetConfig& config);

  const std::string& name() const { return name_; }
  uint64_t size() const { return samples_.size(); }
  const Sample& sample(uint64_t index) const { return samples_[index]; }
  const std::vector<std::string>& class_names() const { return class_names_; }
  const IndexStats& index_stats() const { return index_stats_; }
  // Where a TAR_SHARDS dataset's shards are read (nullptr otherwise).
  const ShardSource* shards() const { return shards_.get(); }
  // The shard layout in sample order: the length of each run of
  // consecutive samples from one shard (samples are numbered shard by
  // shard, then member by member, so one run per shard that has samples).
  // Sums to size(). Empty when no sample is in a shard. What the
  // shard-aware shuffle permutes (common::ShardWindowOrder).
  const std::shared_ptr<const std::vector<uint64_t>>& shard_samples() const {
    return shard_samples_;
  }

  // The bytes of sample `index`: the whole file, or its member's byte range
  // read from its shard (no open() unless the shard was closed). Errors as
  // ReadFileBytes / ShardSource::Read. Thread-safe; blocks on I/O.
  // REQUIRES: index < size().
  absl::StatusOr<FileBytes> ReadSample(uint64_t index) const;

  // A hint that samples `indices` will be read soon: a remote dataset queues
  // background downloads of their shards (bounded by its shard cache); a
  // no-op otherwise. Never blocks. Indices >= size() are ignored.
  void Prefetch(absl::Span<const uint64_t> indices) const;
  // A hint that the image members of samples `indices` (a batch accepted
  // for building) will be read in this order: a remote dataset fetches
  // them ahead, many at once, where its shard cache reads their shards by
  // member ranges (ShardCache::PrefetchMembers). Never blocks.
  void PrefetchMembers(absl::Span<const uint64_t> indices) const;
  // Whether Prefetch and PrefetchMembers do anything (a remote dataset with a shard cache).
  bool prefetches() const;
  // Tells the shard cache what `reader` (one rank of one plan) reads next:
  // batches `next_batch`, next_batch + 1, ... of `spec`'s shard of the
  // epoch order `order` (ShardDemand::Publish). A no-op unless
  // prefetches().
  void PublishReads(const std::string& reader, const common::ShardSpec& spec,
                    std::shared_ptr<const std::vector<uint64_t>> order,
                    uint64_t next_batch) const;
  // Tells the shard cache that `reader` starts on `order` at `first_batch`
  // (ShardDemand::PublishStart). A no-op unless prefetches().
  void PublishStart(const std::string& reader, const common::ShardSpec& spec,
                    std::shared_ptr<const std::vector<uint64_t>> order,
                    uint64_t first_batch) const;
  // Whether samples are read from an object store (remote TAR_SHARDS).
  bool remote() const;

  // Whether samples carry class labels; false for a TAR_SHARDS dataset
  // whose keys have no "cls" member (every label is kNoLabel).
  bool labelled() const { return !class_names_.empty(); }
  // The number of member extension `extension` (lowercase, "txt"), or -1
  // when no sample has such a member.
  int ExtensionNumber(absl::string_view extension) const;
  // Sample `index`'s member of extension number `extension`, or nullptr
  // when it has none. REQUIRES: index < size().
  const SampleMember* FindMember(uint64_t index, int extension) const;
  // The first `max_bytes` bytes (or all) of sample `index`'s `member`,
  // read from its shard. Errors as ShardSource::Read.
  absl::StatusOr<FileBytes> ReadMember(uint64_t index,
                                       const SampleMember& member,
                                       uint64_t max_bytes) const;
  // Sample `index`'s __key__: WebDataset's key of a tar sample (the image
  // member's path without its extensions), a file's path relative to the
  // dataset's root. REQUIRES: index < size().
  std::string Key(uint64_t index) const;

  // `shards`: for samples with a shard number; nullptr when there are none.
  // `members`: the samples' other members (Sample::first_member).
  Dataset(std::string name, std::vector<Sample> samples,
          std::vector<std::string> class_names,
          std::shared_ptr<const ShardSource> shards = nullptr,
          IndexStats index_stats = {}, SampleMembers members = {});
  ~Dataset();

 private:
  const std::string name_;
  const std::vector<Sample> samples_;
  const std::vector<std::string> class_names_;
  const std::shared_ptr<const ShardSource> shards_;
  const IndexStats index_stats_;
  const SampleMembers members_;
  const std::shared_ptr<const std::vector<uint64_t>> shard_samples_;
  // The plans' upcoming reads of a remote dataset with a shard cache
  // (registered with the cache through shards_); nullptr otherwise.
  std::shared_ptr<ShardDemand> demand_;
};

// Loads one dataset described by `config` (format inferred from the path when
// unspecified). Validates the name (letters, digits, '-', '_', '.').
absl::StatusOr<std::shared_ptr<const Dataset>> LoadDataset(
    const batchd::v1::DatasetConfig& config,
    const RemoteOptions& remote = {});

// Loads every dataset of `config`, in order. INVALID_ARGUMENT when two share a
// name (checked before anything is loaded); otherwise the first error of
// LoadDataset. An empty config gives an empty vector.
absl::StatusOr<std::vector<std::shared_ptr<const Dataset>>> LoadDatasets(
    const batchd::v1::DaemonConfig& config,
    const RemoteOptions& remote = {});

// Parses a config file in protobuf text format (DaemonConfig). Errors name
// the file and the parser's line/column.
absl::StatusOr<batchd::v1::DaemonConfig> ReadConfigFile(
    const std::string& path);

// Parses a `--dataset` flag value, "name=path".
absl::StatusOr<batchd::v1::DatasetConfig> ParseDatasetFlag(
    absl::string_view flag);

// Reads a whole file. A failed open, fstat or read as common::ErrnoStatus
// (NOT_FOUND for ENOENT, PERMISSION_DENIED for EACCES, UNAVAILABLE for EIO,
// ...), with the path and errno text; INVALID_ARGUMENT for something that
// is not a regular file (a directory, a FIFO: never blocks on one) or is
// larger than 4 GiB.
absl::StatusOr<FileBytes> ReadFileBytes(const std::string& path);

}  // namespace batchd::server

#endif  // BATCHD_SERVER_DATASET_DATASET_H_
