#include "server/metrics/metrics.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>

#include "absl/strings/str_cat.h"

namespace batchd::server {
namespace {

void AddTo(std::atomic<double>& target, double delta) {
  double old = target.load(std::memory_order_relaxed);
  while (!target.compare_exchange_weak(old, old + delta,
                                       std::memory_order_relaxed)) {
  }
}

std::string EscapeHelp(const std::string& help) {
  std::string out;
  out.reserve(help.size());
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

using Labels = std::vector<std::pair<std::string, std::string>>;

std::string FormatLabels(const Labels& labels) {
  if (labels.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < labels.size(); ++i) {
    if (i > 0) out += ",";
    absl::StrAppend(&out, labels[i].first, "=\"",
                    EscapeLabelValue(labels[i].second), "\"");
  }
  out += "}";
  return out;
}

Labels Zip(const std::vector<std::string>& names, const LabelValues& values) {
  Labels labels;
  for (size_t i = 0; i < names.size() && i < values.size(); ++i) {
    labels.emplace_back(names[i], values[i]);
  }
  return labels;
}

void AppendHeader(std::string* out, const std::string& name,
                  const std::string& help, const char* type) {
  absl::StrAppend(out, "# HELP ", name, " ", EscapeHelp(help), "\n# TYPE ",
                  name, " ", type, "\n");
}

void AppendSample(std::string* out, const std::string& name,
                  const Labels& labels, double value) {
  absl::StrAppend(out, name, FormatLabels(labels), " ",
                  FormatMetricValue(value), "\n");
}

// Writes collector output straight into the page.
class PageWriter final : public MetricWriter {
 public:
  explicit PageWriter(std::string* out) : out_(out) {}
  void Begin(const std::string& name, const std::string& help,
             Type type) override {
    name_ = name;
    AppendHeader(out_, name, help,
                 type == Type::kCounter ? "counter" : "gauge");
  }
  void Sample(const Labels& labels, double value) override {
    AppendSample(out_, name_, labels, value);
  }

 private:
  std::string* const out_;
  std::string name_;
};

}  // namespace

const std::vector<double> kLatencyBucketsSeconds = {
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
    0.025,   0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,    10};

void Gauge::Add(double delta) { AddTo(value_, delta); }

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)),
      counts_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  for (size_t i = 0; i <= bounds_.size(); ++i) counts_[i] = 0;
}

void Histogram::Observe(double value) {
  // Bucket i counts values in (bounds[i-1], bounds[i]]; the last is +Inf.
  const size_t bucket = static_cast<size_t>(
      std::lower_bound(bounds_.begin(), bounds_.end(), value) -
      bounds_.begin());
  counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  AddTo(sum_, value);
}

Histogram::Snapshot Histogram::Read() const {
  Snapshot snapshot;
  snapshot.bounds = bounds_;
  uint64_t running = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    running += counts_[i].load(std::memory_order_relaxed);
    snapshot.cumulative.push_back(running);
  }
  snapshot.count = running;
  snapshot.sum = sum_.load(std::memory_order_relaxed);
  return snapshot;
}

MetricsRegistry::Entry* MetricsRegistry::FindLocked(const std::string& name) {
  for (const auto& entry : entries_) {
    if (entry->name == name) return entry.get();
  }
  return nullptr;
}

Family<Counter>& MetricsRegistry::AddCounter(
    const std::string& name, const std::string& help,
    std::vector<std::string> label_names) {
  absl::MutexLock lock(&mu_);
  if (Entry* entry = FindLocked(name); entry != nullptr && entry->counter) {
    return *entry->counter;
  }
  auto entry = std::make_unique<Entry>();
  entry->name = name;
  entry->help = help;
  entry->kind = Kind::kCounter;
  entry->counter.reset(
      new Family<Counter>(std::move(label_names), [] { return new Counter; }));
  entries_.push_back(std::move(entry));
  return *entries_.back()->counter;
}

