// How many CPUs this process may use: the CPUs of its affinity mask, capped
// by its cgroup's CPU quota (a container's --cpus, a Kubernetes CPU limit),
// rounded up. std::thread::hardware_concurrency() counts the host's CPUs,
// which overstates a container's share.
#ifndef BATCHD_COMMON_CPU_COUNT_H_
#define BATCHD_COMMON_CPU_COUNT_H_

#include <optional>

#include "absl/strings/string_view.h"

namespace batchd::common {

// At least 1.
int AvailableCpus();

// The CPUs a cgroup quota allows, rounded up, from cgroup v2's cpu.max
// ("max 100000" or "150000 100000") or cgroup v1's "quota period" pair
// ("-1 100000" or "150000 100000"); nullopt when unlimited or unparsable.
std::optional<int> CpusFromQuota(absl::string_view quota_and_period);

}  // namespace batchd::common

#endif  // BATCHD_COMMON_CPU_COUNT_H_
