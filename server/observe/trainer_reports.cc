#include "server/observe/trainer_reports.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace batchd::server {
namespace {

// A trainer that computed for no measurable time still took `images`: as
// if each batch had cost it a microsecond, so that demand stays finite.
constexpr double kMinComputeSecondsPerBatch = 1e-6;

}  // namespace

uint64_t TrainerReports::Open(const std::string& job, uint32_t batch_size,
                              absl::Time now) {
  absl::MutexLock lock(&mu_);
  const uint64_t id = next_id_++;
  Stream& stream = streams_[id];
  stream.job = job;
  stream.batch_size = batch_size;
  stream.opened = now;
  return id;
}

void TrainerReports::Close(uint64_t id) {
  absl::MutexLock lock(&mu_);
  streams_.erase(id);
}

absl::Status TrainerReports::Record(uint64_t id,
                                    const batchd::v1::TrainerReport& report,
                                    uint64_t batches_sent, absl::Time now) {
  const double wait = report.wait_seconds();
  const double compute = report.compute_seconds();
  if (!std::isfinite(wait) || !std::isfinite(compute) || wait < 0 ||
      compute < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TrainerReport has wait_seconds ", wait, " and compute_seconds ",
        compute, "; both must be finite and >= 0; the report is ignored"));
  }
  absl::MutexLock lock(&mu_);
  auto it = streams_.find(id);
  if (it == streams_.end()) {
    return absl::FailedPreconditionError(
        "a TrainerReport came before the plan: send `open` first");
  }
  Stream& stream = it->second;
  const double elapsed = absl::ToDoubleSeconds(now - stream.opened + kSlack);
  if (stream.reported_seconds + wait + compute > elapsed) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TrainerReports on this stream account for ",
        stream.reported_seconds + wait + compute,
        " s of waiting and computing, but the plan opened ",
        absl::ToDoubleSeconds(now - stream.opened),
        " s ago; report only the time since the previous report; the report "
        "is ignored"));
  }
  if (report.batches() > batches_sent - stream.reported_batches) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TrainerReports on this stream count ",
        stream.reported_batches + report.batches(), " batches consumed, but ",
        batches_sent,
        " were sent on it; count only this stream's batches; the report is "
        "ignored"));
  }
  stream.reported_seconds += wait + compute;
  stream.reported_batches += report.batches();
  stream.recent.push_back(
      Kept{now, wait, compute, report.batches() * stream.batch_size});
  while (stream.recent.front().received < now - kWindow) {
    stream.recent.pop_front();
  }
  return absl::OkStatus();
}

std::map<std::string, batchd::v1::TrainerLoad> TrainerReports::Loads(
    absl::Time now) {
  struct Sums {
    uint32_t streams = 0;
    double wait = 0, compute = 0;
    // Each trainer's own rate, summed: two trainers computing side by side
    // take twice what one does.
    double demand = 0;
  };
  std::map<std::string, Sums> sums;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, stream] : streams_) {
      while (!stream.recent.empty() &&
             stream.recent.front().received < now - kWindow) {
        stream.recent.pop_front();
      }
      if (stream.recent.empty()) continue;
      double wait = 0, compute = 0;
      uint64_t images = 0;
      for (const Kept& kept : stream.recent) {
        wait += kept.wait_seconds;
        compute += kept.compute_seconds;
        images += kept.images;
      }
      const double batches =
          stream.batch_size > 0 ? static_cast<double>(images / stream.batch_size)
                                : 0;
      compute = std::max(compute, batches * kMinComputeSecondsPerBatch);
      Sums& s = sums[stream.job];
      ++s.streams;
      s.wait += wait;
      s.compute += compute;
      if (compute > 0) s.demand += static_cast<double>(images) / compute;
    }
  }
  std::map<std::string, batchd::v1::TrainerLoad> loads;
  for (const auto& [job, s] : sums) {
    batchd::v1::TrainerLoad& load = loads[job];
    load.set_reporting_streams(s.streams);
    const double total = s.wait + s.compute;
    load.set_wait_ratio(total > 0 ? s.wait / total : 0);
    load.set_demand_images_per_second(s.demand);
  }
  return loads;
}

}  // namespace batchd::server
