// ObjectStore: objects (tar shards, shard lists) read from S3 or plain
// HTTP(S) URLs by byte range. The dataset layer reads shard headers and
// members through it; the shard cache (shard_cache.h) downloads whole shards
// through it.
//
// Every read names the ObjectInfo it expects: a read of an object whose ETag
// is no longer the one listed is FAILED_PRECONDITION naming the URL ("changed
// since it was indexed"), never other bytes.
//
// Thread-safe: many reads may be in flight at once (a pool of kept-alive
// connections, --remote-connections).
#ifndef BATCHD_SERVER_STORAGE_OBJECT_STORE_H_
#define BATCHD_SERVER_STORAGE_OBJECT_STORE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "batchd/v1/config.pb.h"

namespace batchd::server {

struct ObjectInfo {
  std::string url;   // as shown to people: s3://bucket/key or https://...
  uint64_t size = 0;
  std::string etag;  // as the store gives it (quotes included); may be empty
};

// --max-shards' default: the most shards of a remote dataset, and the
// most keys a listing may return.
inline constexpr uint64_t kDefaultMaxShards = 1000000;

// How far a listing may go, and what it keeps.
struct ListOptions {
  // Only keys ending in `suffix` are kept (all are counted); "" keeps all.
  std::string suffix;
  // More keys than this (a page without keys counts as one) is
  // RESOURCE_EXHAUSTED naming the dataset and --max-shards.
  uint64_t max_keys = kDefaultMaxShards;
};

class ObjectStore {
 public:
  virtual ~ObjectStore() = default;

  // The object's size and ETag (HEAD). NOT_FOUND naming the URL for 404,
  // PERMISSION_DENIED naming the URL and the credentials for 401/403.
  virtual absl::StatusOr<ObjectInfo> Stat(const std::string& url) = 0;

  // Every object under `prefix_url` (s3://bucket/prefix/) whose key ends
  // in `options.suffix`, sorted by key, across ListObjectsV2 continuation
  // pages. A continuation token seen twice is FAILED_PRECONDITION (the
  // store loops), more than `options.max_keys` RESOURCE_EXHAUSTED, both
  // naming the dataset. UNIMPLEMENTED for stores that cannot list (plain
  // HTTP).
  virtual absl::StatusOr<std::vector<ObjectInfo>> List(
      const std::string& prefix_url, const ListOptions& options) = 0;

  // Bytes [offset, offset + size) of `object` into `dest` (size bytes).
  // Retries 5xx, 429, timeouts, resets and short bodies with backoff; a
  // final failure names the URL, the range and the HTTP status.
  // FAILED_PRECONDITION when the object's ETag is not object.etag;
  // OUT_OF_RANGE when the range is beyond object.size.
  virtual absl::Status ReadRange(const ObjectInfo& object, uint64_t offset,
                                 uint64_t size, uint8_t* dest) = 0;
};

// True for the URL forms a dataset's path may take: s3://, http://, https://.
bool IsRemoteUrl(absl::string_view path);

// Which HTTP redirects an unsigned http(s) request follows
// (--remote-redirects). Signed (s3://) requests follow none.
enum class RemoteRedirects {
  kNone,        // none: a 3xx answer is an error naming its Location
  kSameOrigin,  // only to the same scheme, host and port (at most 5)
};

// A failed attempt of a store request, as HttpClient reports it to
// ObjectStoreOptions::on_fault: transfers that failed, were too slow or
// stalled, or answered an error. Not reported: cancellations, changed
// objects and a store that ignores Range (their own log lines).
struct StoreFaultReport {
  std::string dataset;
  std::string url;   // as shown to people
  bool slow = false;  // too slow or stalled, rather than failing
  std::string what;  // the attempt's error, naming the URL and range
};

// --remote-low-speed-bytes-per-s and --remote-low-speed-seconds' defaults.
inline constexpr int64_t kDefaultLowSpeedBytesPerSecond = 1024;
inline constexpr absl::Duration kDefaultLowSpeedTime = absl::Seconds(10);

// How a store retries and times out. The defaults suit the daemon; tests
// shorten them.
struct ObjectStoreOptions {
  int connections = 32;  // the most requests in flight at once
  int max_attempts = 5;  // per request, the first included
  absl::Duration initial_backoff = absl::Milliseconds(100);  // doubles
  absl::Duration max_backoff = absl::Seconds(5);
  absl::Duration deadline = absl::Minutes(2);  // per request, retries included
  absl::Duration connect_timeout = absl::Seconds(10);
  // A response that sends no byte for this long is a failed attempt
  // (checked about once a second).
  absl::Duration stall_timeout = absl::Seconds(30);
  // An attempt slower than `low_speed_bytes_per_s` over `low_speed_time`
  // fails (libcurl's low-speed limit; --remote-low-speed-bytes-per-s,
  // --remote-low-speed-seconds), so a store that drips a byte a second
  // costs `low_speed_time` an attempt, not `deadline`. 0: no minimum.
  int64_t low_speed_bytes_per_s = kDefaultLowSpeedBytesPerSecond;
  absl::Duration low_speed_time = kDefaultLowSpeedTime;
  // Called (on the requesting thread, no lock held) for each failed
  // attempt; may be empty. Must not block.
  std::function<void(const StoreFaultReport&)> on_fault;
  int list_page_size = 1000;  // ListObjectsV2 max-keys
  RemoteRedirects redirects = RemoteRedirects::kNone;
  // When set and true, every request ends at once with CANCELLED: a
  // transfer in flight is aborted within about a second (libcurl's
  // progress callback), a backoff sleep within 50 ms. Set by the daemon on
  // SIGTERM or SIGINT during start-up.
  std::shared_ptr<const std::atomic<bool>> cancelled;
};

// The store for `config` (its endpoint, region, credentials, CA file; the
// AWS_* environment variables otherwise). `connections`: the most
// requests in flight at once (--remote-connections).
absl::StatusOr<std::unique_ptr<ObjectStore>> MakeObjectStore(
    const batchd::v1::DatasetConfig& config, int connections);
absl::StatusOr<std::unique_ptr<ObjectStore>> MakeObjectStore(
    const batchd::v1::DatasetConfig& config, const ObjectStoreOptions& options);

// The shards of a remote TAR_SHARDS dataset, in sample order: every *.tar
// under an s3:// prefix (a path ending in '/', or a bare bucket), a brace
// range (https://h/s-{000..009}.tar), a shard list object (a path ending in
// ".txt": one URL per line, or a path relative to the list's directory;
// '#' comments), or `config.shards` (each may hold brace ranges). Sizes and
// ETags come from the listing, else from a HEAD per shard (up to 16 at
// once; the first failure stops the rest). NOT_FOUND when a prefix holds
// no *.tar; INVALID_ARGUMENT for a shard whose scheme is not s3, http or
// https (file://, ftp://, ...) and RESOURCE_EXHAUSTED for more than
// `max_shards` shards (or listed keys), each naming the dataset. Long
// listings and HEADs log their progress (progress_log.h).
absl::StatusOr<std::vector<ObjectInfo>> ResolveShardObjects(
    const batchd::v1::DatasetConfig& config, ObjectStore& store,
    uint64_t max_shards = kDefaultMaxShards);

}  // namespace batchd::server

#endif  // BATCHD_SERVER_STORAGE_OBJECT_STORE_H_
