// CountingObjectStore: an ObjectStore that forwards to another and counts
// what went through it (requests, bytes, failures, ETag changes, request
// latency) in an ObjectStoreCounters shared with whoever reports them (the
// daemon's status and metrics). One counters object may serve many stores.
//
// ObjectStoreCounters also keeps each dataset's recent store faults (failed,
// slow or stalled attempts, from ObjectStoreOptions::on_fault): they are
// logged, at most one line per dataset every kStoreFaultLogInterval with a
// count of the rest, and RecentFaults() gives the daemon's verdict its
// "the object store is failing/slow" (common/daemon_verdict.h).
//
// Thread-safe.
#ifndef BATCHD_SERVER_STORAGE_COUNTING_OBJECT_STORE_H_
#define BATCHD_SERVER_STORAGE_COUNTING_OBJECT_STORE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/storage/object_store.h"

namespace batchd::server {

// A dataset's store faults over the last kStoreFaultWindow.
struct RecentStoreFault {
  std::string dataset;
  bool slow = false;    // the latest fault was a slow or stalled transfer
  uint64_t count = 0;   // faults since `since`
  absl::Time since;     // the window's start (at most kStoreFaultWindow ago)
  absl::Time latest;
  std::string what;     // the latest fault's error (dataset, URL, range)
};

// Faults older than this no longer count as the store failing.
inline constexpr absl::Duration kStoreFaultWindow = absl::Seconds(60);
// At most one log line per dataset this often (the rest are counted in it).
inline constexpr absl::Duration kStoreFaultLogInterval = absl::Seconds(10);

class ObjectStoreCounters {
 public:
  // Called after each ReadRange with its duration (a latency histogram).
  using LatencyObserver = std::function<void(absl::Duration)>;

  uint64_t requests() const { return requests_.load(); }  // ReadRange calls
  uint64_t bytes() const { return bytes_.load(); }        // bytes returned
  uint64_t failures() const { return failures_.load(); }  // failed calls
  // Of the failures: FAILED_PRECONDITION, the object changed.
  uint64_t changed() const { return changed_.load(); }

  void set_latency_observer(LatencyObserver observer) {
    absl::MutexLock lock(&mu_);
    observer_ = std::move(observer);
  }
  void Record(uint64_t bytes, const absl::Status& status,
              absl::Duration elapsed);

  // A failed attempt of a store request: counted, and logged to stderr
  // (rate-limited, see above). Thread-safe; never blocks on I/O for long
  // (one fprintf).
  void RecordFault(const StoreFaultReport& report);
  // Datasets whose store failed within kStoreFaultWindow of `now`, by name.
  std::vector<RecentStoreFault> RecentFaults(absl::Time now) const;
  uint64_t faults() const { return faults_.load(); }  // since start

 private:
  struct FaultLog {
    RecentStoreFault recent;
    absl::Time logged = absl::InfinitePast();  // the last line
    uint64_t unlogged = 0;  // faults since that line, not in one
  };

  std::atomic<uint64_t> faults_{0};
  std::atomic<uint64_t> requests_{0};
  std::atomic<uint64_t> bytes_{0};
  std::atomic<uint64_t> failures_{0};
  std::atomic<uint64_t> changed_{0};
  mutable absl::Mutex mu_;
  LatencyObserver observer_ ABSL_GUARDED_BY(mu_);
  // By dataset: bounded by the datasets the daemon serves.
  std::map<std::string, FaultLog> fault_logs_ ABSL_GUARDED_BY(mu_);
};

class CountingObjectStore : public ObjectStore {
 public:
  CountingObjectStore(std::shared_ptr<ObjectStore> store,
                      std::shared_ptr<ObjectStoreCounters> counters)
      : store_(std::move(store)), counters_(std::move(counters)) {}

  absl::StatusOr<ObjectInfo> Stat(const std::string& url) override {
    return store_->Stat(url);
  }
  absl::StatusOr<std::vector<ObjectInfo>> List(
      const std::string& prefix_url, const ListOptions& options) override {
    return store_->List(prefix_url, options);
  }
  absl::Status ReadRange(const ObjectInfo& object, uint64_t offset,
                         uint64_t size, uint8_t* dest) override;

 private:
  const std::shared_ptr<ObjectStore> store_;
  const std::shared_ptr<ObjectStoreCounters> counters_;
};

}  // namespace batchd::server

#endif  // BATCHD_SERVER_STORAGE_COUNTING_OBJECT_STORE_H_
