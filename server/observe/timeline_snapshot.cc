#include "server/observe/timeline_snapshot.h"

#include <time.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace batchd::server {
namespace {

// A JSON string literal; "</" is written "<\/" so that no job name can end
// a <script> element the JSON is placed in.
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

// NaN and the infinities are null: JSON has no such numbers.
std::string Number(double value) {
  if (!std::isfinite(value)) return "null";
  return absl::StrFormat("%.6g", value);
}

std::string Number(const std::optional<double>& value) {
  return value.has_value() ? Number(*value) : "null";
}

std::string Seconds(int64_t unix_ms) {
  return absl::StrFormat("%.3f", static_cast<double>(unix_ms) / 1000.0);
}

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

}  // namespace

// RenderedTimeline -------------------------------------------------------

RenderedTimeline::RenderedTimeline(const TimelineView& view, int max_jobs)
    : version_(view.version) {
  const std::vector<TimelinePoint>& p = view.points;
  const size_t n = p.size();
  t_ms_.reserve(n);
  for (const TimelinePoint& x : p) t_ms_.push_back(absl::ToUnixMillis(x.at));

  const auto text = [this](absl::string_view more) {
    if (pieces_.empty() || pieces_.back().column) pieces_.emplace_back();
    absl::StrAppend(&pieces_.back().text, more);
  };
  // A column of `cell(i)` for each point i.
  const auto column = [&](auto cell) {
    if (pieces_.empty() || pieces_.back().column) pieces_.emplace_back();
    Piece& piece = pieces_.back();
    piece.column = true;
    piece.starts.reserve(n + 1);
    for (size_t i = 0; i < n; ++i) {
      if (i > 0) piece.cells += ',';
      piece.starts.push_back(static_cast<uint32_t>(piece.cells.size()));
      piece.cells += cell(i);
    }
    piece.starts.push_back(static_cast<uint32_t>(piece.cells.size()));
  };

  text(absl::StrCat("\"next\":", n == 0 ? "null" : Seconds(t_ms_.back()),
                    ",\"interval_seconds\":1,\"capacity\":", view.capacity,
                    ",\"max_jobs\":", max_jobs,
                    ",\"other_jobs\":", view.other_jobs, ",\"verdict\":"));
  if (n == 0) {
    text("null");
  } else {
    text(absl::StrCat("{\"t\":", Seconds(t_ms_.back()),
                      ",\"kind\":", Quote(p.back().verdict_kind),
                      ",\"line\":", Quote(p.back().verdict), "}"));
  }
  // The newest point's shard cache, as the verdict: the page shows it as
  // a line, and its figures are cumulative.
  text(",\"shard_cache\":");
  if (n == 0 || p.back().shard_cache.empty()) {
    text("null");
  } else {
    text(absl::StrCat("{\"t\":", Seconds(t_ms_.back()),
                      ",\"line\":", Quote(p.back().shard_cache), "}"));
  }
  text(",\"t\":");
  column([&](size_t i) { return Seconds(t_ms_[i]); });
  text(",\"workers\":");
  column([&](size_t i) { return absl::StrCat(p[i].workers); });
  text(",\"busy_percent\":");
  column([&](size_t i) { return Number(100 * p[i].busy_fraction); });
  text(",\"queued_samples\":");
  column([&](size_t i) { return absl::StrCat(p[i].queued_samples); });
  text(",\"buffer_reserved_bytes\":");
  column([&](size_t i) { return absl::StrCat(p[i].buffer_reserved_bytes); });
  text(",\"buffer_idle_bytes\":");
  column([&](size_t i) { return absl::StrCat(p[i].buffer_idle_bytes); });
  text(",\"buffer_limit_bytes\":");
  column([&](size_t i) { return absl::StrCat(p[i].max_buffer_bytes); });
  text(",\"substitutions_per_second\":");
  column([&](size_t i) { return Number(p[i].substitutions_per_second); });
  text(",\"capacity_images_per_second\":");
  column([&](size_t i) { return Number(p[i].capacity_images_per_second); });
  text(",\"stage_ms_per_image\":{\"read\":");
  column([&](size_t i) { return Number(p[i].read_ms); });
  text(",\"decode\":");
  column([&](size_t i) { return Number(p[i].decode_ms); });
  text(",\"transform\":");
  column([&](size_t i) { return Number(p[i].transform_ms); });
  text(",\"augment\":");
  column([&](size_t i) { return Number(p[i].augment_ms); });
  text(",\"send\":");
  column([&](size_t i) { return Number(p[i].send_ms); });
  text("},\"jobs\":[");
  bool first = true;
  for (const TimelineSeries& s : view.jobs) {
    text(absl::StrCat(first ? "" : ",", "{\"job\":", Quote(s.job),
                      ",\"images_per_second\":"));
    column([&](size_t i) { return Number(s.images_per_second[i]); });
    text(",\"wait_percent\":");
    column([&](size_t i) { return Number(100 * s.wait_ratio[i]); });
    text(",\"compute_percent\":");
    column([&](size_t i) { return Number(100 * (1 - s.wait_ratio[i])); });
    text(",\"demand_images_per_second\":");
    column([&](size_t i) { return Number(s.demand_images_per_second[i]); });
    text("}");
    first = false;
  }
  text("],\"autoscale\":");
  // The markers, each at the point it happened; a slice from point i has
  // those of points >= i.
  pieces_.emplace_back();
  Piece& markers = pieces_.back();
  markers.column = true;
  markers.starts.assign(n + 1, 0);
  std::vector<int64_t> marker_at(n, -1);
  for (size_t i = 0; i < n; ++i) {
    if (p[i].autoscale_change.empty()) continue;
    if (!markers.cells.empty()) markers.cells += ',';
    marker_at[i] = static_cast<int64_t>(markers.cells.size());
    absl::StrAppend(&markers.cells, "{\"t\":", Seconds(t_ms_[i]),
                    ",\"workers\":", p[i].workers,
                    ",\"change\":", Quote(p[i].autoscale_change), "}");
  }
  markers.starts[n] = static_cast<uint32_t>(markers.cells.size());
  for (size_t i = n; i-- > 0;) {
    markers.starts[i] = marker_at[i] >= 0
                            ? static_cast<uint32_t>(marker_at[i])
                            : markers.starts[i + 1];
  }
  text("}");
  full_ = Assemble(0, "null");
}

