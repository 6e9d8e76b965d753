#include "server/storage/counting_object_store.h"

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

absl::Status CountingObjectStore::ReadRange(const ObjectInfo& object,
                                            uint64_t offset, uint64_t size,
                                            uint8_t* dest) {
  const absl::Time start = absl::Now();
  absl::Status status = store_->ReadRange(object, offset, size, dest);
  counters_->Record(size, status, absl::Now() - start);
  return status;
}

}  // namespace batchd::server
