// BufferBudget: counts the batch-buffer bytes that streams reserve, against
// a limit over all jobs (--max-buffer-bytes) and a smaller one for each job
// (--max-job-buffer-share), so that one job cannot take the whole daemon.
//
// Thread-safe.
#ifndef BATCHD_SERVER_STREAM_BUFFER_BUDGET_H_
#define BATCHD_SERVER_STREAM_BUFFER_BUDGET_H_

#include <algorithm>
#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace batchd::server {

class BufferBudget {
 public:
  BufferBudget(uint64_t limit, uint64_t job_limit)
      : limit_(limit), job_limit_(std::min(job_limit, limit)) {}
  // The largest n <= `wanted` such that n * `unit` more bytes fit both in
  // the total and in `job`'s limit; reserves them for `job`.
  uint32_t ReserveUpTo(const std::string& job, uint32_t wanted, uint64_t unit)
      ABSL_LOCKS_EXCLUDED(mu_);
  void Release(const std::string& job, uint64_t bytes) ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t reserved() const ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t reserved(const std::string& job) const ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t limit() const { return limit_; }
  uint64_t job_limit() const { return job_limit_; }

  // Why a stream of `job` whose batches need `batch_bytes` each got no
  // window (ReserveUpTo gave 0): RESOURCE_EXHAUSTED naming the job's share
  // or the whole budget, whichever is reserved, and what to change.
  absl::Status Refusal(const std::string& job, uint64_t batch_bytes) const
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const uint64_t limit_;
  const uint64_t job_limit_;
  mutable absl::Mutex mu_;
  uint64_t reserved_ ABSL_GUARDED_BY(mu_) = 0;
  // Jobs with bytes reserved; the sum of the values is reserved_.
  absl::flat_hash_map<std::string, uint64_t> by_job_ ABSL_GUARDED_BY(mu_);
};

}  // namespace batchd::server

#endif  // BATCHD_SERVER_STREAM_BUFFER_BUDGET_H_
