#include "server/stream/buffer_budget.h"

#include "absl/strings/str_cat.h"

namespace batchd::server {
namespace {

uint64_t Held(const absl::flat_hash_map<std::string, uint64_t>& by,
              const std::string& key) {
  auto it = by.find(key);
  return it == by.end() ? 0 : it->second;
}

void Take(absl::flat_hash_map<std::string, uint64_t>& by,
          const std::string& key, uint64_t bytes) {
  auto it = by.find(key);
  it->second -= bytes;
  if (it->second == 0) by.erase(it);
}

}  // namespace

BufferBudget::Reservation BufferBudget::ReserveUpTo(
    const std::string& job, const std::string& identity, uint32_t wanted,
    uint64_t unit) {
  absl::MutexLock lock(&mu_);
  const uint64_t free =
      std::min({limit_ - reserved_, job_limit_ - Held(by_job_, job),
                identity_limit_ - Held(by_identity_, identity)});
  if (wanted == 0 || free < min_stream_bytes_) return {};
  const uint64_t fits = unit == 0 ? wanted : free / unit;
  const uint32_t window =
      static_cast<uint32_t>(std::min<uint64_t>(wanted, fits));
  if (window == 0) return {};
  const uint64_t bytes = std::max(window * unit, min_stream_bytes_);
  reserved_ += bytes;
  by_job_[job] += bytes;
  by_identity_[identity] += bytes;
  return {window, bytes};
}

void BufferBudget::Release(const std::string& job, const std::string& identity,
                           uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  reserved_ -= bytes;
  Take(by_job_, job, bytes);
  Take(by_identity_, identity, bytes);
}

uint64_t BufferBudget::reserved() const {
  absl::MutexLock lock(&mu_);
  return reserved_;
}

uint64_t BufferBudget::reserved(const std::string& job) const {
  absl::MutexLock lock(&mu_);
  return Held(by_job_, job);
}

uint64_t BufferBudget::reserved_by_identity(const std::string& identity) const {
  absl::MutexLock lock(&mu_);
  return Held(by_identity_, identity);
}

absl::Status BufferBudget::Refusal(const std::string& job,
                                   const std::string& identity,
                                   uint64_t batch_bytes) const {
  absl::MutexLock lock(&mu_);
  const uint64_t needed = std::max(batch_bytes, min_stream_bytes_);
  const std::string what =
      needed > batch_bytes
          ? absl::StrCat("a stream is charged at least ", min_stream_bytes_,
                         " bytes (--max-buffer-bytes / --max-open-streams), "
                         "more than a batch of this plan (",
                         batch_bytes, "),")
          : absl::StrCat("a batch of this plan needs ", batch_bytes,
                         " bytes,");
  const uint64_t job_reserved = Held(by_job_, job);
  if (job_limit_ - job_reserved < needed) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "job \"", job, "\" holds ", job_reserved, " bytes of batch buffers, "
        "and ", what, " more than its share of ", job_limit_,
        " bytes (--max-job-buffer-share of --max-buffer-bytes) allows; close "
        "a stream of this job, lower batch_size, size or prefetch, or raise "
        "--max-job-buffer-share"));
  }
  const uint64_t identity_reserved = Held(by_identity_, identity);
  // (An identity share equal to the whole budget is the whole budget's.)
  if (identity_limit_ < limit_ &&
      identity_limit_ - identity_reserved < needed) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "identity ", identity, " holds ", identity_reserved,
        " bytes of batch buffers, and ", what, " more than its share of ",
        identity_limit_,
        " bytes (--max-identity-buffer-share of --max-buffer-bytes) allows; "
        "close a stream of this identity, lower batch_size, size or "
        "prefetch, or raise --max-identity-buffer-share"));
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      "the daemon's batch buffers are full: ", what, " ", limit_ - reserved_,
      " of --max-buffer-bytes=", limit_,
      " are free; retry later, lower batch_size or size, or raise "
      "--max-buffer-bytes"));
}

}  // namespace batchd::server
