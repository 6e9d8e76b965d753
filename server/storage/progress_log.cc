#include "server/storage/progress_log.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace batchd::server {
namespace {

// 1234567 -> "1,234,567".
std::string Thousands(uint64_t n) {
  std::string digits = absl::StrCat(n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return out;
}

std::string Megabytes(double bytes) {
  return absl::StrFormat("%.1f MB", bytes / 1e6);
}

std::string Seconds(absl::Duration d) {
  return absl::StrCat(absl::ToInt64Seconds(d), " s");
}

}  // namespace

ProgressLog::ProgressLog(std::string dataset, std::string what,
                         std::string unit, uint64_t total,
                         absl::Duration interval,
                         std::function<absl::Time()> now,
                         std::function<void(const std::string&)> write)
    : dataset_(std::move(dataset)),
      what_(std::move(what)),
      unit_(std::move(unit)),
      total_(total),
      interval_(std::max(interval, absl::Milliseconds(1))),
      now_(std::move(now)),
      write_(write != nullptr ? std::move(write)
                              : [](const std::string& line) {
                                  std::fprintf(stderr, "batchd: %s\n",
                                               line.c_str());
                                }),
      start_(now_()),
      next_line_(start_ + interval_) {}

void ProgressLog::Add(uint64_t items, uint64_t bytes) {
  std::string line;
  {
    absl::MutexLock lock(&mu_);
    items_ += items;
    bytes_ += bytes;
    const absl::Time now = now_();
    if (now < next_line_) return;
    while (next_line_ <= now) next_line_ += interval_;  // a steady cadence
    ++lines_;
    line = Format(dataset_, what_, unit_, items_, total_, bytes_,
                  now - start_);
  }
  write_(line);  // outside the lock: a slow stderr blocks no other adder
}

int ProgressLog::lines() const {
  absl::MutexLock lock(&mu_);
  return lines_;
}

std::string ProgressLog::Format(const std::string& dataset,
                                const std::string& what,
                                const std::string& unit, uint64_t items,
                                uint64_t total, uint64_t bytes,
                                absl::Duration elapsed) {
  std::string line = absl::StrCat("dataset '", dataset, "': ", what, ": ",
                                  Thousands(items));
  if (total > 0) absl::StrAppend(&line, " of ", Thousands(total));
  absl::StrAppend(&line, " ", unit, ", ", Megabytes(static_cast<double>(bytes)),
                  " in ", Seconds(elapsed));
  const double seconds = absl::ToDoubleSeconds(elapsed);
  if (seconds > 0) {
    absl::StrAppendFormat(&line, " (%.0f %s/s, %.1f MB/s)", items / seconds,
                          unit, bytes / seconds / 1e6);
    if (total > items && items > 0) {
      const absl::Duration left =
          absl::Seconds(static_cast<double>(total - items) * seconds /
                        static_cast<double>(items));
      absl::StrAppend(&line, ", about ", Seconds(left), " left");
    }
  }
  return line;
}

}  // namespace batchd::server
