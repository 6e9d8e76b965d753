#include "server/observe/timeline.h"

#include <cmath>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
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

// A JSON string literal.
std::string Quote(absl::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '/': out += "\\/"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          absl::StrAppendFormat(&out, "\\u%04x", c);
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string Number(double value) {
  if (!std::isfinite(value)) return "null";
  return absl::StrFormat("%.6g", value);
}

std::string Number(const std::optional<double>& value) {
  return value.has_value() ? Number(*value) : "null";
}

std::string Seconds(absl::Time at) {
  return absl::StrFormat("%.3f", absl::ToUnixMillis(at) / 1000.0);
}

// "[a,b,...]" of `value(point)` over `points`.
template <typename F>
std::string Column(const std::deque<TimelinePoint>& points, F value) {
  std::string out = "[";
  for (size_t i = 0; i < points.size(); ++i) {
    if (i > 0) out += ",";
    out += value(points[i]);
  }
  return out + "]";
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
    TimelinePoint::Job j;
    j.job = job.job();
    j.images_per_second = job.images_per_second();
    if (job.trainer().reporting_streams() > 0) {
      j.wait_ratio = job.trainer().wait_ratio();
      j.demand_images_per_second = job.trainer().demand_images_per_second();
      demand += job.trainer().demand_images_per_second();
    }
    point.jobs.push_back(std::move(j));
  }
  if (status.capacity_demand_ratio() > 0) {
    point.capacity_images_per_second =
        demand / status.capacity_demand_ratio();
  }
  const common::DaemonVerdict verdict = common::JudgeDaemon(status);
  point.verdict_kind = verdict.kind;
  point.verdict = verdict.line;

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
  points_.push_back(std::move(point));
  while (points_.size() > static_cast<size_t>(capacity_)) {
    points_.pop_front();
  }
}

std::vector<TimelinePoint> Timeline::Points() const {
  absl::MutexLock lock(&mu_);
  return std::vector<TimelinePoint>(points_.begin(), points_.end());
}

std::string Timeline::Json() const {
  absl::MutexLock lock(&mu_);
  const std::deque<TimelinePoint>& p = points_;
  std::string out = absl::StrCat("{\"interval_seconds\":1,\"capacity\":",
                                 capacity_, ",\"verdict\":");
  if (p.empty()) {
    out += "null";
  } else {
    absl::StrAppend(&out, "{\"t\":", Seconds(p.back().at),
                    ",\"kind\":", Quote(p.back().verdict_kind),
                    ",\"line\":", Quote(p.back().verdict), "}");
  }
  using Point = TimelinePoint;
  absl::StrAppend(
      &out, ",\"t\":", Column(p, [](const Point& x) { return Seconds(x.at); }),
      ",\"workers\":",
      Column(p, [](const Point& x) { return absl::StrCat(x.workers); }),
      ",\"busy_percent\":",
      Column(p, [](const Point& x) { return Number(100 * x.busy_fraction); }),
      ",\"queued_samples\":",
      Column(p, [](const Point& x) { return absl::StrCat(x.queued_samples); }),
      ",\"buffer_reserved_bytes\":",
      Column(p,
             [](const Point& x) {
               return absl::StrCat(x.buffer_reserved_bytes);
             }),
      ",\"buffer_idle_bytes\":",
      Column(p,
             [](const Point& x) { return absl::StrCat(x.buffer_idle_bytes); }),
      ",\"buffer_limit_bytes\":",
      Column(p,
             [](const Point& x) { return absl::StrCat(x.max_buffer_bytes); }),
      ",\"substitutions_per_second\":",
      Column(p,
             [](const Point& x) {
               return Number(x.substitutions_per_second);
             }),
      ",\"capacity_images_per_second\":",
      Column(p,
             [](const Point& x) {
               return Number(x.capacity_images_per_second);
             }),
      ",\"stage_ms_per_image\":{\"read\":",
      Column(p, [](const Point& x) { return Number(x.read_ms); }),
      ",\"decode\":",
      Column(p, [](const Point& x) { return Number(x.decode_ms); }),
      ",\"transform\":",
      Column(p, [](const Point& x) { return Number(x.transform_ms); }),
      ",\"augment\":",
      Column(p, [](const Point& x) { return Number(x.augment_ms); }),
      ",\"send\":",
      Column(p, [](const Point& x) { return Number(x.send_ms); }), "}");

  std::set<std::string> names;
  for (const Point& x : p) {
    for (const Point::Job& job : x.jobs) names.insert(job.job);
  }
  out += ",\"jobs\":[";
  bool first = true;
  for (const std::string& name : names) {
    // The job's entry in each point, or null where it was not listed.
    std::vector<const Point::Job*> of(p.size(), nullptr);
    for (size_t i = 0; i < p.size(); ++i) {
      for (const Point::Job& job : p[i].jobs) {
        if (job.job == name) of[i] = &job;
      }
    }
    auto column = [&](auto value) {
      std::string c = "[";
      for (size_t i = 0; i < of.size(); ++i) {
        if (i > 0) c += ",";
        c += of[i] == nullptr ? "null" : value(*of[i]);
      }
      return c + "]";
    };
    absl::StrAppend(
        &out, first ? "" : ",", "{\"job\":", Quote(name),
        ",\"images_per_second\":",
        column([](const Point::Job& j) { return Number(j.images_per_second); }),
        ",\"wait_percent\":", column([](const Point::Job& j) {
          return j.wait_ratio ? Number(100 * *j.wait_ratio) : "null";
        }),
        ",\"compute_percent\":", column([](const Point::Job& j) {
          return j.wait_ratio ? Number(100 * (1 - *j.wait_ratio)) : "null";
        }),
        ",\"demand_images_per_second\":", column([](const Point::Job& j) {
          return Number(j.demand_images_per_second);
        }),
        "}");
    first = false;
  }
  out += "],\"autoscale\":[";
  first = true;
  for (const Point& x : p) {
    if (x.autoscale_change.empty()) continue;
    absl::StrAppend(&out, first ? "" : ",", "{\"t\":", Seconds(x.at),
                    ",\"workers\":", x.workers,
                    ",\"change\":", Quote(x.autoscale_change), "}");
    first = false;
  }
  out += "]}";
  return out;
}

}  // namespace batchd::server
