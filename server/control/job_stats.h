// JobStats: per-job counters and recent rates for the admin status.
//
// Thread-safe.
#ifndef BATCHD_SERVER_CONTROL_JOB_STATS_H_
#define BATCHD_SERVER_CONTROL_JOB_STATS_H_

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "batchd/v1/admin.pb.h"

namespace batchd::server {

class JobStats {
 public:
  void StreamOpened(const std::string& job);
  void StreamClosed(const std::string& job);
  // Records a batch fully handed to gRPC.
  void BatchSent(const std::string& job, uint64_t images, uint64_t bytes,
                 uint64_t substitutions, absl::Time now = absl::Now());
  // Adds one JobStatus per job ever seen to `status`.
  void Fill(batchd::v1::ServerStatus* status, absl::Time now = absl::Now());

 private:
  // Rates are computed over the last kBuckets whole seconds.
  static constexpr int kBuckets = 5;
  struct Job {
    uint32_t streams = 0;
    uint64_t batches = 0, images = 0, bytes = 0, substitutions = 0;
    // Per-second buckets, indexed by (unix second % kBuckets).
    std::array<int64_t, kBuckets> bucket_second{};
    std::array<uint64_t, kBuckets> bucket_images{};
    std::array<uint64_t, kBuckets> bucket_bytes{};
  };
  absl::Mutex mu_;
  std::map<std::string, Job> jobs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace batchd::server

#endif  // BATCHD_SERVER_CONTROL_JOB_STATS_H_
