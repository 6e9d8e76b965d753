#include "server/stream/buffer_budget.h"

#include "absl/strings/str_cat.h"

namespace batchd::server {

uint32_t BufferBudget::ReserveUpTo(const std::string& job, uint32_t wanted,
                                   uint64_t unit) {
  absl::MutexLock lock(&mu_);
  auto it = by_job_.find(job);
  const uint64_t job_reserved = it == by_job_.end() ? 0 : it->second;
  const uint64_t free =
      std::min(limit_ - reserved_, job_limit_ - job_reserved);
  const uint64_t fits = unit == 0 ? wanted : free / unit;
  const uint32_t granted =
      static_cast<uint32_t>(std::min<uint64_t>(wanted, fits));
  if (granted == 0) return 0;
  reserved_ += granted * unit;
  by_job_[job] += granted * unit;
  return granted;
}

void BufferBudget::Release(const std::string& job, uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  reserved_ -= bytes;
  auto it = by_job_.find(job);
  it->second -= bytes;
  if (it->second == 0) by_job_.erase(it);
}

uint64_t BufferBudget::reserved() const {
  absl::MutexLock lock(&mu_);
  return reserved_;
}

uint64_t BufferBudget::reserved(const std::string& job) const {
  absl::MutexLock lock(&mu_);
  auto it = by_job_.find(job);
  return it == by_job_.end() ? 0 : it->second;
}

absl::Status BufferBudget::Refusal(const std::string& job,
                                   uint64_t batch_bytes) const {
  const uint64_t job_reserved = reserved(job);
  if (job_limit_ - job_reserved < batch_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "job \"", job, "\" holds ", job_reserved,
        " bytes of batch buffers, and a batch of this plan needs ",
        batch_bytes, " more than its share of ", job_limit_,
        " bytes (--max-job-buffer-share of --max-buffer-bytes) allows; close "
        "a stream of this job, lower batch_size, size or prefetch, or raise "
        "--max-job-buffer-share"));
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      "the daemon's batch buffers are full: a batch of this plan needs ",
      batch_bytes, " bytes, ", limit_ - reserved(), " of --max-buffer-bytes=",
      limit_,
      " are free; retry later, lower batch_size or size, or raise "
      "--max-buffer-bytes"));
}

}  // namespace batchd::server
