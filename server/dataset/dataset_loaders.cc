// Dataset's loaders: a dataset's config (or --dataset flag) to its
// format, inferred from the path when unspecified, and the local file
// formats' indexes, ImageFolder and list file. TAR_SHARDS datasets are
// loaded in tar_shards.cc (local and remote); the Dataset's own methods
// and sample reads are in dataset.cc.
#include "server/dataset/dataset.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <set>
#include <system_error>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/errno_status.h"
#include "common/file_io.h"
#include "common/status_macros.h"
#include "server/storage/object_url.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"

namespace batchd::server {
namespace {

namespace fs = std::filesystem;

constexpr size_t kMaxNameLength = 128;

absl::Status FilesystemStatus(const std::error_code& ec,
                              absl::string_view message) {
  if (ec.category() == std::system_category() ||
      ec.category() == std::generic_category()) {
    return common::ErrnoStatus(ec.value(), message);
  }
  return absl::UnavailableError(absl::StrCat(message, ": ", ec.message()));
}

// Returns `status` with `prefix` in front of its message, same code.
absl::Status Prefixed(const absl::Status& status, absl::string_view prefix) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(prefix, status.message()));
}

// INVALID_ARGUMENT for a URL ("scheme://...") other than s3, http or
// https; local paths (even with a ':') pass.
absl::Status CheckScheme(const std::string& location,
                         absl::string_view prefix) {
  const std::string scheme = UrlScheme(location);
  if (scheme.empty() || IsRemoteUrl(location) ||
      location.compare(scheme.size(), 3, "://") != 0) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      prefix, "\"", absl::CHexEscape(location.substr(0, 200)),
      "\" has the scheme \"", absl::CHexEscape(scheme),
      "\", which is refused; datasets are local paths or s3://, http:// and "
      "https:// URLs"));
}

absl::Status ValidateName(absl::string_view name) {
  if (name.empty()) {
    return absl::InvalidArgumentError("dataset name is empty");
  }
  if (name.size() > kMaxNameLength) {
    return absl::InvalidArgumentError(
        absl::StrCat("dataset name '", name.substr(0, 32), "...' is longer than ",
                     kMaxNameLength, " characters"));
  }
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-' &&
        c != '_' && c != '.') {
      return absl::InvalidArgumentError(absl::StrCat(
          "dataset name '", absl::CHexEscape(name),
          "' may only contain letters, digits, '-', '_' and '.'"));
    }
  }
  return absl::OkStatus();
}

bool IsHidden(const std::string& file_name) {
  return !file_name.empty() && file_name[0] == '.';
}

bool HasImageExtension(const std::string& file_name) {
  static const char* const kExtensions[] = {
      ".jpg", ".jpeg", ".png", ".gif", ".bmp", ".ppm",
      ".pgm", ".tif",  ".tiff", ".webp"};
  const size_t dot = file_name.rfind('.');
  if (dot == std::string::npos) return false;
  const std::string extension = absl::AsciiStrToLower(file_name.substr(dot));
  for (const char* known : kExtensions) {
    if (extension == known) return true;
  }
  return false;
}

// A directory's identity, to visit each directory once when symlinks make
// cycles.
using DirectoryId = std::pair<dev_t, ino_t>;

struct ImageFile {
  std::string directory;  // as os.walk's dirpath
  std::string file_name;
};

