// Dataset::LoadTarShards: resolves a TAR_SHARDS dataset's shard list, builds
// (or reuses from the sidecar cache) each shard's index, and assembles the
// dataset's samples in shard order, then member order.
#include <fcntl.h>
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/errno_status.h"
#include "common/status_macros.h"
#include "server/dataset/dataset.h"
#include "server/dataset/index_cache.h"
#include "server/dataset/shard_files.h"
#include "server/dataset/remote_shards.h"
#include "server/dataset/shard_index.h"
#include "server/storage/counting_object_store.h"
#include "server/storage/object_store.h"
#include "server/storage/progress_log.h"

namespace batchd::server {
namespace {

namespace fs = std::filesystem;

// More local shards than this is a configuration mistake (a glob over a
// whole filesystem), not a dataset: shard numbers are 32-bit, and every
// shard is stat'ed at start. Remote datasets have --max-shards.
constexpr size_t kMaxShards = 1 << 20;
// Damaged shards named one by one in the log; the rest are counted.
constexpr int kMaxDamageLines = 10;

bool IsGlob(const std::string& path) {
  return path.find_first_of("*?[") != std::string::npos;
}

bool EndsWithTar(absl::string_view path) {
  return path.size() > 4 &&
         absl::AsciiStrToLower(path.substr(path.size() - 4)) == ".tar";
}

absl::StatusOr<std::vector<std::string>> GlobShards(const std::string& pattern) {
  glob_t matches;
  const int rc = ::glob(pattern.c_str(), GLOB_ERR, nullptr, &matches);
  struct Freer {
    glob_t* g;
    ~Freer() { globfree(g); }
  } freer{&matches};
  if (rc == GLOB_NOMATCH) {
    return absl::NotFoundError(
        absl::StrCat("no shards match '", pattern, "'"));
  }
  if (rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("glob '", pattern, "' failed (", rc, ")"));
  }
  // glob sorts its matches (no GLOB_NOSORT).
  std::vector<std::string> shards;
  for (size_t i = 0; i < matches.gl_pathc; ++i) {
    shards.emplace_back(matches.gl_pathv[i]);
  }
  return shards;
}

absl::StatusOr<std::vector<std::string>> DirectoryShards(
    const std::string& dir) {
  std::vector<std::string> shards;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::error_code type_ec;
    if (!name.empty() && name[0] != '.' && EndsWithTar(name) &&
        it->is_regular_file(type_ec)) {
      shards.push_back(it->path().string());
    }
  }
  if (ec) {
    return common::ErrnoStatus(ec.value(), absl::StrCat("listing '", dir, "'"));
  }
  std::sort(shards.begin(), shards.end());
  if (shards.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", dir, "' holds no .tar shards"));
  }
  return shards;
}

// A text file listing shards, one per line, relative to its directory.
absl::StatusOr<std::vector<std::string>> ListedShards(
    const std::string& list) {
  ASSIGN_OR_RETURN(const FileBytes file, ReadFileBytes(list));
  const fs::path dir = fs::path(list).parent_path();
  std::vector<std::string> shards;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(file.text(), '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    if (line.find_first_of(" \t") != absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          list, ":", line_number,
          ": expected one shard path per line (paths may not contain "
          "spaces)"));
    }
    const fs::path shard(std::string{line});
    shards.push_back(shard.is_absolute() ? shard.string()
                                         : (dir / shard).string());
  }
  if (shards.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard list '", list, "' names no shards"));
  }
  return shards;
}

absl::StatusOr<std::vector<std::string>> ResolveShards(
    const batchd::v1::DatasetConfig& config) {
  if (config.shards_size() > 0) {
    return std::vector<std::string>(config.shards().begin(),
                                    config.shards().end());
  }
  const std::string& path = config.path();
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    const int error = errno;
    if (error == ENOENT && IsGlob(path)) return GlobShards(path);
    if (error == ENOENT) {
      return absl::NotFoundError(absl::StrCat("'", path, "' does not exist"));
    }
    return common::ErrnoStatus(error, absl::StrCat("'", path, "'"));
  }
  if (S_ISDIR(st.st_mode)) return DirectoryShards(path);
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", path, "' is neither a directory, a .tar file nor a shard list"));
  }
  if (EndsWithTar(path)) return std::vector<std::string>{path};
  return ListedShards(path);
}

