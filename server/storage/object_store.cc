// The ObjectStore over HTTP(S) and S3 (HttpClient), MakeObjectStore and
// ResolveShardObjects.
#include "server/storage/object_store.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "server/storage/http_client.h"
#include "server/storage/object_url.h"
#include "server/storage/progress_log.h"
#include "server/storage/s3_credentials.h"

namespace batchd::server {
namespace {

using batchd::v1::DatasetConfig;

constexpr uint64_t kMaxShardListBytes = uint64_t{64} << 20;
constexpr uint64_t kMaxListPageBytes = uint64_t{64} << 20;
constexpr int kMaxStatThreads = 16;

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::string() : std::string(value);
}

// Reads http(s):// URLs as they are and s3:// URLs through `endpoint_`.
class RemoteObjectStore : public ObjectStore {
 public:
  RemoteObjectStore(std::string dataset, std::string endpoint,
                    bool virtual_host, int list_page_size,
                    HttpClientOptions http)
      : dataset_(std::move(dataset)),
        endpoint_(std::move(endpoint)),
        virtual_host_(virtual_host),
        list_page_size_(list_page_size),
        http_(std::move(http)) {}

  absl::StatusOr<ObjectInfo> Stat(const std::string& url) override {
    ASSIGN_OR_RETURN(std::string http_url, HttpUrl(url));
    ASSIGN_OR_RETURN(HttpClient::HeadResult head, http_.Head(http_url, url));
    return ObjectInfo{url, head.size, head.etag};
  }

  absl::StatusOr<std::vector<ObjectInfo>> List(
      const std::string& prefix_url, const ListOptions& options) override {
    if (!absl::StartsWith(prefix_url, "s3://")) {
      return absl::UnimplementedError(absl::StrCat(
          "dataset \"", dataset_, "\": cannot list ", prefix_url,
          ": only s3:// prefixes can be listed (name the shards with a brace "
          "range or a shard list instead)"));
    }
    ASSIGN_OR_RETURN(S3Location loc, ParseS3Url(prefix_url));
    std::vector<ObjectInfo> out;
    std::string token;
    // Hashes of the tokens seen: a store that hands one out twice would
    // have the listing loop forever. 8 bytes a page, whatever the tokens.
    absl::flat_hash_set<size_t> tokens_seen;
    uint64_t keys = 0;  // listed, kept or not; an empty page counts one
    int pages = 0;
    ProgressLog progress(dataset_, absl::StrCat("listing ", prefix_url),
                         "keys", /*total=*/0);
    while (true) {
      // The query's parameters in SigV4's canonical (sorted) order.
      std::string query;
      if (!token.empty()) {
        absl::StrAppend(&query, "continuation-token=",
                        UriEncode(token, /*keep_slash=*/false), "&");
      }
      absl::StrAppend(&query, "list-type=2&max-keys=", list_page_size_,
                      "&prefix=", UriEncode(loc.key, /*keep_slash=*/false));
      const std::string url = absl::StrCat(
          S3HttpUrl(endpoint_, virtual_host_, loc.bucket, ""), "?", query);
      ASSIGN_OR_RETURN(std::string xml,
                       http_.GetAll(url, prefix_url, kMaxListPageBytes));
      absl::StatusOr<ListPage> page = ParseListObjectsV2(xml, loc.bucket);
      if (!page.ok()) {
        return absl::Status(page.status().code(),
                            absl::StrCat("dataset \"", dataset_, "\": ",
                                         page.status().message()));
      }
      ++pages;
      keys += std::max<size_t>(1, page->objects.size());
      if (keys > options.max_keys) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "dataset \"", dataset_, "\": listing ", prefix_url,
            " went past ", options.max_keys, " keys (", pages,
            " pages); raise --max-shards if the dataset is that large, or "
            "name a narrower prefix"));
      }
      for (ObjectInfo& info : page->objects) {
        if (absl::EndsWith(info.url, options.suffix)) {
          out.push_back(std::move(info));
        }
      }
      progress.Add(page->objects.size(), xml.size());
      if (!page->truncated) break;
      token = std::move(page->next_continuation_token);
      if (!tokens_seen.insert(std::hash<std::string>()(token)).second) {
        return absl::FailedPreconditionError(absl::StrCat(
            "dataset \"", dataset_, "\": listing ", prefix_url,
            ": the store returned continuation token \"",
            absl::CHexEscape(token.substr(0, 64)),
            token.size() > 64 ? "..." : "", "\" a second time (page ", pages,
            ", ", keys, " keys); a store that repeats a token would be listed "
            "forever"));
      }
    }
    std::sort(out.begin(), out.end(),
              [](const ObjectInfo& a, const ObjectInfo& b) {
                return a.url < b.url;
              });
    return out;
  }

  absl::Status ReadRange(const ObjectInfo& object, uint64_t offset,
                         uint64_t size, uint8_t* dest) override {
    if (offset > object.size || size > object.size - offset) {
      return absl::OutOfRangeError(absl::StrCat(
          "dataset \"", dataset_, "\": ", object.url, " bytes=", offset, "-",
          offset + size - 1, " is beyond the object's ", object.size,
          " bytes"));
    }
    ASSIGN_OR_RETURN(std::string http_url, HttpUrl(object.url));
    return http_.GetRange(http_url, object.url, offset, size, object.etag,
                          object.size, dest);
  }

 private:
  absl::StatusOr<std::string> HttpUrl(const std::string& url) const {
    if (absl::StartsWith(url, "http://") || absl::StartsWith(url, "https://")) {
      return url;
    }
    ASSIGN_OR_RETURN(S3Location loc, ParseS3Url(url));
    return S3HttpUrl(endpoint_, virtual_host_, loc.bucket, loc.key);
  }

  // Constant after construction.
  const std::string dataset_;
  const std::string endpoint_;  // for s3:// URLs
  const bool virtual_host_;
  const int list_page_size_;
  HttpClient http_;  // thread-safe
};