std::optional<int64_t> RenderedTimeline::newest_ms() const {
  if (t_ms_.empty()) return std::nullopt;
  return t_ms_.back();
}

std::string RenderedTimeline::Json(std::optional<int64_t> since_ms) const {
  if (!since_ms.has_value()) return full_;
  const size_t first =
      std::upper_bound(t_ms_.begin(), t_ms_.end(), *since_ms) - t_ms_.begin();
  return Assemble(first, Seconds(*since_ms));
}

std::string RenderedTimeline::Assemble(size_t first,
                                       const std::string& since) const {
  std::string out = absl::StrCat("{\"since\":", since, ",");
  out.reserve(first == 0 ? full_.size() + since.size() : 4096);
  for (const Piece& piece : pieces_) {
    out += piece.text;
    if (!piece.column) continue;
    out += '[';
    out.append(piece.cells, piece.starts[first], std::string::npos);
    out += ']';
  }
  return out;
}

// TimelineSnapshots ------------------------------------------------------

TimelineSnapshots::TimelineSnapshots(const Timeline* timeline,
                                     TimelineSnapshotOptions options)
    : timeline_(timeline), options_(std::move(options)) {}

std::shared_ptr<const RenderedTimeline> TimelineSnapshots::Current() {
  mu_.Lock();
  for (;;) {
    if (snapshot_ != nullptr &&
        options_.now() < checked_at_ + options_.interval) {
      std::shared_ptr<const RenderedTimeline> snapshot = snapshot_;
      mu_.Unlock();
      return snapshot;
    }
    if (!rendering_) break;
    // Another request renders: its snapshot is this one's too.
    mu_.Await(absl::Condition(
        +[](bool* rendering) { return !*rendering; }, &rendering_));
  }
  rendering_ = true;
  checked_at_ = options_.now();
  const std::shared_ptr<const RenderedTimeline> last = snapshot_;
  mu_.Unlock();

  // Outside the lock, so that a Stop() or a reader of the counters is not
  // held up; rendering_ keeps it to one caller.
  std::shared_ptr<const RenderedTimeline> fresh = last;
  double cpu = 0;
  if (last == nullptr || timeline_->version() != last->version()) {
    const double start = ThreadCpuSeconds();
    fresh = std::make_shared<const RenderedTimeline>(
        timeline_->View(options_.max_jobs), options_.max_jobs);
    cpu = ThreadCpuSeconds() - start;
    if (options_.render_seconds != nullptr) {
      options_.render_seconds->Observe(cpu);
    }
  }

  mu_.Lock();
  if (fresh != last) {
    ++renders_;
    render_cpu_seconds_ += cpu;
  }
  snapshot_ = fresh;
  rendering_ = false;
  mu_.Unlock();
  return fresh;
}

