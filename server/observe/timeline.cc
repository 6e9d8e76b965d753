#include "server/observe/timeline.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "common/daemon_verdict.h"

namespace batchd::server {
namespace {

uint64_t ImagesSent(const batchd::v1::ServerStatus& status) {
  uint64_t images = 0;
  for (const batchd::v1::JobStatus& job : status.jobs()) {
    images += job.images_sent();
  }
  return images;
}

uint64_t AutoscaleChanges(const batchd::v1::ServerStatus& status) {
  return status.autoscale().grows() + status.autoscale().shrinks() +
         status.autoscale().step_backs();
}

// Milliseconds per item of `seconds` spent over `items`; absent for none.
std::optional<double> MsPer(double seconds, uint64_t items) {
  if (items == 0 || seconds < 0) return std::nullopt;
  return 1000.0 * seconds / static_cast<double>(items);
}

// NaN for an absent value, as a TimelineSeries stores it.
double OrNan(bool present, double value) {
  return present ? value : std::numeric_limits<double>::quiet_NaN();
}

std::optional<double> FromNan(double value) {
  if (std::isnan(value)) return std::nullopt;
  return value;
}

}  // namespace

Timeline::Timeline(int capacity) : capacity_(capacity) {}

void Timeline::Add(const batchd::v1::ServerStatus& status, absl::Time at) {
  TimelinePoint point;
  point.at = at;
  point.workers = status.workers();
  point.busy_fraction = status.busy_fraction();
  point.queued_samples = status.queued_samples();
  point.buffer_reserved_bytes = status.buffer_bytes_reserved();
  point.buffer_idle_bytes = status.buffer_bytes_idle();
  point.max_buffer_bytes = status.max_buffer_bytes();
  double demand = 0;
  for (const batchd::v1::JobStatus& job : status.jobs()) {
    if (job.trainer().reporting_streams() > 0) {
      demand += job.trainer().demand_images_per_second();
    }
  }
  if (status.capacity_demand_ratio() > 0) {
    point.capacity_images_per_second =
        demand / status.capacity_demand_ratio();
  }
  const common::DaemonVerdict verdict = common::JudgeDaemon(status);
  point.verdict_kind = verdict.kind;
  point.verdict = verdict.line;
  point.shard_cache = common::ShardCacheSummary(status);

  absl::MutexLock lock(&mu_);
  if (last_.has_value() && at > last_at_) {
    const batchd::v1::ServerStatus& before = *last_;
    const double seconds = absl::ToDoubleSeconds(at - last_at_);
    // Counters restart with the daemon only; a decrease is not a rate.
    if (status.samples_substituted() >= before.samples_substituted()) {
      point.substitutions_per_second =
          static_cast<double>(status.samples_substituted() -
                              before.samples_substituted()) /
          seconds;
    }
    if (status.samples_decoded() >= before.samples_decoded()) {
      const uint64_t decoded =
          status.samples_decoded() - before.samples_decoded();
      const batchd::v1::StageSeconds& now = status.stage_seconds();
      const batchd::v1::StageSeconds& then = before.stage_seconds();
      point.read_ms = MsPer(now.read() - then.read(), decoded);
      point.decode_ms = MsPer(now.decode() - then.decode(), decoded);
      point.transform_ms =
          MsPer(now.transform() - then.transform(), decoded);
      point.augment_ms = MsPer(now.augment() - then.augment(), decoded);
    }
    const uint64_t sent_now = ImagesSent(status);
    const uint64_t sent_then = ImagesSent(before);
    if (sent_now >= sent_then) {
      point.send_ms = MsPer(status.stage_seconds().send() -
                                before.stage_seconds().send(),
                            sent_now - sent_then);
    }
    if (AutoscaleChanges(status) != AutoscaleChanges(before)) {
      point.autoscale_change = status.autoscale().last_change();
    }
  }
  last_ = status;
  last_at_ = at;
  Stored stored;
  stored.point = std::move(point);
  stored.jobs.reserve(status.jobs_size());
  for (const batchd::v1::JobStatus& job : status.jobs()) {
    const bool reports = job.trainer().reporting_streams() > 0;
    const uint32_t id = Intern(job.job());
    ++refs_[id];
    images_sum_[id] += job.images_per_second();
    stored.jobs.push_back(
        {id, job.images_per_second(),
         OrNan(reports, job.trainer().wait_ratio()),
         OrNan(reports, job.trainer().demand_images_per_second())});
  }
  points_.push_back(std::move(stored));
  ++added_;
  while (points_.size() > static_cast<size_t>(capacity_)) {
    Release(points_.front());
    points_.pop_front();
  }
}

uint32_t Timeline::Intern(const std::string& name) {
  auto [it, added] = ids_.try_emplace(name, 0);
  if (!added) return it->second;
  uint32_t id;
  if (!free_ids_.empty()) {
    id = free_ids_.back();
    free_ids_.pop_back();
    names_[id] = name;
  } else {
    id = static_cast<uint32_t>(names_.size());
    names_.push_back(name);
    refs_.push_back(0);
    images_sum_.push_back(0);
  }
  it->second = id;
  return id;
}

void Timeline::Release(const Stored& stored) {
  for (const StoredJob& job : stored.jobs) {
    images_sum_[job.id] -= job.images_per_second;
    if (--refs_[job.id] > 0) continue;
    ids_.erase(names_[job.id]);
    names_[job.id].clear();
    names_[job.id].shrink_to_fit();
    images_sum_[job.id] = 0;  // no rounding left over for the next name
    free_ids_.push_back(job.id);
  }
}

std::vector<TimelinePoint> Timeline::Points() const {
  absl::MutexLock lock(&mu_);
  std::vector<TimelinePoint> points;
  points.reserve(points_.size());
  for (const Stored& stored : points_) {
    TimelinePoint point = stored.point;
    for (const StoredJob& job : stored.jobs) {
      point.jobs.push_back({names_[job.id], job.images_per_second,
                            FromNan(job.wait_ratio),
                            FromNan(job.demand_images_per_second)});
    }
    points.push_back(std::move(point));
  }
  return points;
}

uint64_t Timeline::version() const {
  absl::MutexLock lock(&mu_);
  return added_;
}

TimelineView Timeline::View(int max_jobs) const {
  max_jobs = std::max(max_jobs, 1);
  absl::MutexLock lock(&mu_);
  TimelineView view;
  view.capacity = capacity_;
  view.version = added_;
  const size_t n = points_.size();
  view.points.reserve(n);
  for (const Stored& stored : points_) view.points.push_back(stored.point);

  // The jobs held, busiest first; the first max_jobs get series.
  std::vector<uint32_t> held;
  for (uint32_t id = 0; id < names_.size(); ++id) {
    if (refs_[id] > 0) held.push_back(id);
  }
  // The lambdas see the guarded vectors through pointers taken under the
  // lock (thread-safety analysis does not follow a lambda's captures).
  const double* images_sum = images_sum_.data();
  const std::string* names = names_.data();
  const auto busier = [&](uint32_t a, uint32_t b) {
    if (images_sum[a] != images_sum[b]) return images_sum[a] > images_sum[b];
    return names[a] < names[b];
  };
  // "_other" sorts last so that it is never picked.
  const auto it = ids_.find(kTimelineOtherJob);
  const int64_t other_id = it == ids_.end() ? -1 : it->second;
  const auto rank = [&](uint32_t a, uint32_t b) {
    const bool a_other = a == other_id, b_other = b == other_id;
    if (a_other != b_other) return b_other;
    return busier(a, b);
  };
  size_t picked = std::min(held.size(), static_cast<size_t>(max_jobs));
  std::partial_sort(held.begin(), held.begin() + picked, held.end(), rank);
  if (picked > 0 && held[picked - 1] == other_id) --picked;
  std::sort(held.begin(), held.begin() + picked,
            [&](uint32_t a, uint32_t b) { return names[a] < names[b]; });
  view.other_jobs = static_cast<int>(held.size() - picked);

  // Per number, its series (the last for "_other").
  constexpr int kUnset = -1;
  std::vector<int> series_of(names_.size(), kUnset);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const auto new_series = [&](std::string job) {
    TimelineSeries series;
    series.job = std::move(job);
    series.images_per_second.assign(n, nan);
    series.wait_ratio.assign(n, nan);
    series.demand_images_per_second.assign(n, nan);
    view.jobs.push_back(std::move(series));
    return static_cast<int>(view.jobs.size() - 1);
  };
  for (size_t i = 0; i < picked; ++i) {
    series_of[held[i]] = new_series(names_[held[i]]);
  }
  if (view.other_jobs == 0) {
    for (size_t p = 0; p < n; ++p) {
      for (const StoredJob& job : points_[p].jobs) {
        TimelineSeries& s = view.jobs[series_of[job.id]];
        s.images_per_second[p] = job.images_per_second;
        s.wait_ratio[p] = job.wait_ratio;
        s.demand_images_per_second[p] = job.demand_images_per_second;
      }
    }
    return view;
  }
  const int other = new_series(kTimelineOtherJob);
  for (size_t p = 0; p < n; ++p) {
    double images = 0, demand = 0, wait = 0;
    int listed = 0, reporting = 0;
    for (const StoredJob& job : points_[p].jobs) {
      const int index = series_of[job.id];
      if (index != kUnset) {
        TimelineSeries& s = view.jobs[index];
        s.images_per_second[p] = job.images_per_second;
        s.wait_ratio[p] = job.wait_ratio;
        s.demand_images_per_second[p] = job.demand_images_per_second;
        continue;
      }
      ++listed;
      images += job.images_per_second;
      if (!std::isnan(job.wait_ratio)) {
        ++reporting;
        wait += job.wait_ratio;
        demand += job.demand_images_per_second;
      }
    }
    TimelineSeries& s = view.jobs[other];
    if (listed > 0) s.images_per_second[p] = images;
    if (reporting > 0) {
      s.wait_ratio[p] = wait / reporting;
      s.demand_images_per_second[p] = demand;
    }
  }
  return view;
}

}  // namespace batchd::server
