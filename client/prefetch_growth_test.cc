#include "client/prefetch_growth.h"

#include "gtest/gtest.h"

namespace batchd::client {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);
absl::Time At(int ms) { return kT0 + absl::Milliseconds(ms); }

PrefetchGrowth::Steps Steps(uint64_t steps, uint64_t waited_steps,
                            int waited_ms) {
  return {steps, waited_steps, absl::Milliseconds(waited_ms)};
}

TEST(PrefetchGrowthTest, BurstyWaitsGrowByHalf) {
  PrefetchGrowth growth;
  // The first look only takes note.
  EXPECT_EQ(growth.Look(At(0), Steps(0, 0, 0), /*active=*/8, /*capacity=*/64),
            0u);
  // 10 steps in 1 s, 2 of them waited, 100 ms in all (10 %).
  EXPECT_EQ(growth.Look(At(1000), Steps(10, 2, 100), 8, 64), 4u);
}

TEST(PrefetchGrowthTest, NoGrowthForSteadyWaitsOrFewWaits) {
  PrefetchGrowth growth;
  growth.Look(At(0), Steps(0, 0, 0), 8, 64);
  // 5 % of the time: not enough to matter.
  EXPECT_EQ(growth.Look(At(1000), Steps(10, 2, 50), 8, 64), 0u);
  // Most steps waited: the daemons do not keep up; depth does not help.
  EXPECT_EQ(growth.Look(At(2000), Steps(20, 8, 550), 8, 64), 0u);
}

TEST(PrefetchGrowthTest, WaitsForTheIntervalAndEnoughSteps) {
  PrefetchGrowth growth;
  growth.Look(At(0), Steps(0, 0, 0), 8, 64);
  EXPECT_EQ(growth.Look(At(999), Steps(10, 2, 100), 8, 64), 0u);
  // Three steps are too few; the look keeps its start.
  EXPECT_EQ(growth.Look(At(1000), Steps(3, 1, 100), 8, 64), 0u);
  EXPECT_EQ(growth.Look(At(2000), Steps(10, 2, 300), 8, 64), 4u);
}

TEST(PrefetchGrowthTest, AtLeastOneSlotNeverBeyondCapacity) {
  PrefetchGrowth growth;
  growth.Look(At(0), Steps(0, 0, 0), 1, 64);
  EXPECT_EQ(growth.Look(At(1000), Steps(10, 2, 100), /*active=*/1, 64), 1u);
  EXPECT_EQ(growth.Look(At(2000), Steps(20, 4, 200), /*active=*/60,
                        /*capacity=*/62),
            2u);
  // Full: no look at all.
  EXPECT_EQ(growth.Look(At(3000), Steps(30, 6, 300), 62, 62), 0u);
}

}  // namespace
}  // namespace batchd::client
