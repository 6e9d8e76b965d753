// SharedBatches: the BatchSource (server/pipeline/batch_source.h) that
// makes one build of a batch for every stream whose plan has the same
// fingerprint. While a plan has one stream open, its batches are simply
// built for it, as PipelineBatches does (into its shared-memory slot, if it
// has one: a lone job pays nothing for sharing); from the second stream on
// they go through the table. Streams need not know which: they make the
// same call either way. A batch is a pure function of (plan, epoch, batch
// index), so streams of identical plans (a sweep's jobs, or a job's
// restart) want byte-identical batches: the first request of a batch
// starts its build, later ones attach to it, and a finished batch is kept
// for requests that come later, in a retention budget of bytes evicted
// oldest first. A stream that falls behind past the retention rebuilds the
// batch (same bytes).
//
//   SharedBatches shared(&pipeline, {.retention_bytes = 256 << 20});
//   RETURN_IF_ERROR(shared.Get(plan, epoch, index, cancellation,
//       [](std::shared_ptr<const BuiltBatch> batch) { ... }, /*slot=*/{}));
//
// Memory: a batch being built or sent is in the buffers of the streams
// that reserved it (each stream's reservation covers it, so sharing only
// lowers use); the retained ones are at most `retention_bytes` more.
//
// Thread-safe.
#ifndef BATCHD_SERVER_PIPELINE_SHARED_BATCHES_H_
#define BATCHD_SERVER_PIPELINE_SHARED_BATCHES_H_

#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "batchd/v1/admin.pb.h"
#include "server/pipeline/batch_source.h"
#include "server/pipeline/pipeline.h"
#include "server/plan/resolved_plan.h"

namespace batchd::server {

struct SharedBatchesOptions {
  // Finished batches kept for later requests, bytes; 0 keeps none (streams
  // still share the builds they ask for while those run).
  uint64_t retention_bytes = uint64_t{128} << 20;
};

// Per fingerprint (FingerprintLabel), since the daemon started.
struct SharingCounts {
  uint64_t built = 0;     // batches built
  uint64_t attached = 0;  // requests served by a build already running
  uint64_t retained = 0;  // requests served by a retained batch
};

class SharedBatches final : public BatchSource {
 public:
  // `pipeline` is not owned and must outlive this.
  SharedBatches(Pipeline* pipeline, SharedBatchesOptions options);

  // A stream of `plan` opened, or closed: sharing starts with the second.
  void StreamOpened(const ResolvedPlan& plan) override
      ABSL_LOCKS_EXCLUDED(mu_);
  void StreamClosed(const ResolvedPlan& plan) override
      ABSL_LOCKS_EXCLUDED(mu_);

  // Calls `done` once with batch `batch_index` of `epoch` of `plan`: a
  // retained one (inline, before Get returns), the one being built, or a
  // new build's (on a pool thread). With nullptr when `cancelled` was set
  // before the batch was ready. With a `slot` (a client's shared memory;
  // empty for none) the batch's pixels are in the slot: built there for a
  // plan with one stream, copied there from the shared build otherwise.
  // Errors as Pipeline::BuildBatch (`done` is then never called).
  absl::Status Get(std::shared_ptr<const ResolvedPlan> plan, uint64_t epoch,
                   uint64_t batch_index, BatchCancellation cancelled,
                   Done done, BatchDestination slot) override
      ABSL_LOCKS_EXCLUDED(mu_);

  // The most recently used kMaxCountedPlans fingerprints; older ones are
  // summed under "_other", so that clients cycling through seeds cannot
  // grow the table.
  static constexpr size_t kMaxCountedPlans = 64;
  std::map<std::string, SharingCounts> counts() const ABSL_LOCKS_EXCLUDED(mu_);
  // Everything above, for GetStatus and the metrics.
  void Fill(batchd::v1::SharedBatchStatus* status) const
      ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t retained_bytes() const ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t evictions() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // (fingerprint, epoch, the epoch's start position, batch index): the
  // start position differs only in a resumed epoch.
  using Key = std::tuple<std::string, uint64_t, uint64_t, uint64_t>;
  struct Waiter {
    BatchCancellation cancelled;
    Done done;
  };
  struct Entry {
    std::shared_ptr<const ResolvedPlan> plan;
    // While building: who waits. The build carries the first one's
    // cancellation; if that one withdraws, the rest get a new build.
    std::vector<Waiter> waiters;
    // Once built and retained.
    std::shared_ptr<const BuiltBatch> batch;
    std::list<Key>::iterator lru;
  };

  // Starts the build of `entry` for its first waiter.
  absl::Status StartBuildLocked(const Key& key, Entry& entry)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnBuilt(const Key& key, std::unique_ptr<BuiltBatch> batch)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Drops the oldest retained batches until the budget holds.
  void EvictLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The counts of `fingerprint`'s plan, made most recently used.
  SharingCounts& CountsLocked(const std::string& fingerprint)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Pipeline* const pipeline_;
  // Builds the batches of a plan with one stream open.
  PipelineBatches alone_;
  const SharedBatchesOptions options_;

  mutable absl::Mutex mu_;
  std::map<Key, Entry> entries_ ABSL_GUARDED_BY(mu_);
  // Open streams by fingerprint; plans with none absent.
  std::map<std::string, int> open_streams_ ABSL_GUARDED_BY(mu_);
  // Retained keys, oldest first.
  std::list<Key> lru_ ABSL_GUARDED_BY(mu_);
  uint64_t retained_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t evictions_ ABSL_GUARDED_BY(mu_) = 0;
  struct Counted {
    SharingCounts counts;
    uint64_t last_used = 0;
  };
  std::map<std::string, Counted> counts_ ABSL_GUARDED_BY(mu_);
  SharingCounts other_counts_ ABSL_GUARDED_BY(mu_);
  uint64_t uses_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace batchd::server

#endif  // BATCHD_SERVER_PIPELINE_SHARED_BATCHES_H_