// s3://bucket/ or s3://bucket/prefix/ (a trailing '/'), or a bare bucket.
bool IsS3Prefix(const std::string& path) {
  absl::StatusOr<S3Location> loc = ParseS3Url(path);
  return loc.ok() && (loc->key.empty() || absl::EndsWith(loc->key, "/"));
}

// Stat of every URL in `urls`, in order, up to kMaxStatThreads at once;
// the first failure stops the rest and is returned.
absl::StatusOr<std::vector<ObjectInfo>> StatAll(
    const std::string& dataset, const std::vector<std::string>& urls,
    ObjectStore& store) {
  std::vector<ObjectInfo> out(urls.size());
  std::atomic<size_t> next{0};
  absl::Mutex mu;
  absl::Status first_error;  // guarded by mu
  std::atomic<bool> failed{false};
  ProgressLog progress(dataset, "HEAD of each shard", "shards", urls.size());
  auto work = [&] {
    for (size_t i = next++; i < urls.size() && !failed.load(); i = next++) {
      absl::StatusOr<ObjectInfo> info = store.Stat(urls[i]);
      if (!info.ok()) {
        absl::MutexLock lock(&mu);
        if (first_error.ok()) first_error = info.status();
        failed.store(true);
        return;
      }
      out[i] = *std::move(info);
      progress.Add(1, 0);
    }
  };
  const int threads = static_cast<int>(
      std::min<size_t>(kMaxStatThreads, urls.size()));
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  if (!first_error.ok()) return first_error;
  return out;
}

}  // namespace

bool IsRemoteUrl(absl::string_view path) {
  return absl::StartsWith(path, "s3://") || absl::StartsWith(path, "http://") ||
         absl::StartsWith(path, "https://");
}

absl::StatusOr<std::unique_ptr<ObjectStore>> MakeObjectStore(
    const DatasetConfig& config, int connections) {
  ObjectStoreOptions options;
  options.connections = connections;
  return MakeObjectStore(config, options);
}

