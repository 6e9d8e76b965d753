#include "server/control/job_stats.h"

namespace batchd::server {

void JobStats::StreamOpened(const std::string& job) {
  absl::MutexLock lock(&mu_);
  ++jobs_[job].streams;
}

void JobStats::StreamClosed(const std::string& job) {
  absl::MutexLock lock(&mu_);
  --jobs_[job].streams;
}

void JobStats::BatchSent(const std::string& job, uint64_t images,
                         uint64_t bytes, uint64_t substitutions,
                         absl::Time now) {
  const int64_t second = absl::ToUnixSeconds(now);
  const int slot = static_cast<int>(second % kBuckets);
  absl::MutexLock lock(&mu_);
  Job& j = jobs_[job];
  ++j.batches;
  j.images += images;
  j.bytes += bytes;
  j.substitutions += substitutions;
  if (j.bucket_second[slot] != second) {
    j.bucket_second[slot] = second;
    j.bucket_images[slot] = 0;
    j.bucket_bytes[slot] = 0;
  }
  j.bucket_images[slot] += images;
  j.bucket_bytes[slot] += bytes;
}

void JobStats::Fill(batchd::v1::ServerStatus* status, absl::Time now) {
  const int64_t second = absl::ToUnixSeconds(now);
  // The current second is partial: count the elapsed part of it.
  const double window =
      (kBuckets - 1) + absl::ToDoubleSeconds(now - absl::FromUnixSeconds(second));
  absl::MutexLock lock(&mu_);
  for (const auto& [name, j] : jobs_) {
    batchd::v1::JobStatus* out = status->add_jobs();
    out->set_job(name);
    out->set_streams(j.streams);
    out->set_batches_sent(j.batches);
    out->set_images_sent(j.images);
    out->set_bytes_sent(j.bytes);
    out->set_substitutions(j.substitutions);
    uint64_t images = 0, bytes = 0;
    for (int i = 0; i < kBuckets; ++i) {
      if (j.bucket_second[i] > second - kBuckets) {
        images += j.bucket_images[i];
        bytes += j.bucket_bytes[i];
      }
    }
    out->set_images_per_second(images / window);
    out->set_bytes_per_second(bytes / window);
  }
}

}  // namespace batchd::server
