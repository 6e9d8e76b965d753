// FakeObjectStore: an ObjectStore over objects held in memory, for tests of
// the shard cache and remote datasets. Counts requests and bytes per URL,
// and can fail reads, delay them, or change an object (new bytes, new
// ETag) under its readers.
//
//   auto store = std::make_shared<FakeObjectStore>();
//   store->Put("s3://b/a.tar", bytes);
//   ObjectInfo info = *store->Stat("s3://b/a.tar");
//
// Thread-safe.
#ifndef BATCHD_SERVER_STORAGE_FAKE_OBJECT_STORE_TEST_UTIL_H_
#define BATCHD_SERVER_STORAGE_FAKE_OBJECT_STORE_TEST_UTIL_H_

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/storage/object_store.h"
#include "server/storage/response_check.h"

namespace batchd::server {

class FakeObjectStore : public ObjectStore {
 public:
  // Adds or replaces `url`; a replacement gets a new ETag.
  void Put(const std::string& url, std::string bytes) {
    absl::MutexLock lock(&mu_);
    Object& object = objects_[url];
    object.bytes = std::move(bytes);
    object.etag = absl::StrCat("\"etag-", ++versions_, "\"");
  }
  // Fails the next `count` ReadRange calls with `status`.
  void FailNextReads(int count, absl::Status status) {
    absl::MutexLock lock(&mu_);
    fail_reads_ = count;
    fail_status_ = std::move(status);
  }
  void set_read_latency(absl::Duration latency) {
    absl::MutexLock lock(&mu_);
    latency_ = latency;
  }

  uint64_t reads() const {
    absl::MutexLock lock(&mu_);
    return reads_;
  }
  uint64_t reads_of(const std::string& url) const {
    absl::MutexLock lock(&mu_);
    auto it = reads_by_url_.find(url);
    return it == reads_by_url_.end() ? 0 : it->second;
  }
  uint64_t bytes_read() const {
    absl::MutexLock lock(&mu_);
    return bytes_read_;
  }
  uint64_t stats() const {
    absl::MutexLock lock(&mu_);
    return stats_;
  }

  absl::StatusOr<ObjectInfo> Stat(const std::string& url) override {
    absl::MutexLock lock(&mu_);
    ++stats_;
    auto it = objects_.find(url);
    if (it == objects_.end()) {
      return absl::NotFoundError(absl::StrCat("'", url, "' does not exist"));
    }
    return ObjectInfo{url, it->second.bytes.size(), it->second.etag};
  }

  absl::StatusOr<std::vector<ObjectInfo>> List(
      const std::string& prefix_url, const ListOptions& options) override {
    absl::MutexLock lock(&mu_);
    std::vector<ObjectInfo> found;
    for (const auto& [url, object] : objects_) {  // sorted by URL
      if (absl::StartsWith(url, prefix_url) &&
          absl::EndsWith(url, options.suffix)) {
        found.push_back({url, object.bytes.size(), object.etag});
      }
    }
    return found;
  }

  absl::Status ReadRange(const ObjectInfo& object, uint64_t offset,
                         uint64_t size, uint8_t* dest) override {
    absl::Duration latency;
    {
      absl::MutexLock lock(&mu_);
      latency = latency_;
    }
    if (latency > absl::ZeroDuration()) absl::SleepFor(latency);
    absl::MutexLock lock(&mu_);
    ++reads_;
    ++reads_by_url_[object.url];
    if (fail_reads_ > 0) {
      --fail_reads_;
      return fail_status_;
    }
    auto it = objects_.find(object.url);
    if (it == objects_.end()) {
      return absl::NotFoundError(
          absl::StrCat("'", object.url, "' does not exist"));
    }
    if (it->second.etag != object.etag) {
      // As HttpClient says it (a 412 to If-Match, or another ETag).
      absl::Status changed = absl::FailedPreconditionError(
          absl::StrCat("'", object.url, "' changed since it was indexed (ETag ",
                       it->second.etag, ", expected ", object.etag, ")"));
      SetStoreFault(changed, StoreFault::kChanged);
      return changed;
    }
    const std::string& bytes = it->second.bytes;
    if (offset > bytes.size() || size > bytes.size() - offset) {
      return absl::OutOfRangeError(absl::StrCat(
          "bytes ", offset, "-", offset + size, " of '", object.url, "'"));
    }
    if (size > 0) memcpy(dest, bytes.data() + offset, size);
    bytes_read_ += size;
    return absl::OkStatus();
  }

 private:
  struct Object {
    std::string bytes;
    std::string etag;
  };
  mutable absl::Mutex mu_;
  std::map<std::string, Object> objects_ ABSL_GUARDED_BY(mu_);
  uint64_t versions_ ABSL_GUARDED_BY(mu_) = 0;
  int fail_reads_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status fail_status_ ABSL_GUARDED_BY(mu_);
  absl::Duration latency_ ABSL_GUARDED_BY(mu_);
  uint64_t reads_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t stats_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t bytes_read_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, uint64_t> reads_by_url_ ABSL_GUARDED_BY(mu_);
};

}  // namespace batchd::server

#endif  // BATCHD_SERVER_STORAGE_FAKE_OBJECT_STORE_TEST_UTIL_H_