absl::StatusOr<std::unique_ptr<ObjectStore>> MakeObjectStore(
    const DatasetConfig& config, const ObjectStoreOptions& options) {
  if (options.connections < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("remote connections must be at least 1, not ",
                     options.connections));
  }
  std::string region = config.region();
  if (region.empty()) region = Env("AWS_REGION");
  if (region.empty()) region = Env("AWS_DEFAULT_REGION");
  if (region.empty()) region = "us-east-1";
  std::string endpoint = config.endpoint();
  if (endpoint.empty()) endpoint = Env("AWS_ENDPOINT_URL");
  const bool custom_endpoint = !endpoint.empty();
  if (endpoint.empty()) {
    endpoint = absl::StrCat("https://s3.", region, ".amazonaws.com");
  }
  if (!absl::StartsWith(endpoint, "http://") &&
      !absl::StartsWith(endpoint, "https://")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dataset \"", config.name(), "\": endpoint \"", endpoint,
        "\" must start with http:// or https://"));
  }
  bool virtual_host = !custom_endpoint;
  if (config.s3_addressing() == DatasetConfig::S3_PATH_STYLE) {
    virtual_host = false;
  } else if (config.s3_addressing() == DatasetConfig::S3_VIRTUAL_HOST) {
    virtual_host = true;
  }

  HttpClientOptions http;
  http.dataset = config.name();
  http.store = options;
  http.ca_file = config.ca_file();
  // Credentials only matter for s3:// datasets; plain URLs go unsigned.
  bool s3 = absl::StartsWith(config.path(), "s3://");
  for (const std::string& shard : config.shards()) {
    s3 = s3 || absl::StartsWith(shard, "s3://");
  }
  if (s3) {
    absl::StatusOr<S3Credentials> creds =
        LoadS3Credentials(config.credentials_file());
    if (!creds.ok()) {
      return absl::Status(creds.status().code(),
                          absl::StrCat("dataset \"", config.name(), "\": ",
                                       creds.status().message()));
    }
    http.sigv4 = absl::StrCat("aws:amz:", region, ":s3");
    http.access_key = creds->access_key;
    http.secret_key = creds->secret_key;
    http.session_token = creds->session_token;
  }
  return std::unique_ptr<ObjectStore>(new RemoteObjectStore(
      config.name(), endpoint, virtual_host,
      std::max(1, options.list_page_size), std::move(http)));
}

absl::StatusOr<std::vector<ObjectInfo>> ResolveShardObjects(
    const DatasetConfig& config, ObjectStore& store, uint64_t max_shards) {
  const std::string& path = config.path();
  auto named = [&](const absl::Status& status) {
    return absl::Status(status.code(),
                        absl::StrCat("dataset \"", config.name(), "\": ",
                                     status.message()));
  };
  std::vector<std::string> urls;
  if (!config.shards().empty()) {
    for (const std::string& shard : config.shards()) {
      absl::StatusOr<std::vector<std::string>> expanded =
          ExpandBraces(shard, max_shards);
      if (!expanded.ok()) return named(expanded.status());
      urls.insert(urls.end(), expanded->begin(), expanded->end());
      if (urls.size() > max_shards) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "dataset \"", config.name(), "\": more than ", max_shards,
            " shards (--max-shards)"));
      }
    }
  } else if (IsS3Prefix(path)) {
    ListOptions list;
    list.suffix = ".tar";
    list.max_keys = max_shards;
    ASSIGN_OR_RETURN(std::vector<ObjectInfo> shards, store.List(path, list));
    if (shards.empty()) {
      return absl::NotFoundError(absl::StrCat(
          "dataset \"", config.name(), "\": no *.tar object under ", path,
          "; wrong prefix?"));
    }
    return shards;
  } else if (absl::EndsWith(path, ".txt")) {
    ASSIGN_OR_RETURN(ObjectInfo list, store.Stat(path));
    if (list.size > kMaxShardListBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "dataset \"", config.name(), "\": shard list ", path, " is ",
          list.size, " bytes, more than a shard list should be"));
    }
    std::string text(list.size, '\0');
    RETURN_IF_ERROR(store.ReadRange(list, 0, list.size,
                                    reinterpret_cast<uint8_t*>(text.data())));
    absl::StatusOr<std::vector<std::string>> listed =
        ParseShardList(text, path, max_shards);
    if (!listed.ok()) return named(listed.status());
    urls = *std::move(listed);
    if (urls.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "dataset \"", config.name(), "\": shard list ", path,
          " lists no shard"));
    }
  } else {
    absl::StatusOr<std::vector<std::string>> expanded =
        ExpandBraces(path, max_shards);
    if (!expanded.ok()) return named(expanded.status());
    urls = *std::move(expanded);
  }
  for (const std::string& url : urls) {
    if (!IsRemoteUrl(url)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "dataset \"", config.name(), "\": shard \"", url,
          "\" is not an s3://, http:// or https:// URL"));
    }
  }
  return StatAll(config.name(), urls, store);
}

}  // namespace batchd::server