uint64_t Fnv1a64(absl::string_view bytes, uint64_t hash = 0xcbf29ce484222325ull) {
  for (unsigned char c : bytes) hash = (hash ^ c) * 0x100000001b3ull;
  return hash;
}

std::string DefaultCachePath(const std::vector<std::string>& shards) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (const std::string& shard : shards) {
    hash = Fnv1a64(shard, hash);
    hash = Fnv1a64(absl::string_view("\n", 1), hash);
  }
  const fs::path dir = fs::path(shards[0]).parent_path();
  return (dir / absl::StrFormat(".batchd-index-%016x", hash)).string();
}

// classes.txt's text: one class name per line, label = line number - 1.
// `path` is for messages.
absl::StatusOr<std::vector<std::string>> ParseClassNames(
    absl::string_view text, const std::string& path) {
  std::vector<std::string> names = absl::StrSplit(text, '\n');
  if (!names.empty() && names.back().empty()) names.pop_back();
  for (size_t i = 0; i < names.size(); ++i) {
    absl::StripAsciiWhitespace(&names[i]);
    if (names[i].empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", i + 1, ": empty class name"));
    }
  }
  if (names.size() > static_cast<size_t>(kMaxShardLabel) + 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, " has more than ", kMaxShardLabel + 1, " classes"));
  }
  return names;
}

// classes.txt beside the first shard. An empty vector when there is none.
absl::StatusOr<std::vector<std::string>> ReadClassNames(
    const std::string& first_shard) {
  const std::string path =
      (fs::path(first_shard).parent_path() / "classes.txt").string();
  absl::StatusOr<FileBytes> file = ReadFileBytes(path);
  if (absl::IsNotFound(file.status())) return std::vector<std::string>();
  if (!file.ok()) return file.status();
  return ParseClassNames(file->text(), path);
}

// Indexes one shard from scratch; fills size and mtime.
absl::StatusOr<CachedShard> IndexShard(
    const std::string& path, const std::vector<std::string>& extensions) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return common::ErrnoStatus(errno, absl::StrCat("open shard '", path, "'"));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    return common::ErrnoStatus(errno, absl::StrCat("fstat shard '", path, "'"));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard '", path, "' is not a regular file"));
  }
  CachedShard shard;
  shard.path = path;
  shard.size = static_cast<uint64_t>(st.st_size);
  shard.validator =
      LocalValidator(static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 +
                     st.st_mtim.tv_nsec);
  shard.image_extensions = absl::StrJoin(extensions, ";");
  ASSIGN_OR_RETURN(shard.index,
                   IndexShardFile(fd, shard.size, path, extensions));
  return shard;
}

void Log(const std::string& dataset, const std::string& message) {
  std::fprintf(stderr, "batchd: dataset '%s': %s\n", dataset.c_str(),
               message.c_str());
}

// The sidecar index at `path` by shard path (URL for remote shards); empty
// when there is none, or when it is unreadable or malformed (logged: the
// shards are re-indexed).
absl::flat_hash_map<std::string, CachedShard> ReadSidecar(
    const std::string& name, const std::string& path) {
  absl::flat_hash_map<std::string, CachedShard> cached;
  if (path.empty()) return cached;
  absl::StatusOr<std::vector<CachedShard>> read = ReadIndexCache(path);
  if (read.ok()) {
    for (CachedShard& shard : *read) {
      std::string key = shard.path;
      cached.emplace(std::move(key), std::move(shard));
    }
  } else if (!absl::IsNotFound(read.status())) {
    Log(name, absl::StrCat(read.status().message(), "; re-indexing"));
  }
  return cached;
}