Family<Gauge>& MetricsRegistry::AddGauge(const std::string& name,
                                         const std::string& help,
                                         std::vector<std::string> label_names) {
  absl::MutexLock lock(&mu_);
  if (Entry* entry = FindLocked(name); entry != nullptr && entry->gauge) {
    return *entry->gauge;
  }
  auto entry = std::make_unique<Entry>();
  entry->name = name;
  entry->help = help;
  entry->kind = Kind::kGauge;
  entry->gauge.reset(
      new Family<Gauge>(std::move(label_names), [] { return new Gauge; }));
  entries_.push_back(std::move(entry));
  return *entries_.back()->gauge;
}

Family<Histogram>& MetricsRegistry::AddHistogram(
    const std::string& name, const std::string& help,
    std::vector<std::string> label_names, std::vector<double> bounds) {
  absl::MutexLock lock(&mu_);
  if (Entry* entry = FindLocked(name); entry != nullptr && entry->histogram) {
    return *entry->histogram;
  }
  std::sort(bounds.begin(), bounds.end());
  bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
  auto entry = std::make_unique<Entry>();
  entry->name = name;
  entry->help = help;
  entry->kind = Kind::kHistogram;
  entry->histogram.reset(new Family<Histogram>(
      std::move(label_names), [bounds] { return new Histogram(bounds); }));
  entries_.push_back(std::move(entry));
  return *entries_.back()->histogram;
}

void MetricsRegistry::AddCollector(Collector collector) {
  absl::MutexLock lock(&mu_);
  collectors_.push_back(std::move(collector));
}

std::string MetricsRegistry::Render() const {
  std::string out;
  std::vector<Collector> collectors;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& entry : entries_) {
      switch (entry->kind) {
        case Kind::kCounter: {
          AppendHeader(&out, entry->name, entry->help, "counter");
          const Family<Counter>& family = *entry->counter;
          absl::MutexLock family_lock(&family.mu_);
          for (const auto& [values, child] : family.children_) {
            AppendSample(&out, entry->name, Zip(family.label_names_, values),
                         static_cast<double>(child->value()));
          }
          break;
        }
        case Kind::kGauge: {
          AppendHeader(&out, entry->name, entry->help, "gauge");
          const Family<Gauge>& family = *entry->gauge;
          absl::MutexLock family_lock(&family.mu_);
          for (const auto& [values, child] : family.children_) {
            AppendSample(&out, entry->name, Zip(family.label_names_, values),
                         child->value());
          }
          break;
        }
        case Kind::kHistogram: {
          AppendHeader(&out, entry->name, entry->help, "histogram");
          const Family<Histogram>& family = *entry->histogram;
          absl::MutexLock family_lock(&family.mu_);
          for (const auto& [values, child] : family.children_) {
            const Labels labels = Zip(family.label_names_, values);
            const Histogram::Snapshot s = child->Read();
            for (size_t i = 0; i < s.cumulative.size(); ++i) {
              Labels with_le = labels;
              with_le.emplace_back(
                  "le", i < s.bounds.size() ? FormatMetricValue(s.bounds[i])
                                            : "+Inf");
              AppendSample(&out, entry->name + "_bucket", with_le,
                           static_cast<double>(s.cumulative[i]));
            }
            AppendSample(&out, entry->name + "_sum", labels, s.sum);
            AppendSample(&out, entry->name + "_count", labels,
                         static_cast<double>(s.count));
          }
          break;
        }
      }
    }
    collectors = collectors_;
  }
  // Collectors read other objects' state; run them without holding mu_.
  PageWriter writer(&out);
  for (const Collector& collector : collectors) collector(writer);
  return out;
}

std::string EscapeLabelValue(const std::string& value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string FormatMetricValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  if (value == std::floor(value) && std::fabs(value) < 1e15) {
    return absl::StrCat(static_cast<int64_t>(value));
  }
  // The shortest form that reads back as the same double (0.0005, not
  // 0.00050000000000000001).
  char buffer[32];
  for (int precision = 15; precision <= 17; ++precision) {
    std::snprintf(buffer, sizeof(buffer), "%.*g", precision, value);
    if (std::strtod(buffer, nullptr) == value) break;
  }
  return buffer;
}

uint64_t ProcessResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  uint64_t size_pages = 0, resident_pages = 0;
  if (!(statm >> size_pages >> resident_pages)) return 0;
  return resident_pages * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

}  // namespace batchd::server
