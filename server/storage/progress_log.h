// ProgressLog: a line every few seconds about one long start-up step of a
// remote dataset (listing a prefix, HEADs of a shard list, indexing
// shards), so that a start-up of minutes says what it is doing: items done
// (of how many, when known), bytes, rate and, with a total, the time left.
// Nothing is logged for a step that ends before the first interval.
//
//   ProgressLog progress("imagenet", "indexing", "shards", /*total=*/4096);
//   progress.Add(/*items=*/1, /*bytes=*/reader.bytes());  // from any thread
//   // batchd: dataset 'imagenet': indexing: 1,200 of 4,096 shards,
//   //   310.2 MB in 10 s (120 shards/s, 31.0 MB/s), about 24 s left
//
// Thread-safe. The clock and the line's destination are injectable for
// tests; the default writes to stderr.
#ifndef BATCHD_SERVER_STORAGE_PROGRESS_LOG_H_
#define BATCHD_SERVER_STORAGE_PROGRESS_LOG_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace batchd::server {

class ProgressLog {
 public:
  static constexpr absl::Duration kInterval = absl::Seconds(5);

  // `what`: the step ("listing s3://b/p/"); `unit`: what is counted
  // ("keys"); `total`: how many are expected, 0 when unknown.
  ProgressLog(std::string dataset, std::string what, std::string unit,
              uint64_t total, absl::Duration interval = kInterval,
              std::function<absl::Time()> now = &absl::Now,
              std::function<void(const std::string&)> write = nullptr);

  // Counts `items` more and `bytes` more; logs a line when `interval` has
  // passed since the last (or since construction).
  void Add(uint64_t items, uint64_t bytes) ABSL_LOCKS_EXCLUDED(mu_);
  // Lines logged so far.
  int lines() const ABSL_LOCKS_EXCLUDED(mu_);

  // The line for `items` (of `total`) and `bytes` after `elapsed`, without
  // the "batchd: " prefix. Pure.
  static std::string Format(const std::string& dataset,
                            const std::string& what, const std::string& unit,
                            uint64_t items, uint64_t total, uint64_t bytes,
                            absl::Duration elapsed);

 private:
  // Constant after construction.
  const std::string dataset_;
  const std::string what_;
  const std::string unit_;
  const uint64_t total_;
  const absl::Duration interval_;
  const std::function<absl::Time()> now_;
  const std::function<void(const std::string&)> write_;
  const absl::Time start_;

  mutable absl::Mutex mu_;
  uint64_t items_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time next_line_ ABSL_GUARDED_BY(mu_);
  int lines_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace batchd::server

#endif  // BATCHD_SERVER_STORAGE_PROGRESS_LOG_H_