// Writes the sidecar index; false (logged: the shards are re-indexed at
// every start) when it cannot be written.
bool WriteSidecar(const std::string& name, const std::string& path,
                  const std::vector<CachedShard>& shards) {
  const absl::Status written = WriteIndexCache(path, shards);
  if (!written.ok()) {
    Log(name, absl::StrCat("cannot write the index cache: ", written.message(),
                           "; the shards are re-indexed at every start"));
  }
  return written.ok();
}

// The dataset's samples in shard order, then member order, from every
// shard's index; logs damage, skipped keys and the totals.
absl::StatusOr<std::shared_ptr<const Dataset>> AssembleDataset(
    const std::string& name, const std::vector<CachedShard>& shards,
    const std::vector<std::string>& class_names_file, IndexStats stats,
    std::shared_ptr<const ShardSource> source) {
  // A dataset in which no key has a class is unlabelled (img2dataset's
  // jpg + txt + json): its samples are the keys with an image, label
  // kNoLabel, and a key without a cls is not skipped.
  bool labelled = false;
  for (const CachedShard& shard : shards) {
    labelled = labelled || !shard.index.samples.empty();
  }
  // Samples in shard order, then member order.
  std::vector<Sample> samples;
  SampleMembers members;
  absl::flat_hash_map<std::string, uint32_t> extension_numbers;
  auto add = [&](const ShardSample& s, uint32_t number) {
    Sample sample{s.member, s.label, number, s.offset, s.size};
    sample.has_image = s.has_image;
    sample.first_member = members.members.size();
    sample.member_count = static_cast<uint32_t>(s.others.size());
    for (const ShardMember& other : s.others) {
      auto [it, added] = extension_numbers.try_emplace(
          other.extension, static_cast<uint32_t>(members.extensions.size()));
      if (added) members.extensions.push_back(other.extension);
      members.members.push_back({it->second, other.offset, other.size});
    }
    samples.push_back(std::move(sample));
  };
  int32_t max_label = -1;
  std::string skipped_example;
  int damage_lines = 0;
  for (uint32_t number = 0; number < shards.size(); ++number) {
    const ShardIndex& index = shards[number].index;
    if (!index.damage.empty()) {
      ++stats.damaged_shards;
      if (damage_lines++ < kMaxDamageLines) {
        Log(name, absl::StrCat(index.damage, "; indexed ",
                               index.samples.size() + index.unlabeled.size(),
                               " samples before the damage"));
      }
    }
    stats.skipped_samples += index.skipped();
    if (!labelled) {
      stats.skipped_samples -= index.skipped_no_class;
      for (const ShardSample& s : index.unlabeled) add(s, number);
      continue;
    }
    if (skipped_example.empty()) skipped_example = index.skipped_example;
    for (const ShardSample& s : index.samples) {
      if (!class_names_file.empty() &&
          static_cast<size_t>(s.label) >= class_names_file.size()) {
        ++stats.skipped_samples;
        if (skipped_example.empty()) {
          skipped_example = absl::StrCat(
              "member '", absl::CHexEscape(s.member), "' in '",
              shards[number].path, "': class ", s.label, " but classes.txt has ",
              class_names_file.size(), " classes");
        }
        continue;
      }
      max_label = std::max(max_label, s.label);
      add(s, number);
      if (!s.has_image) ++stats.no_image_samples;
    }
  }
  if (stats.damaged_shards > kMaxDamageLines) {
    Log(name, absl::StrCat(stats.damaged_shards - kMaxDamageLines,
                           " more damaged shards"));
  }
  if (stats.skipped_samples > 0) {
    Log(name, absl::StrCat("skipped ", stats.skipped_samples,
                           " keys without a valid class, e.g. ",
                           skipped_example));
  }
  if (stats.no_image_samples > 0) {
    Log(name, absl::StrCat(stats.no_image_samples,
                           " keys have a class but no image member; they are "
                           "substituted when read (NO_IMAGE_MEMBER)"));
  }
  if (samples.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the ", shards.size(), " shards (", shards[0].path,
        shards.size() > 1 ? ", ..." : "",
        ") hold no samples (an image member per key, by "
        "DatasetConfig.image_extensions; and a cls member, unless no key "
        "has one)"));
  }
  std::vector<std::string> class_names = class_names_file;
  if (!labelled) {
    class_names.clear();
  } else if (class_names.empty()) {
    for (int32_t label = 0; label <= max_label; ++label) {
      class_names.push_back(absl::StrCat(label));
    }
  }
  Log(name, absl::StrCat(stats.shards, " shards (", stats.shards_from_cache,
                         " from the sidecar index), ", samples.size(),
                         " samples"));
  return std::make_shared<const Dataset>(name, std::move(samples),
                                         std::move(class_names),
                                         std::move(source), stats,
                                         std::move(members));
}



