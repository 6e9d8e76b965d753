// A small Prometheus metrics registry: counters, gauges and histograms with
// fixed buckets, in labelled families, rendered in the text exposition
// format (version 0.0.4) that Prometheus scrapes.
//
//   MetricsRegistry registry;
//   Histogram& read = registry.AddHistogram(
//       "batchd_stage_seconds", "Time per pipeline stage.", {"stage"},
//       kLatencyBucketsSeconds).With({"read"});
//   read.Observe(0.0012);          // hot path: atomics only
//   std::string page = registry.Render();
//
// Updating a metric is lock-free (relaxed atomics), so the hot path can
// record every sample. Looking up a labelled child (`With`) takes the
// family's mutex: callers on hot paths look it up once and keep the
// reference, which stays valid for the registry's lifetime.
//
// Values that already live elsewhere (worker counts, per-job totals) are
// read at scrape time by collectors (AddCollector) instead of being copied
// on every update.
//
// Thread-safe.
#ifndef BATCHD_SERVER_METRICS_METRICS_H_
#define BATCHD_SERVER_METRICS_METRICS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace batchd::server {

// Label values of one child, in the order of its family's label names.
using LabelValues = std::vector<std::string>;

// A monotonically increasing count. Values are doubles in the exposition;
// integer increments are exact up to 2^53.
class Counter {
 public:
  void Increment(uint64_t n = 1) { value_.fetch_add(n, std::memory_order_relaxed); }
  uint64_t value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> value_{0};
};

// A value that goes up and down.
class Gauge {
 public:
  void Set(double value) { value_.store(value, std::memory_order_relaxed); }
  void Add(double delta);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// Observations counted into fixed buckets (upper bounds, ascending), with
// their sum and count.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double value);

  struct Snapshot {
    std::vector<double> bounds;
    std::vector<uint64_t> cumulative;  // one per bound, then +Inf
    double sum = 0;
    uint64_t count = 0;
  };
  // Not atomic as a whole: a concurrent Observe may be seen in some fields
  // and not others, which Prometheus tolerates.
  Snapshot Read() const;

 private:
  const std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // bounds_.size() + 1
  std::atomic<double> sum_{0};
};

// Buckets for stage times, seconds: 50 µs to 10 s.
extern const std::vector<double> kLatencyBucketsSeconds;

// A named metric with labelled children of type T.
template <typename T>
class Family {
 public:
  // The child with these label values, created on first use. REQUIRES:
  // `values` has one value per label name. The reference stays valid for the
  // registry's lifetime.
  T& With(const LabelValues& values);

 private:
  friend class MetricsRegistry;
  Family(std::vector<std::string> label_names, std::function<T*()> make)
      : label_names_(std::move(label_names)), make_(std::move(make)) {}

  const std::vector<std::string> label_names_;
  const std::function<T*()> make_;
  mutable absl::Mutex mu_;
  std::map<LabelValues, std::unique_ptr<T>> children_ ABSL_GUARDED_BY(mu_);
};

// Receives the families a collector produces at scrape time.
class MetricWriter {
 public:
  enum class Type { kCounter, kGauge };
  virtual ~MetricWriter() = default;
  // Starts a family. `name` is the full sample name (counters end in
  // _total). Families must not repeat names within one scrape.
  virtual void Begin(const std::string& name, const std::string& help,
                     Type type) = 0;
  // A sample of the family begun last.
  virtual void Sample(const std::vector<std::pair<std::string, std::string>>&
                          labels,
                      double value) = 0;
};

class MetricsRegistry {
 public:
  using Collector = std::function<void(MetricWriter&)>;

  MetricsRegistry() = default;
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  // Adds a family. `name` follows Prometheus conventions: counters end in
  // _total, units are base units (_seconds, _bytes). A name registered twice
  // returns the first family (label names must match).
  Family<Counter>& AddCounter(const std::string& name, const std::string& help,
                              std::vector<std::string> label_names = {});
  Family<Gauge>& AddGauge(const std::string& name, const std::string& help,
                          std::vector<std::string> label_names = {});
  Family<Histogram>& AddHistogram(const std::string& name,
                                  const std::string& help,
                                  std::vector<std::string> label_names,
                                  std::vector<double> bounds);
  // Runs `collector` on every Render(), after the families above. It must
  // not call back into this registry.
  void AddCollector(Collector collector);

  // The whole page in the text exposition format.
  std::string Render() const;

 private:
  enum class Kind { kCounter, kGauge, kHistogram };
  struct Entry {
    std::string name;
    std::string help;
    Kind kind;
    std::vector<std::string> label_names;
    std::unique_ptr<Family<Counter>> counter;
    std::unique_ptr<Family<Gauge>> gauge;
    std::unique_ptr<Family<Histogram>> histogram;
  };
  Entry* FindLocked(const std::string& name) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<Entry>> entries_ ABSL_GUARDED_BY(mu_);
  std::vector<Collector> collectors_ ABSL_GUARDED_BY(mu_);
};

// Escapes a label value for the exposition format (\\, \", \n).
std::string EscapeLabelValue(const std::string& value);
// Formats a sample value: integers without a fraction, +Inf, -Inf, NaN.
std::string FormatMetricValue(double value);

// Resident set size of this process, bytes, from /proc/self/statm; 0 when
// it cannot be read.
uint64_t ProcessResidentBytes();

template <typename T>
T& Family<T>::With(const LabelValues& values) {
  absl::MutexLock lock(&mu_);
  std::unique_ptr<T>& child = children_[values];
  if (child == nullptr) child.reset(make_());
  return *child;
}

}  // namespace batchd::server

#endif  // BATCHD_SERVER_METRICS_METRICS_H_
