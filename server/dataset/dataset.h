// Dataset: an immutable, sorted index of a dataset's samples (path + label,
// or shard member + label), loaded once at daemon start. Datasets are registered by name in the
// daemon's configuration (proto/batchd/v1/config.proto, protobuf text format)
// and/or `--dataset name=path` flags; clients only ever name them.
//
// Thread-safe after construction (immutable).
#ifndef BATCHD_SERVER_DATASET_DATASET_H_
#define BATCHD_SERVER_DATASET_DATASET_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "batchd/v1/config.pb.h"

namespace batchd::server {

class ShardFiles;

// A whole file's bytes. Its buffer is not zero-filled before the read, as a
// std::string's would be: the fill is wasted work on the sample read path
// (small: BM_ReadSampleFile, 18.5 against 17.7-18.3 us per 125 KB file).
// Read-only once read; copies share the bytes (the read cache hands the
// same bytes to every reader).
class FileBytes {
 public:
  FileBytes() = default;
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

struct Sample {
  // A file: absolute or relative to the daemon's working directory. A tar
  // shard's sample: the image member's path inside the shard.
  std::string path;
  int32_t label = 0;
  // TAR_SHARDS: the shard's number (shard_files()->path(shard)) and the member's
  // byte range in it. kNotInShard for a file.
  uint32_t shard = kNotInShard;
  uint64_t offset = 0;
  uint64_t size = 0;
};

// How a TAR_SHARDS dataset's index was built (all zero for other formats).
struct IndexStats {
  uint64_t shards = 0;
  uint64_t shards_from_cache = 0;  // reused from the sidecar index
  uint64_t damaged_shards = 0;     // indexed up to the damage
  // Keys without an image, without a class or with a bad class (or one
  // beyond classes.txt).
  uint64_t skipped_samples = 0;
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
  static absl::StatusOr<std::shared_ptr<const Dataset>> LoadTarShards(
      const batchd::v1::DatasetConfig& config);

  const std::string& name() const { return name_; }
  uint64_t size() const { return samples_.size(); }
  const Sample& sample(uint64_t index) const { return samples_[index]; }
  const std::vector<std::string>& class_names() const { return class_names_; }
  const IndexStats& index_stats() const { return index_stats_; }
  // The shard files of a TAR_SHARDS dataset (nullptr otherwise).
  const ShardFiles* shard_files() const { return shards_.get(); }
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
  // ReadFileBytes / ShardFiles::Read. Thread-safe; blocks on I/O.
  // REQUIRES: index < size().
  absl::StatusOr<FileBytes> ReadSample(uint64_t index) const;

  // `shards`: for samples with a shard number; nullptr when there are none.
  Dataset(std::string name, std::vector<Sample> samples,
          std::vector<std::string> class_names,
          std::shared_ptr<const ShardFiles> shards = nullptr,
          IndexStats index_stats = {});
  ~Dataset();

 private:
  const std::string name_;
  const std::vector<Sample> samples_;
  const std::vector<std::string> class_names_;
  const std::shared_ptr<const ShardFiles> shards_;
  const IndexStats index_stats_;
  const std::shared_ptr<const std::vector<uint64_t>> shard_samples_;
};

// Loads one dataset described by `config` (format inferred from the path when
// unspecified). Validates the name (letters, digits, '-', '_', '.').
absl::StatusOr<std::shared_ptr<const Dataset>> LoadDataset(
    const batchd::v1::DatasetConfig& config);

// Loads every dataset of `config`, in order. INVALID_ARGUMENT when two share a
// name (checked before anything is loaded); otherwise the first error of
// LoadDataset. An empty config gives an empty vector.
absl::StatusOr<std::vector<std::shared_ptr<const Dataset>>> LoadDatasets(
    const batchd::v1::DaemonConfig& config);

// Parses a config file in protobuf text format (DaemonConfig). Errors name
// the file and the parser's line/column.
absl::StatusOr<batchd::v1::DaemonConfig> ReadConfigFile(
    const std::string& path);

// Parses a `--dataset` flag value, "name=path".
absl::StatusOr<batchd::v1::DatasetConfig> ParseDatasetFlag(
    absl::string_view flag);

// Reads a whole file. NOT_FOUND (ENOENT), PERMISSION_DENIED (EACCES) or
// UNAVAILABLE (other errors), with the path and errno text; INVALID_ARGUMENT
// for something that is not a regular file (a directory, a FIFO: never
// blocks on one) or is larger than 4 GiB.
absl::StatusOr<FileBytes> ReadFileBytes(const std::string& path);

}  // namespace batchd::server

#endif  // BATCHD_SERVER_DATASET_DATASET_H_
