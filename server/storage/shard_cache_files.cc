#include "server/storage/shard_cache_files.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <filesystem>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/errno_status.h"
#include "common/file_io.h"
#include "common/status_macros.h"

namespace batchd::server {
namespace {

namespace fs = std::filesystem;

constexpr absl::string_view kShardSuffix = ".shard";
constexpr absl::string_view kTempMarker = ".tmp.";

uint64_t Fnv1a64(absl::string_view bytes, uint64_t hash) {
  for (unsigned char c : bytes) hash = (hash ^ c) * 0x100000001b3ull;
  return hash;
}

// The size a cache file's name claims ("<hash>-<size>.shard"), or nullopt.
bool ParseFileName(absl::string_view name, uint64_t* size) {
  if (!absl::EndsWith(name, kShardSuffix)) return false;
  name.remove_suffix(kShardSuffix.size());
  const size_t dash = name.find('-');
  if (dash != 16) return false;
  return absl::SimpleAtoi(name.substr(dash + 1), size);
}

// Reads all `size` bytes at `offset` of the cache file `path`: one that ends
// sooner is damaged (DATA_LOSS).
absl::Status ReadFully(int fd, uint8_t* data, size_t size, uint64_t offset,
                       const std::string& path) {
  auto what = [&] { return absl::StrCat("read '", path, "'"); };
  ASSIGN_OR_RETURN(const size_t done,
                   common::ReadFileRange(fd, offset, size, data, what));
  if (done < size) {
    return absl::DataLossError(absl::StrCat("cached shard '", path,
                                            "' is shorter than its name says"));
  }
  return absl::OkStatus();
}

// Closes a download's temporary file and, if `status` and the close are
// OK, renames it into place at `path`; on any failure the temporary file is
// removed. Returns the first error.
absl::Status FinishDownload(int fd, const std::string& temp,
                            const std::string& path, absl::Status status) {
  if (::close(fd) != 0 && status.ok()) {
    status = common::ErrnoStatus(errno, absl::StrCat("close '", temp, "'"));
  }
  if (status.ok() && ::rename(temp.c_str(), path.c_str()) != 0) {
    status = common::ErrnoStatus(errno, absl::StrCat("rename '", temp, "'"));
  }
  if (!status.ok()) ::unlink(temp.c_str());
  return status;
}

std::atomic<uint64_t> temp_counter{0};

}  // namespace

std::string ShardFileName(const ObjectInfo& shard) {
  uint64_t hash = 0xcbf29ce484222325ull;
  hash = Fnv1a64(shard.url, hash);
  hash = Fnv1a64(absl::string_view("\0", 1), hash);
  hash = Fnv1a64(shard.etag, hash);
  if (shard.etag.empty()) {
    // Nothing tells this object from a later one of the same size: its file
    // is for this process only (a restart does not find it; it ages out).
    static const std::string* const kRun = new std::string(
        absl::StrCat("run:", ::getpid(), ":", absl::ToUnixNanos(absl::Now())));
    hash = Fnv1a64(*kRun, hash);
  }
  return absl::StrFormat("%016x-%d%s", hash, shard.size, kShardSuffix);
}

absl::StatusOr<std::vector<ShardFile>> ListShardFiles(const std::string& dir) {
  std::vector<ShardFile> found;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const std::string path = it->path().string();
    if (absl::StrContains(name, kTempMarker)) {
      ::unlink(path.c_str());  // a download cut short by a crash
      continue;
    }
    uint64_t size = 0;
    if (!ParseFileName(name, &size)) continue;
    struct stat st;
    if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (static_cast<uint64_t>(st.st_size) != size) {
      ::unlink(path.c_str());
      continue;
    }
    found.push_back({static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 +
                         st.st_mtim.tv_nsec,
                     name, size});
  }
  if (ec) {
    return common::ErrnoStatus(
        ec.value(), absl::StrCat("list cache directory '", dir, "'"));
  }
  std::sort(found.begin(), found.end(),
            [](const ShardFile& a, const ShardFile& b) {
              return a.mtime_ns != b.mtime_ns ? a.mtime_ns > b.mtime_ns
                                              : a.name < b.name;
            });
  return found;
}

