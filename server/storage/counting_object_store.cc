#include "server/storage/counting_object_store.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace batchd::server {

void ObjectStoreCounters::Record(uint64_t bytes, const absl::Status& status,
                                 absl::Duration elapsed) {
  requests_.fetch_add(1, std::memory_order_relaxed);
  if (status.ok()) {
    bytes_.fetch_add(bytes, std::memory_order_relaxed);
  } else {
    failures_.fetch_add(1, std::memory_order_relaxed);
    if (absl::IsFailedPrecondition(status)) {
      changed_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  LatencyObserver observer;
  {
    absl::MutexLock lock(&mu_);
    observer = observer_;
  }
  if (observer) observer(elapsed);
}

void ObjectStoreCounters::RecordFault(const StoreFaultReport& report) {
  faults_.fetch_add(1, std::memory_order_relaxed);
  const absl::Time now = absl::Now();
  std::string line;
  {
    absl::MutexLock lock(&mu_);
    FaultLog& log = fault_logs_[report.dataset];
    RecentStoreFault& recent = log.recent;
    if (recent.count == 0 || now - recent.latest > kStoreFaultWindow) {
      recent.count = 0;
      recent.since = now;
    }
    recent.dataset = report.dataset;
    ++recent.count;
    recent.latest = now;
    recent.slow = report.slow;
    recent.what = report.what;
    if (now - log.logged < kStoreFaultLogInterval) {
      ++log.unlogged;
      return;
    }
    line = absl::StrCat("batchd: the object store is ",
                        report.slow ? "slow" : "failing", ": ", report.what);
    if (log.unlogged > 0) {
      absl::StrAppend(&line, " (and ", log.unlogged,
                      " more store faults for dataset \"", report.dataset,
                      "\" since the last such line)");
    }
    log.logged = now;
    log.unlogged = 0;
  }
  std::fprintf(stderr, "%s\n", line.c_str());
}

std::vector<RecentStoreFault> ObjectStoreCounters::RecentFaults(
    absl::Time now) const {
  std::vector<RecentStoreFault> out;
  absl::MutexLock lock(&mu_);
  for (const auto& [dataset, log] : fault_logs_) {
    if (log.recent.count > 0 && now - log.recent.latest <= kStoreFaultWindow) {
      out.push_back(log.recent);
    }
  }
  return out;
}

absl::Status CountingObjectStore::ReadRange(const ObjectInfo& object,
                                            uint64_t offset, uint64_t size,
                                            uint8_t* dest) {
  const absl::Time start = absl::Now();
  absl::Status status = store_->ReadRange(object, offset, size, dest);
  counters_->Record(size, status, absl::Now() - start);
  return status;
}

}  // namespace batchd::server