// Collects the image files under `directory`, recursively, following
// symlinks, skipping hidden entries and directories already in `visited`.
absl::Status CollectImages(const fs::path& directory,
                           std::set<DirectoryId>* visited,
                           std::vector<ImageFile>* images) {
  struct stat st;
  if (::stat(directory.c_str(), &st) != 0) {
    return common::ErrnoStatus(errno,
                               absl::StrCat("stat '", directory.string(), "'"));
  }
  if (!visited->insert({st.st_dev, st.st_ino}).second) {
    return absl::OkStatus();  // a symlink cycle or a second link to it
  }
  std::vector<fs::path> subdirectories;
  std::error_code ec;
  for (fs::directory_iterator it(directory, ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (IsHidden(name)) continue;
    std::error_code type_ec;  // a broken symlink fails here: skip it
    if (it->is_directory(type_ec)) {
      subdirectories.push_back(it->path());
    } else if (!type_ec && it->is_regular_file(type_ec) && !type_ec &&
               HasImageExtension(name)) {
      images->push_back({directory.string(), name});
    }
  }
  if (ec) {
    return FilesystemStatus(
        ec, absl::StrCat("listing '", directory.string(), "'"));
  }
  for (const fs::path& subdirectory : subdirectories) {
    RETURN_IF_ERROR(CollectImages(subdirectory, visited, images));
  }
  return absl::OkStatus();
}

bool IsGlob(const std::string& path) {
  return path.find_first_of("*?[") != std::string::npos;
}

bool EndsWithTar(absl::string_view path) {
  return path.size() > 4 &&
         absl::AsciiStrToLower(path.substr(path.size() - 4)) == ".tar";
}

// A directory of shards: it holds *.tar files and no (non-hidden)
// subdirectories, which an ImageFolder's classes would be.
bool IsShardDirectory(const std::string& path) {
  bool any_tar = false;
  std::error_code ec;
  for (fs::directory_iterator it(path, ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (IsHidden(name)) continue;
    std::error_code type_ec;
    if (it->is_directory(type_ec)) return false;
    if (EndsWithTar(name) && it->is_regular_file(type_ec)) any_tar = true;
  }
  return !ec && any_tar;
}

// A shard (*.tar), or a text file whose first entry names one.
bool IsShardFile(const std::string& path) {
  if (EndsWithTar(path)) return true;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return false;
  char buffer[4096];
  const absl::StatusOr<size_t> n = common::ReadFileRange(
      fd, /*offset=*/0, sizeof(buffer), buffer, [&] { return path; });
  ::close(fd);
  if (!n.ok() || *n == 0) return false;
  for (absl::string_view line :
       absl::StrSplit(absl::string_view(buffer, *n), '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    // A list file's line has two fields, "<path> <label>".
    return line.find_first_of(" \t") == absl::string_view::npos &&
           EndsWithTar(line);
  }
  return false;
}

// Gathers TextFormat parser errors with 1-based positions.
class ConfigErrorCollector : public google::protobuf::io::ErrorCollector {
 public:
  explicit ConfigErrorCollector(std::string path) : path_(std::move(path)) {}

  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    errors_.push_back(
        absl::StrCat(path_, ":", line + 1, ":", column + 1, ": ", message));
  }

  const std::vector<std::string>& errors() const { return errors_; }

 private:
  const std::string path_;
  std::vector<std::string> errors_;
};

// Where the path relative to `root` starts in `path`, a file under it.
uint32_t KeyStart(const std::string& root, const std::string& path) {
  size_t start = root.size();
  while (start < path.size() && path[start] == '/') ++start;
  return static_cast<uint32_t>(std::min(start, path.size()));
}

}  // namespace

absl::StatusOr<std::shared_ptr<const Dataset>> Dataset::LoadImageFolder(
    std::string name, const std::string& root) {
  if (root.empty()) {
    return absl::InvalidArgumentError("ImageFolder root is empty");
  }
  struct stat st;
  if (::stat(root.c_str(), &st) != 0) {
    const int error = errno;
    if (error == ENOENT) {
      return absl::NotFoundError(
          absl::StrCat("ImageFolder root '", root, "' does not exist"));
    }
    return common::ErrnoStatus(error,
                               absl::StrCat("ImageFolder root '", root, "'"));
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ImageFolder root '", root, "' is not a directory"));
  }

  // Classes: the sorted names of root's (non-hidden) subdirectories.
  std::vector<std::string> class_names;
  std::error_code ec;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::string entry_name = it->path().filename().string();
    std::error_code type_ec;
    if (!IsHidden(entry_name) && it->is_directory(type_ec)) {
      class_names.push_back(entry_name);
    }
  }
  if (ec) {
    return FilesystemStatus(ec, absl::StrCat("listing ImageFolder root '",
                                             root, "'"));
  }
  if (class_names.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ImageFolder root '", root,
        "' has no class subdirectories (expected root/<class>/<image>)"));
  }
  std::sort(class_names.begin(), class_names.end());

  std::vector<Sample> samples;
  for (size_t label = 0; label < class_names.size(); ++label) {
    // Per class, so two classes may link to the same directory.
    std::set<DirectoryId> visited = {{st.st_dev, st.st_ino}};
    std::vector<ImageFile> images;
    RETURN_IF_ERROR(
        CollectImages(fs::path(root) / class_names[label], &visited, &images));
    std::sort(images.begin(), images.end(),
              [](const ImageFile& a, const ImageFile& b) {
                return std::tie(a.directory, a.file_name) <
                       std::tie(b.directory, b.file_name);
              });
    for (ImageFile& image : images) {
      Sample sample{(fs::path(image.directory) / image.file_name).string(),
                    static_cast<int32_t>(label)};
      sample.key_start = KeyStart(root, sample.path);
      samples.push_back(std::move(sample));
    }
  }
  if (samples.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ImageFolder root '", root, "' has ", class_names.size(),
        " class directories but no image files (.jpg, .jpeg, .png, ...)"));
  }
  return std::make_shared<const Dataset>(std::move(name), std::move(samples),
                                         std::move(class_names));
}