absl::Status DownloadShard(ObjectStore& store, const ObjectInfo& shard,
                           const std::string& path, bool whole_object,
                           uint64_t chunk_bytes, int chunks_in_flight) {
  const std::string temp = absl::StrCat(path, kTempMarker, ::getpid(), ".",
                                        temp_counter.fetch_add(1));
  const int fd = ::open(temp.c_str(),
                        (whole_object ? O_RDWR : O_WRONLY) | O_CREAT |
                            O_TRUNC | O_CLOEXEC,
                        0644);
  if (fd < 0) {
    return common::ErrnoStatus(errno, absl::StrCat("create '", temp, "'"));
  }
  if (whole_object) {
    // One GET of the whole object, written by the store straight into the
    // mapped file: no buffer of the shard's size in memory.
    absl::Status status;
    if (shard.size > 0) {
      void* map = MAP_FAILED;
      if (::ftruncate(fd, static_cast<off_t>(shard.size)) != 0) {
        status = common::ErrnoStatus(errno,
                                     absl::StrCat("truncate '", temp, "'"));
      } else {
        map = ::mmap(nullptr, shard.size, PROT_READ | PROT_WRITE, MAP_SHARED,
                     fd, 0);
        if (map == MAP_FAILED) {
          status =
              common::ErrnoStatus(errno, absl::StrCat("mmap '", temp, "'"));
        }
      }
      if (status.ok()) {
        status = store.ReadRange(shard, 0, shard.size,
                                 static_cast<uint8_t*>(map));
        ::munmap(map, shard.size);
      }
    }
    return FinishDownload(fd, temp, path, std::move(status));
  }

  const uint64_t chunk = std::max<uint64_t>(chunk_bytes, 1);
  const uint64_t chunks = (shard.size + chunk - 1) / chunk;
  std::atomic<uint64_t> next{0};
  absl::Mutex error_mu;
  absl::Status error;  // the first failure; guarded by error_mu
  std::atomic<bool> failed{false};
  auto work = [&] {
    std::vector<uint8_t> buffer;
    for (;;) {
      const uint64_t i = next.fetch_add(1);
      if (i >= chunks || failed.load()) return;
      const uint64_t offset = i * chunk;
      const uint64_t size = std::min(chunk, shard.size - offset);
      buffer.resize(size);
      absl::Status status = store.ReadRange(shard, offset, size, buffer.data());
      if (status.ok()) {
        status = common::WriteFileRange(fd, offset, buffer.data(), size, [&] {
          return absl::StrCat("write '", temp, "'");
        });
      }
      if (!status.ok()) {
        absl::MutexLock lock(&error_mu);
        if (error.ok()) error = std::move(status);
        failed.store(true);
        return;
      }
    }
  };
  const uint64_t helpers =
      std::min<uint64_t>(chunks_in_flight, chunks) > 0
          ? std::min<uint64_t>(chunks_in_flight, chunks) - 1
          : 0;
  std::vector<std::thread> threads;
  for (uint64_t i = 0; i < helpers; ++i) {
    threads.emplace_back([&work] {
      pthread_setname_np(pthread_self(), "shard-download");
      work();
    });
  }
  work();
  for (std::thread& thread : threads) thread.join();

  absl::Status status;
  {
    absl::MutexLock lock(&error_mu);
    status = error;
  }
  return FinishDownload(fd, temp, path, std::move(status));
}

absl::Status ReadShardFile(const std::string& path, const ObjectInfo& shard,
                           uint64_t offset, uint64_t size, uint8_t* dest,
                           std::string* whole) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return common::ErrnoStatus(errno, absl::StrCat("open '", path, "'"));
  }
  absl::Status status;
  if (whole != nullptr) {
    whole->resize(shard.size);
    status = ReadFully(fd, reinterpret_cast<uint8_t*>(whole->data()),
                       shard.size, 0, path);
    if (status.ok() && size > 0) memcpy(dest, whole->data() + offset, size);
  } else {
    status = ReadFully(fd, dest, size, offset, path);
  }
  ::close(fd);
  return status;
}

}  // namespace batchd::server
