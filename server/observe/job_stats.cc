#include "server/observe/job_stats.h"

namespace batchd::server {
namespace {

void AddTotals(uint64_t batches, uint64_t images, uint64_t bytes,
               uint64_t substitutions, batchd::v1::JobStatus* out) {
  out->set_batches_sent(out->batches_sent() + batches);
  out->set_images_sent(out->images_sent() + images);
  out->set_bytes_sent(out->bytes_sent() + bytes);
  out->set_substitutions(out->substitutions() + substitutions);
}

}  // namespace

void JobStats::StreamOpened(const std::string& job, absl::Time /*now*/) {
  absl::MutexLock lock(&mu_);
  Job& j = jobs_[job];
  if (j.streams++ == 0 && j.idle_since != absl::InfinitePast()) --idle_jobs_;
}

void JobStats::StreamClosed(const std::string& job, absl::Time now) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job);
  if (it == jobs_.end() || it->second.streams == 0) return;
  Job& j = it->second;
  if (--j.streams > 0) return;
  j.idle_since = now;
  ++idle_jobs_;
  RetireIdleLocked();
}

void JobStats::RetireIdleLocked() {
  while (idle_jobs_ > max_idle_jobs_) {
    auto oldest = jobs_.end();
    for (auto it = jobs_.begin(); it != jobs_.end(); ++it) {
      if (it->second.streams == 0 &&
          (oldest == jobs_.end() ||
           it->second.idle_since < oldest->second.idle_since)) {
        oldest = it;
      }
    }
    const Totals& t = oldest->second.totals;
    retired_.batches += t.batches;
    retired_.images += t.images;
    retired_.bytes += t.bytes;
    retired_.substitutions += t.substitutions;
    ++retired_jobs_;
    jobs_.erase(oldest);
    --idle_jobs_;
  }
}

void JobStats::BatchSent(const std::string& job, uint64_t images,
                         uint64_t bytes, uint64_t substitutions,
                         absl::Time now) {
  const int64_t second = absl::ToUnixSeconds(now);
  const int slot = static_cast<int>(second % kBuckets);
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job);
  if (it == jobs_.end()) return;  // no stream open: nothing was sent
  Job& j = it->second;
  ++j.totals.batches;
  j.totals.images += images;
  j.totals.bytes += bytes;
  j.totals.substitutions += substitutions;
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
    AddTotals(j.totals.batches, j.totals.images, j.totals.bytes,
              j.totals.substitutions, out);
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
  if (retired_jobs_ > 0) {
    status->set_retired_jobs(retired_jobs_);
    batchd::v1::JobStatus* other = status->mutable_other_jobs();
    other->set_job(kOtherJobs);
    AddTotals(retired_.batches, retired_.images, retired_.bytes,
              retired_.substitutions, other);
  }
}

}  // namespace batchd::server
