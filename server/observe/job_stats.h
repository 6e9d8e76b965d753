// JobStats: per-job counters and recent rates for the admin status and the
// metrics.
//
// Bounded: a job with open streams is always listed; of the jobs with none
// (idle), the `max_idle_jobs` most recently active are kept and older ones
// are retired: their totals are added to one "_other" entry (kOtherJobs),
// so that totals never go down and a client cycling through job names
// cannot grow the daemon, GetStatus or /metrics without limit.
//
// Thread-safe.
#ifndef BATCHD_SERVER_OBSERVE_JOB_STATS_H_
#define BATCHD_SERVER_OBSERVE_JOB_STATS_H_

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "batchd/v1/admin.pb.h"

namespace batchd::server {

// The name under which retired jobs are summed; job names cannot start
// with '_' (CheckJobName), so it names no real job.
inline constexpr char kOtherJobs[] = "_other";

class JobStats {
 public:
  static constexpr size_t kDefaultMaxIdleJobs = 64;

  explicit JobStats(size_t max_idle_jobs = kDefaultMaxIdleJobs)
      : max_idle_jobs_(max_idle_jobs) {}

  void StreamOpened(const std::string& job, absl::Time now = absl::Now());
  // REQUIRES: a StreamOpened(job) not yet closed.
  void StreamClosed(const std::string& job, absl::Time now = absl::Now());
  // Records a batch fully handed to gRPC. REQUIRES: the job has a stream
  // open.
  void BatchSent(const std::string& job, uint64_t images, uint64_t bytes,
                 uint64_t substitutions, absl::Time now = absl::Now());
  // Adds one JobStatus per listed job to `status`, and the retired jobs'
  // totals as `status->other_jobs()` (with `retired_jobs`).
  void Fill(batchd::v1::ServerStatus* status, absl::Time now = absl::Now());

 private:
  // Rates are computed over the last kBuckets whole seconds.
  static constexpr int kBuckets = 5;
  struct Totals {
    uint64_t batches = 0, images = 0, bytes = 0, substitutions = 0;
  };
  struct Job {
    uint32_t streams = 0;
    Totals totals;
    // When its last stream closed: idle jobs are retired oldest first.
    absl::Time idle_since = absl::InfinitePast();
    // Per-second buckets, indexed by (unix second % kBuckets).
    std::array<int64_t, kBuckets> bucket_second{};
    std::array<uint64_t, kBuckets> bucket_images{};
    std::array<uint64_t, kBuckets> bucket_bytes{};
  };
  // Retires the longest-idle jobs until at most max_idle_jobs_ are idle.
  void RetireIdleLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t max_idle_jobs_;
  absl::Mutex mu_;
  std::map<std::string, Job> jobs_ ABSL_GUARDED_BY(mu_);
  size_t idle_jobs_ ABSL_GUARDED_BY(mu_) = 0;
  Totals retired_ ABSL_GUARDED_BY(mu_);
  uint64_t retired_jobs_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace batchd::server

#endif  // BATCHD_SERVER_OBSERVE_JOB_STATS_H_