absl::StatusOr<std::string> TimelineSnapshots::Answer(
    const std::multimap<std::string, std::string>& params) {
  std::optional<int64_t> since_ms;
  for (const auto& [name, value] : params) {
    if (name != "since") {
      return absl::InvalidArgumentError(absl::StrCat(
          "/api/timeline takes since=T only, not \"", name,
          "\": T is the \"next\" of the answer before (Unix seconds)"));
    }
    double seconds = 0;
    if (!absl::SimpleAtod(value, &seconds) || !std::isfinite(seconds) ||
        seconds < 0 || seconds > 1e11) {
      return absl::InvalidArgumentError(absl::StrCat(
          "since is \"", value.substr(0, 64),
          "\"; give the \"next\" of the answer before (Unix seconds, e.g. "
          "1800000000.000), or leave it out for the whole timeline"));
    }
    since_ms = std::llround(seconds * 1000);
  }
  const absl::Time deadline = options_.now() + options_.max_wait;
  for (;;) {
    std::shared_ptr<const RenderedTimeline> snapshot = Current();
    const std::optional<int64_t> newest = snapshot->newest_ms();
    bool answer = !since_ms.has_value() ||
                  (newest.has_value() && *newest > *since_ms);
    if (!answer) {
      // Nothing after `since` yet: wait for the next render.
      absl::MutexLock lock(&mu_);
      const absl::Time now = options_.now();
      answer = stopping_ || now >= deadline;
      if (!answer) {
        const absl::Duration wait =
            std::max(std::min(checked_at_ + options_.interval, deadline) - now,
                     absl::Milliseconds(10));
        mu_.AwaitWithTimeout(absl::Condition(&stopping_), wait);
      }
    }
    if (!answer) continue;
    // A wait of its own: a since= request that waited for a point must
    // not be refused for it.
    if (absl::Status turn = AwaitTurn(options_.now() + options_.max_wait);
        !turn.ok()) {
      return turn;
    }
    return snapshot->Json(since_ms);
  }
}

absl::Status TimelineSnapshots::AwaitTurn(absl::Time deadline) {
  if (options_.answers_per_second <= 0) return absl::OkStatus();
  const absl::Duration spacing =
      absl::Seconds(1) / options_.answers_per_second;
  absl::MutexLock lock(&mu_);
  const absl::Time now = options_.now();
  const absl::Time turn = std::max(now, last_turn_ + spacing);
  if (turn > std::max(deadline, now)) {
    // Too many ahead of this one: refuse it, though not at once, or a
    // client asking in a loop would spin on refusals.
    ++refused_;
    mu_.AwaitWithTimeout(absl::Condition(&stopping_), deadline - now);
    return absl::ResourceExhaustedError(absl::StrCat(
        "too many requests for /api/timeline: at most ",
        options_.answers_per_second,
        " answers a second, all clients together; the live page needs one "
        "a second"));
  }
  last_turn_ = turn;
  if (turn > now) {
    mu_.AwaitWithTimeout(absl::Condition(&stopping_), turn - now);
  }
  return absl::OkStatus();
}

uint64_t TimelineSnapshots::refused() const {
  absl::MutexLock lock(&mu_);
  return refused_;
}

void TimelineSnapshots::Stop() {
  absl::MutexLock lock(&mu_);
  stopping_ = true;
}

uint64_t TimelineSnapshots::renders() const {
  absl::MutexLock lock(&mu_);
  return renders_;
}

double TimelineSnapshots::render_cpu_seconds() const {
  absl::MutexLock lock(&mu_);
  return render_cpu_seconds_;
}

}  // namespace batchd::server