absl::StatusOr<std::shared_ptr<const Dataset>> Dataset::LoadListFile(
    std::string name, const std::string& list_path, std::string root) {
  if (list_path.empty()) {
    return absl::InvalidArgumentError("list file path is empty");
  }
  ASSIGN_OR_RETURN(const FileBytes file, ReadFileBytes(list_path));
  const absl::string_view contents = file.text();
  if (root.empty()) {
    root = fs::path(list_path).parent_path().string();
  } else {
    struct stat st;
    if (::stat(root.c_str(), &st) != 0) {
      return common::ErrnoStatus(errno,
                                 absl::StrCat("list file root '", root, "'"));
    }
    if (!S_ISDIR(st.st_mode)) {
      return absl::InvalidArgumentError(
          absl::StrCat("list file root '", root, "' is not a directory"));
    }
  }

  std::vector<Sample> samples;
  int32_t max_label = -1;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(contents, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    const std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t\r\v\f"), absl::SkipEmpty());
    const std::string where = absl::StrCat(list_path, ":", line_number, ": ");
    if (fields.size() != 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, "expected '<path> <label>', found ", fields.size(),
          fields.size() == 1 ? " field" : " fields",
          fields.size() > 2 ? " (paths may not contain spaces)" : ""));
    }
    const absl::string_view path = fields[0];
    const absl::string_view label_text = fields[1];
    if (!std::all_of(label_text.begin(), label_text.end(),
                     [](char c) { return absl::ascii_isdigit(c); })) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "label '", absl::CHexEscape(label_text),
                       "' is not a non-negative integer"));
    }
    int32_t label = 0;
    if (!absl::SimpleAtoi(label_text, &label) ||
        label > kMaxListFileLabel) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "label ", label_text, " is larger than the limit ",
                       kMaxListFileLabel));
    }
    max_label = std::max(max_label, label);
    Sample sample{root.empty() ? std::string(path)
                               : (fs::path(root) / std::string(path)).string(),
                  label};
    sample.key_start =
        static_cast<uint32_t>(sample.path.size() - path.size());
    samples.push_back(std::move(sample));
  }
  if (samples.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("list file '", list_path, "' has no samples"));
  }
  std::sort(samples.begin(), samples.end(),
            [](const Sample& a, const Sample& b) {
              return std::tie(a.path, a.label) < std::tie(b.path, b.label);
            });
  std::vector<std::string> class_names;
  class_names.reserve(max_label + 1);
  for (int32_t label = 0; label <= max_label; ++label) {
    class_names.push_back(absl::StrCat(label));
  }
  return std::make_shared<const Dataset>(std::move(name), std::move(samples),
                                         std::move(class_names));
}

