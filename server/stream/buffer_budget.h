// BufferBudget: counts the batch-buffer bytes that streams reserve, against
// a limit over all jobs (--max-buffer-bytes), a smaller one for each job
// (--max-job-buffer-share) and one for each identity, the caller's token
// or else its peer host (--max-identity-buffer-share), so that neither one
// job nor one caller can take the whole daemon. Every stream is charged at
// least `min_stream_bytes` whatever its plan asks (a 1x1 plan would
// otherwise hold a place for almost nothing): streams cost budget as they
// cost places.
//
// Thread-safe.
#ifndef BATCHD_SERVER_STREAM_BUFFER_BUDGET_H_
#define BATCHD_SERVER_STREAM_BUFFER_BUDGET_H_

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace batchd::server {

class BufferBudget {
 public:
  // What a stream got: `window` batches, charged `bytes` (at least
  // min_stream_bytes). A window of 0 reserved nothing.
  struct Reservation {
    uint32_t window = 0;
    uint64_t bytes = 0;
  };

  BufferBudget(uint64_t limit, uint64_t job_limit,
               uint64_t identity_limit = std::numeric_limits<uint64_t>::max(),
               uint64_t min_stream_bytes = 0)
      : limit_(limit),
        job_limit_(std::min(job_limit, limit)),
        identity_limit_(std::min(identity_limit, limit)),
        min_stream_bytes_(min_stream_bytes) {}
  // The largest window n <= `wanted` such that max(n * `unit`,
  // min_stream_bytes) more bytes fit in the total, `job`'s limit and
  // `identity`'s limit; reserves them for both.
  Reservation ReserveUpTo(const std::string& job, const std::string& identity,
                          uint32_t wanted, uint64_t unit)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Gives back what ReserveUpTo reserved: `bytes` is its Reservation's.
  void Release(const std::string& job, const std::string& identity,
               uint64_t bytes) ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t reserved() const ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t reserved(const std::string& job) const ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t reserved_by_identity(const std::string& identity) const
      ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t limit() const { return limit_; }
  uint64_t job_limit() const { return job_limit_; }
  uint64_t identity_limit() const { return identity_limit_; }
  uint64_t min_stream_bytes() const { return min_stream_bytes_; }

  // Why a stream of `job` from `identity` whose batches need `batch_bytes`
  // each got no window (ReserveUpTo gave 0): RESOURCE_EXHAUSTED naming the
  // job's share, the identity's share or the whole budget, whichever is
  // reserved, and what to change.
  absl::Status Refusal(const std::string& job, const std::string& identity,
                       uint64_t batch_bytes) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const uint64_t limit_;
  const uint64_t job_limit_;
  const uint64_t identity_limit_;
  const uint64_t min_stream_bytes_;
  mutable absl::Mutex mu_;
  uint64_t reserved_ ABSL_GUARDED_BY(mu_) = 0;
  // Jobs and identities with bytes reserved; the values of each map sum
  // to reserved_.
  absl::flat_hash_map<std::string, uint64_t> by_job_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, uint64_t> by_identity_ ABSL_GUARDED_BY(mu_);
};

}  // namespace batchd::server

#endif  // BATCHD_SERVER_STREAM_BUFFER_BUDGET_H_
