// Dataset: an immutable, sorted index of a dataset's samples (path + label),
// loaded once at daemon start. Datasets are registered by name in the
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

struct Sample {
  std::string path;  // absolute or relative to the daemon's working directory
  int32_t label = 0;
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

  const std::string& name() const { return name_; }
  uint64_t size() const { return samples_.size(); }
  const Sample& sample(uint64_t index) const { return samples_[index]; }
  const std::vector<std::string>& class_names() const { return class_names_; }

  Dataset(std::string name, std::vector<Sample> samples,
          std::vector<std::string> class_names)
      : name_(std::move(name)),
        samples_(std::move(samples)),
        class_names_(std::move(class_names)) {}

 private:
  const std::string name_;
  const std::vector<Sample> samples_;
  const std::vector<std::string> class_names_;
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

// A whole file's bytes. Its buffer is not zero-filled before the read, as a
// std::string's would be: the fill is wasted work on the sample read path
// (small: BM_ReadSampleFile, 18.5 against 17.7-18.3 us per 125 KB file).
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
  std::unique_ptr<uint8_t[]> data_;
  size_t size_ = 0;
};

// Reads a whole file. NOT_FOUND (ENOENT), PERMISSION_DENIED (EACCES) or
// UNAVAILABLE (other errors), with the path and errno text; INVALID_ARGUMENT
// for something that is not a regular file (a directory, a FIFO: never
// blocks on one) or is larger than 4 GiB.
absl::StatusOr<FileBytes> ReadFileBytes(const std::string& path);

}  // namespace batchd::server

#endif  // BATCHD_SERVER_DATASET_DATASET_H_
