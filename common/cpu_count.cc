#include "common/cpu_count.h"

#include <sched.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace batchd::common {
namespace {

// The file's text, or "" when it cannot be read.
std::string Slurp(const char* path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

std::optional<int> CpusFromQuota(absl::string_view quota_and_period) {
  std::vector<absl::string_view> fields =
      absl::StrSplit(quota_and_period, absl::ByAnyChar(" \t\n"),
                     absl::SkipEmpty());
  int64_t quota = 0, period = 0;
  if (fields.size() != 2 || !absl::SimpleAtoi(fields[0], &quota) ||
      !absl::SimpleAtoi(fields[1], &period) || quota <= 0 || period <= 0) {
    return std::nullopt;  // "max", "-1" or unreadable: no quota
  }
  return static_cast<int>(std::max<int64_t>(1, (quota + period - 1) / period));
}

int AvailableCpus() {
  int cpus = static_cast<int>(std::thread::hardware_concurrency());
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) cpus = CPU_COUNT(&set);
  std::optional<int> quota = CpusFromQuota(Slurp("/sys/fs/cgroup/cpu.max"));
  if (!quota) {
    quota = CpusFromQuota(Slurp("/sys/fs/cgroup/cpu/cpu.cfs_quota_us") + " " +
                          Slurp("/sys/fs/cgroup/cpu/cpu.cfs_period_us"));
  }
  if (quota) cpus = std::min(cpus, *quota);
  return std::max(1, cpus);
}

}  // namespace batchd::common
