#include "common/cpu_count.h"

#include <thread>

#include "gtest/gtest.h"

namespace batchd::common {
namespace {

TEST(CpuCountTest, ReadsCgroupQuotas) {
  EXPECT_EQ(CpusFromQuota("max 100000\n"), std::nullopt);   // v2, no limit
  EXPECT_EQ(CpusFromQuota("-1 100000"), std::nullopt);      // v1, no limit
  EXPECT_EQ(CpusFromQuota("200000 100000\n"), 2);
  EXPECT_EQ(CpusFromQuota("150000 100000"), 2);  // 1.5 CPUs: round up
  EXPECT_EQ(CpusFromQuota("50000 100000"), 1);
  EXPECT_EQ(CpusFromQuota(""), std::nullopt);
  EXPECT_EQ(CpusFromQuota("garbage"), std::nullopt);
  EXPECT_EQ(CpusFromQuota("100 0"), std::nullopt);
}

TEST(CpuCountTest, AvailableCpusIsAtMostTheHostsAndAtLeastOne) {
  const int cpus = AvailableCpus();
  EXPECT_GE(cpus, 1);
  EXPECT_LE(cpus, static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
}

}  // namespace
}  // namespace batchd::common
