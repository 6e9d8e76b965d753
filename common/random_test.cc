#include "common/random.h"

#include <cmath>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace batchd::common {
namespace {

// Known-answer vectors from Random123's kat_vectors (philox4x32_10).
TEST(Philox4x32Test, MatchesRandom123KnownAnswers) {
  EXPECT_EQ(Philox4x32({0, 0, 0, 0}, {0, 0}),
            (std::array<uint32_t, 4>{0x6627e8d5, 0xe169c58d, 0xbc57ac4c,
                                     0x9b00dbd8}));
  EXPECT_EQ(Philox4x32({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
                       {0xffffffff, 0xffffffff}),
            (std::array<uint32_t, 4>{0x408f276d, 0x41c83b0e, 0xa20bc7c6,
                                     0x6d5451fd}));
  EXPECT_EQ(Philox4x32({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
                       {0xa4093822, 0x299f31d0}),
            (std::array<uint32_t, 4>{0xd16cfe09, 0x94fdcceb, 0x5001e420,
                                     0x24126ea1}));
}

TEST(SampleRandomTest, SameKeyGivesSameStream) {
  SampleRandom a(/*seed=*/5, /*epoch=*/3, /*sample_index=*/17,
                 RandomPurpose::kAugment);
  SampleRandom b(5, 3, 17, RandomPurpose::kAugment);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(a.NextU32(), b.NextU32());
}

TEST(SampleRandomTest, EveryKeyPartChangesTheStream) {
  auto first = [](uint64_t seed, uint64_t epoch, uint64_t sample,
                  RandomPurpose purpose) {
    SampleRandom r(seed, epoch, sample, purpose);
    return (uint64_t{r.NextU32()} << 32) | r.NextU32();
  };
  std::set<uint64_t> seen = {
      first(1, 0, 0, RandomPurpose::kAugment),
      first(2, 0, 0, RandomPurpose::kAugment),
      first(1, 1, 0, RandomPurpose::kAugment),
      first(1, 0, 1, RandomPurpose::kAugment),
      first(1, 0, uint64_t{1} << 32, RandomPurpose::kAugment),
      first(1, 0, 0, RandomPurpose::kPermutation),
      first(1, 0, 0, RandomPurpose::kSubstitute),
      first(uint64_t{1} << 32 | 1, 0, 0, RandomPurpose::kAugment),
  };
  EXPECT_EQ(seen.size(), 8u);
}

TEST(SampleRandomTest, UniformIsInRangeWithTheRightMoments) {
  SampleRandom r(9, 0, 0, RandomPurpose::kAugment);
  const int n = 200000;
  double sum = 0, sum_sq = 0;
  for (int i = 0; i < n; ++i) {
    const double u = r.Uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
    sum_sq += u * u;
  }
  const double mean = sum / n;
  const double var = sum_sq / n - mean * mean;
  // Standard errors: 1/sqrt(12 n) ~ 0.00065 for the mean.
  EXPECT_NEAR(mean, 0.5, 0.004);
  EXPECT_NEAR(var, 1.0 / 12, 0.002);
}

TEST(SampleRandomTest, UniformIntIsUnbiasedOverSmallRanges) {
  SampleRandom r(11, 0, 0, RandomPurpose::kPermutation);
  const int n = 7, draws = 140000;
  std::vector<int> counts(n);
  for (int i = 0; i < draws; ++i) {
    const uint64_t v = r.UniformInt(n);
    ASSERT_LT(v, static_cast<uint64_t>(n));
    ++counts[v];
  }
  // Chi-square with 6 degrees of freedom; 22.46 is the 0.999 quantile.
  double chi2 = 0;
  const double expected = static_cast<double>(draws) / n;
  for (int c : counts) chi2 += (c - expected) * (c - expected) / expected;
  EXPECT_LT(chi2, 22.46);
}

}  // namespace
}  // namespace batchd::common