// ---- Remote shards (s3://, http://, https://) ----

// classes.txt is at most this large (a million names of a few bytes).
constexpr uint64_t kMaxClassesBytes = uint64_t{64} << 20;

bool AnyRemote(const batchd::v1::DatasetConfig& config) {
  if (IsRemoteUrl(config.path())) return true;
  for (const std::string& shard : config.shards()) {
    if (IsRemoteUrl(shard)) return true;
  }
  return false;
}

// The remote sidecar: the config's index_cache, else one per shard list in
// `cache_dir`, else none ("").
std::string RemoteCachePath(const batchd::v1::DatasetConfig& config,
                            const std::vector<ObjectInfo>& shards,
                            const std::string& cache_dir) {
  if (config.index_cache() == "-") return "";
  if (!config.index_cache().empty()) return config.index_cache();
  if (cache_dir.empty()) return "";
  uint64_t hash = 0xcbf29ce484222325ull;
  for (const ObjectInfo& shard : shards) {
    hash = Fnv1a64(shard.url, hash);
    hash = Fnv1a64(absl::string_view("\n", 1), hash);
  }
  return (fs::path(cache_dir) / absl::StrFormat("index-%016x", hash)).string();
}

// classes.txt beside the first shard's URL; empty when there is none.
absl::StatusOr<std::vector<std::string>> ReadRemoteClassNames(
    ObjectStore& store, const std::string& first_shard) {
  const std::string url =
      absl::StrCat(first_shard.substr(0, first_shard.rfind('/') + 1),
                   "classes.txt");
  absl::StatusOr<ObjectInfo> info = store.Stat(url);
  if (absl::IsNotFound(info.status())) return std::vector<std::string>();
  if (!info.ok()) return info.status();
  if (info->size > kMaxClassesBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        url, " is ", info->size, " bytes, more than ", kMaxClassesBytes));
  }
  std::string text(info->size, '\0');
  RETURN_IF_ERROR(store.ReadRange(*info, 0, info->size,
                                  reinterpret_cast<uint8_t*>(text.data())));
  return ParseClassNames(text, url);
}