absl::StatusOr<std::shared_ptr<const Dataset>> LoadDataset(
    const batchd::v1::DatasetConfig& config, const RemoteOptions& remote) {
  RETURN_IF_ERROR(ValidateName(config.name()));
  const std::string prefix = absl::StrCat("dataset '", config.name(), "': ");
  if (config.path().empty() && config.shards_size() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, "path is empty"));
  }
  // file://, ftp://, gopher://...: never read, and never taken for a
  // local path that happens not to exist.
  for (const std::string& location : config.shards()) {
    RETURN_IF_ERROR(CheckScheme(location, prefix));
  }
  RETURN_IF_ERROR(CheckScheme(config.path(), prefix));
  if (config.format() != batchd::v1::DatasetConfig::TAR_SHARDS &&
      config.format() != batchd::v1::DatasetConfig::FORMAT_UNSPECIFIED &&
      (config.shards_size() > 0 || !config.index_cache().empty() ||
       config.max_open_shards() != 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        prefix,
        "'shards', 'index_cache' and 'max_open_shards' apply to TAR_SHARDS "
        "datasets only"));
  }
  batchd::v1::DatasetConfig::Format format = config.format();
  if (format == batchd::v1::DatasetConfig::FORMAT_UNSPECIFIED &&
      (config.shards_size() > 0 || IsGlob(config.path()) ||
       IsRemoteUrl(config.path()))) {
    format = batchd::v1::DatasetConfig::TAR_SHARDS;
  }
  if (format == batchd::v1::DatasetConfig::FORMAT_UNSPECIFIED) {
    struct stat st;
    if (::stat(config.path().c_str(), &st) != 0) {
      const int error = errno;
      if (error == ENOENT) {
        return absl::NotFoundError(absl::StrCat(
            prefix, "path '", config.path(), "' does not exist"));
      }
      return common::ErrnoStatus(
          error, absl::StrCat(prefix, "path '", config.path(), "'"));
    }
    if (S_ISDIR(st.st_mode)) {
      format = IsShardDirectory(config.path())
                   ? batchd::v1::DatasetConfig::TAR_SHARDS
                   : batchd::v1::DatasetConfig::IMAGE_FOLDER;
    } else if (S_ISREG(st.st_mode)) {
      format = IsShardFile(config.path())
                   ? batchd::v1::DatasetConfig::TAR_SHARDS
                   : batchd::v1::DatasetConfig::LIST_FILE;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          prefix, "path '", config.path(),
          "' is neither a directory (ImageFolder) nor a regular file (list "
          "file)"));
    }
  }
  if ((IsRemoteUrl(config.path()) ||
       std::any_of(config.shards().begin(), config.shards().end(),
                   [](const std::string& s) { return IsRemoteUrl(s); })) &&
      format != batchd::v1::DatasetConfig::TAR_SHARDS) {
    return absl::InvalidArgumentError(absl::StrCat(
        prefix, "remote datasets (s3://, http://, https://) are TAR_SHARDS "
        "only"));
  }
  absl::StatusOr<std::shared_ptr<const Dataset>> dataset;
  switch (format) {
    case batchd::v1::DatasetConfig::IMAGE_FOLDER:
      if (!config.root().empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            prefix, "'root' applies to LIST_FILE datasets only"));
      }
      dataset = Dataset::LoadImageFolder(config.name(), config.path());
      break;
    case batchd::v1::DatasetConfig::LIST_FILE:
      dataset =
          Dataset::LoadListFile(config.name(), config.path(), config.root());
      break;
    case batchd::v1::DatasetConfig::TAR_SHARDS:
      if (!config.root().empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            prefix, "'root' applies to LIST_FILE datasets only"));
      }
      dataset = Dataset::LoadTarShards(config, remote);
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          prefix, "unknown format ", static_cast<int>(config.format())));
  }
  if (!dataset.ok()) return Prefixed(dataset.status(), prefix);
  return dataset;
}

absl::StatusOr<std::vector<std::shared_ptr<const Dataset>>> LoadDatasets(
    const batchd::v1::DaemonConfig& config, const RemoteOptions& remote) {
  absl::flat_hash_set<std::string> names;
  for (const batchd::v1::DatasetConfig& dataset : config.datasets()) {
    if (!names.insert(dataset.name()).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "dataset name '", dataset.name(), "' is used more than once"));
    }
  }
  std::vector<std::shared_ptr<const Dataset>> datasets;
  datasets.reserve(config.datasets_size());
  for (const batchd::v1::DatasetConfig& dataset_config : config.datasets()) {
    ASSIGN_OR_RETURN(std::shared_ptr<const Dataset> dataset,
                     LoadDataset(dataset_config, remote));
    datasets.push_back(std::move(dataset));
  }
  return datasets;
}

absl::StatusOr<batchd::v1::DaemonConfig> ReadConfigFile(
    const std::string& path) {
  ASSIGN_OR_RETURN(const FileBytes file, ReadFileBytes(path));
  const std::string text(file.text());
  ConfigErrorCollector errors(path);
  google::protobuf::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  batchd::v1::DaemonConfig config;
  if (!parser.ParseFromString(text, &config)) {
    if (errors.errors().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": not a valid DaemonConfig in text format"));
    }
    return absl::InvalidArgumentError(absl::StrJoin(errors.errors(), "; "));
  }
  return config;
}

absl::StatusOr<batchd::v1::DatasetConfig> ParseDatasetFlag(
    absl::string_view flag) {
  const size_t equals = flag.find('=');
  if (equals == absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("--dataset '", flag, "': expected name=path"));
  }
  const absl::string_view name = flag.substr(0, equals);
  const absl::string_view path = flag.substr(equals + 1);
  if (name.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--dataset '", flag, "': the name before '=' is empty"));
  }
  if (path.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--dataset '", flag, "': the path after '=' is empty"));
  }
  RETURN_IF_ERROR(
      Prefixed(ValidateName(name), absl::StrCat("--dataset '", flag, "': ")));
  batchd::v1::DatasetConfig config;
  config.set_name(std::string(name));
  config.set_path(std::string(path));
  return config;
}

}  // namespace batchd::server