// Indexes `objects` from their headers, `threads` at once, in place of the
// entries of `shards` that are empty (no validator). The first error.
absl::Status IndexRemoteShards(const std::string& name, ObjectStore& store,
                               const std::vector<ObjectInfo>& objects,
                               const std::vector<std::string>& extensions,
                               std::vector<CachedShard>& shards, int threads) {
  std::vector<size_t> todo;
  for (size_t i = 0; i < shards.size(); ++i) {
    if (shards[i].validator.empty()) todo.push_back(i);
  }
  std::atomic<size_t> next{0};
  std::vector<absl::Status> errors(todo.size());
  std::atomic<bool> failed{false};
  ProgressLog progress(name, "indexing", "shards", todo.size());
  auto work = [&] {
    for (;;) {
      const size_t k = next.fetch_add(1);
      if (k >= todo.size() || failed.load()) return;
      const ObjectInfo& object = objects[todo[k]];
      ObjectReadAt reader(store, object);
      absl::StatusOr<ShardIndex> index =
          IndexShard(reader, object.size, object.url, extensions);
      progress.Add(1, reader.bytes());
      if (!index.ok()) {
        errors[k] = index.status();
        failed.store(true);
        return;
      }
      CachedShard& shard = shards[todo[k]];
      shard.path = object.url;
      shard.size = object.size;
      shard.validator = RemoteValidator(object.etag);
      shard.image_extensions = absl::StrJoin(extensions, ";");
      shard.index = *std::move(index);
    }
  };
  const size_t helpers =
      std::min<size_t>(std::max(threads, 1), todo.size()) > 0
          ? std::min<size_t>(std::max(threads, 1), todo.size()) - 1
          : 0;
  std::vector<std::thread> pool;
  for (size_t i = 0; i < helpers; ++i) pool.emplace_back(work);
  work();
  for (std::thread& thread : pool) thread.join();
  for (const absl::Status& error : errors) {
    if (!error.ok()) return error;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const Dataset>> LoadRemoteTarShards(
    const batchd::v1::DatasetConfig& config, const RemoteOptions& remote) {
  const std::string& name = config.name();
  std::shared_ptr<ObjectStore> store;
  if (remote.make_store) {
    ASSIGN_OR_RETURN(store, remote.make_store(config));
  } else {
    ObjectStoreOptions options;
    options.connections = remote.connections;
    options.redirects = remote.redirects;
    options.cancelled = remote.cancelled;
    options.low_speed_bytes_per_s = remote.low_speed_bytes_per_s;
    options.low_speed_time = remote.low_speed_time;
    if (remote.counters != nullptr) {
      options.on_fault = [counters = remote.counters](
                             const StoreFaultReport& report) {
        counters->RecordFault(report);
      };
    }
    ASSIGN_OR_RETURN(std::unique_ptr<ObjectStore> made,
                     MakeObjectStore(config, options));
    store = std::move(made);
  }
  if (remote.counters != nullptr) {
    store = std::make_shared<CountingObjectStore>(std::move(store),
                                                  remote.counters);
  }
  std::vector<ObjectInfo> objects;
  if (remote.resolve_shards) {
    ASSIGN_OR_RETURN(objects, remote.resolve_shards(config, *store));
  } else {
    ASSIGN_OR_RETURN(objects,
                     ResolveShardObjects(config, *store, remote.max_shards));
  }
  if (objects.empty()) return absl::InvalidArgumentError("no shards");
  if (objects.size() > remote.max_shards) {
    return absl::ResourceExhaustedError(absl::StrCat(
        objects.size(), " shards, more than the limit of ", remote.max_shards,
        " (--max-shards)"));
  }
  ASSIGN_OR_RETURN(const std::vector<std::string> class_names_file,
                   ReadRemoteClassNames(*store, objects[0].url));
  ASSIGN_OR_RETURN(const std::vector<std::string> extensions,
                   ImageExtensions(config.image_extensions()));

  // Sidecar entries are reused when URL, size and ETag match; a shard
  // without an ETag cannot be checked and is always re-indexed.
  const std::string cache_path =
      RemoteCachePath(config, objects, remote.cache_dir);
  absl::flat_hash_map<std::string, CachedShard> cached =
      ReadSidecar(name, cache_path);
  IndexStats stats;
  stats.shards = objects.size();
  std::vector<CachedShard> shards(objects.size());
  bool changed = cached.size() != objects.size();
  for (size_t i = 0; i < objects.size(); ++i) {
    auto it = cached.find(objects[i].url);
    if (it != cached.end() && !objects[i].etag.empty() &&
        it->second.size == objects[i].size &&
        it->second.validator == RemoteValidator(objects[i].etag) &&
        it->second.image_extensions == absl::StrJoin(extensions, ";")) {
      shards[i] = std::move(it->second);
      cached.erase(it);
      ++stats.shards_from_cache;
    } else {
      changed = true;
    }
  }
  RETURN_IF_ERROR(
      IndexRemoteShards(name, *store, objects, extensions, shards,
                        remote.index_threads));
  if (!cache_path.empty() && changed) {
    stats.cache_written = WriteSidecar(name, cache_path, shards);
  }
  const uint64_t request_cost_bytes =
      absl::StartsWith(objects[0].url, "s3://")
          ? remote.s3_request_cost_bytes
          : remote.http_request_cost_bytes;
  auto source = std::make_shared<const RemoteShards>(
      std::move(store), std::move(objects), remote.cache, name,
      request_cost_bytes);
  return AssembleDataset(name, shards, class_names_file, stats,
                         std::move(source));
}

}  // namespace

absl::StatusOr<std::shared_ptr<const Dataset>> Dataset::LoadTarShards(
    const batchd::v1::DatasetConfig& config) {
  return LoadTarShards(config, RemoteOptions());
}

absl::StatusOr<std::shared_ptr<const Dataset>> Dataset::LoadTarShards(
    const batchd::v1::DatasetConfig& config, const RemoteOptions& remote) {
  if (AnyRemote(config)) return LoadRemoteTarShards(config, remote);
  const std::string& name = config.name();
  ASSIGN_OR_RETURN(std::vector<std::string> paths, ResolveShards(config));
  if (paths.empty()) return absl::InvalidArgumentError("no shards");
  if (paths.size() > kMaxShards) {
    return absl::InvalidArgumentError(absl::StrCat(
        paths.size(), " shards, more than the limit of ", kMaxShards));
  }
  ASSIGN_OR_RETURN(const std::vector<std::string> class_names_file,
                   ReadClassNames(paths[0]));
  ASSIGN_OR_RETURN(const std::vector<std::string> extensions,
                   ImageExtensions(config.image_extensions()));

  // The cache, by shard path; entries are used when size and mtime match.
  const std::string cache_path = config.index_cache() == "-" ? ""
                                 : config.index_cache().empty()
                                     ? DefaultCachePath(paths)
                                     : config.index_cache();
  absl::flat_hash_map<std::string, CachedShard> cached =
      ReadSidecar(name, cache_path);

  IndexStats stats;
  stats.shards = paths.size();
  std::vector<CachedShard> shards;
  shards.reserve(paths.size());
  bool changed = cached.size() != paths.size();
  for (const std::string& path : paths) {
    auto it = cached.find(path);
    if (it != cached.end()) {
      struct stat st;
      if (::stat(path.c_str(), &st) != 0) {
        return common::ErrnoStatus(errno,
                                   absl::StrCat("stat shard '", path, "'"));
      }
      const int64_t mtime_ns =
          static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 +
          st.st_mtim.tv_nsec;
      if (static_cast<uint64_t>(st.st_size) == it->second.size &&
          LocalValidator(mtime_ns) == it->second.validator &&
          it->second.image_extensions == absl::StrJoin(extensions, ";")) {
        shards.push_back(std::move(it->second));
        cached.erase(it);  // a shard listed twice is indexed twice
        ++stats.shards_from_cache;
        continue;
      }
    }
    ASSIGN_OR_RETURN(CachedShard shard, IndexShard(path, extensions));
    shards.push_back(std::move(shard));
    changed = true;
  }
  if (!cache_path.empty() && changed) {
    stats.cache_written = WriteSidecar(name, cache_path, shards);
  }

  const size_t max_open = config.max_open_shards() == 0
                              ? ShardFiles::kDefaultMaxOpen
                              : config.max_open_shards();
  auto files = std::make_shared<const ShardFiles>(std::move(paths), max_open);
  return AssembleDataset(name, shards, class_names_file, stats,
                         std::move(files));
}

}  // namespace batchd::server
