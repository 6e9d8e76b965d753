#include "client/shard_coverage.h"

#include <numeric>
#include <vector>

#include "testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/sampler.h"

namespace batchd::client {
namespace {

using ::batchd::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

batchd::v1::Plan MakePlan(uint32_t batch_size, uint32_t rank,
                          uint32_t world_size, bool shuffle, bool drop_last) {
  batchd::v1::Plan plan;
  plan.set_batch_size(batch_size);
  plan.set_rank(rank);
  plan.set_world_size(world_size);
  plan.set_shuffle(shuffle);
  plan.set_drop_last(drop_last);
  return plan;
}

TEST(ShardCoverageTest, UnshuffledShardWithPadding) {
  // N = 10, W = 4: padded to 12 = 0..9, 0, 1; rank 1 takes 1, 5, 9.
  // rank 2 takes 2, 6, 0 (padding).
  absl::StatusOr<ShardCoverage> rank1 =
      ShardCoverage::Create(10, MakePlan(2, 1, 4, false, false));
  ASSERT_OK(rank1);
  EXPECT_EQ(rank1->batches(), 2u);
  EXPECT_EQ(rank1->samples(), 3u);
  EXPECT_EQ(rank1->BatchSamples(0), 2u);
  EXPECT_EQ(rank1->BatchSamples(1), 1u);
  EXPECT_EQ(rank1->BatchSamples(2), 0u);
  EXPECT_THAT(rank1->Check(/*epoch=*/0, {1, 5, 9}), IsEmpty());
  EXPECT_THAT(rank1->Check(/*epoch=*/0, {9, 1, 5}), IsEmpty());
  EXPECT_THAT(rank1->Check(/*epoch=*/0, {1, 5, 8}),
              ElementsAre(HasSubstr("sample 9 appeared 0 times, expected 1"),
                          HasSubstr("sample 8 appeared 1 times, expected 0")));
  EXPECT_THAT(rank1->Check(/*epoch=*/0, {1, 5}), ::testing::Contains(HasSubstr("2 samples")));

  absl::StatusOr<ShardCoverage> rank2 =
      ShardCoverage::Create(10, MakePlan(2, 2, 4, false, false));
  ASSERT_OK(rank2);
  EXPECT_THAT(rank2->Check(/*epoch=*/0, {2, 6, 0}), IsEmpty());
}

TEST(ShardCoverageTest, WorldLargerThanDatasetRepeatsSamples) {
  // N = 2, W = 5: padded order 0 1 0 1 0; rank 4 takes position 4 -> {0}.
  absl::StatusOr<ShardCoverage> coverage =
      ShardCoverage::Create(2, MakePlan(1, 4, 5, false, false));
  ASSERT_OK(coverage);
  EXPECT_EQ(coverage->batches(), 1u);
  EXPECT_THAT(coverage->Check(/*epoch=*/0, {0}), IsEmpty());
  EXPECT_THAT(coverage->Check(/*epoch=*/0, {1}), ::testing::Not(IsEmpty()));
}

TEST(ShardCoverageTest, DropLastKeepsWholeBatches) {
  // N = 10, W = 1, batch 4: 2 batches, samples 0..7.
  absl::StatusOr<ShardCoverage> coverage =
      ShardCoverage::Create(10, MakePlan(4, 0, 1, false, true));
  ASSERT_OK(coverage);
  EXPECT_EQ(coverage->batches(), 2u);
  EXPECT_EQ(coverage->BatchSamples(1), 4u);
  EXPECT_THAT(coverage->Check(/*epoch=*/0, {0, 1, 2, 3, 4, 5, 6, 7}), IsEmpty());
}

TEST(ShardCoverageTest, ShuffledShardIsTheSamplersExactMultiset) {
  // N = 10, W = 4, rank 3: positions 3, 7 and 1 (padding) of the epoch's
  // permutation, which differs between epochs.
  batchd::v1::Plan plan = MakePlan(2, 3, 4, true, false);
  plan.set_seed(17);
  absl::StatusOr<ShardCoverage> coverage = ShardCoverage::Create(10, plan);
  ASSERT_OK(coverage);
  for (uint64_t epoch : {0, 1, 5}) {
    const std::vector<uint64_t> order =
        common::EpochOrder(10, /*seed=*/17, /*shuffle=*/true, epoch);
    EXPECT_THAT(coverage->Check(epoch, {order[7], order[1], order[3]}),
                IsEmpty());
    EXPECT_THAT(coverage->Check(epoch, {order[3], order[3], order[7]}),
                ::testing::Not(IsEmpty()));
    // Any other sample in place of order[1] is caught, even though the
    // multiset has the right shape.
    EXPECT_THAT(coverage->Check(epoch, {order[3], order[7], order[2]}),
                ::testing::Contains(HasSubstr("expected 0")));
  }
  EXPECT_THAT(coverage->Check(0, {0, 1, 10}),
              ::testing::Contains(HasSubstr("beyond")));
}

TEST(ShardCoverageTest, RejectsImpossiblePlans) {
  EXPECT_THAT(ShardCoverage::Create(0, MakePlan(1, 0, 1, false, false)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no samples")));
  EXPECT_THAT(ShardCoverage::Create(5, MakePlan(0, 0, 1, false, false)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("batch_size")));
  EXPECT_THAT(ShardCoverage::Create(5, MakePlan(1, 2, 2, false, false)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rank")));
}

// With the shard-aware shuffle the expectation follows the windowed order,
// which needs the dataset's layout.
TEST(ShardCoverageTest, ShardAwareShuffleFollowsTheWindowedOrder) {
  const std::vector<uint64_t> layout = {4, 4, 2};
  batchd::v1::Plan plan = MakePlan(2, 1, 4, /*shuffle=*/true, false);
  plan.set_seed(5);
  plan.set_shuffle_window_shards(2);
  EXPECT_THAT(ShardCoverage::Create(10, plan),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("shard layout")));
  EXPECT_THAT(ShardCoverage::Create(10, plan, {4, 4}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("for a dataset of 10")));
  absl::StatusOr<ShardCoverage> coverage =
      ShardCoverage::Create(10, plan, layout);
  ASSERT_OK(coverage);
  for (uint64_t epoch : {0, 3}) {
    // Rank 1 of 4 takes padded positions 1, 5, 9.
    const std::vector<uint64_t> order = common::ShardWindowOrder(
        layout, /*seed=*/5, /*window_shards=*/2, epoch);
    EXPECT_THAT(coverage->Check(epoch, {order[9], order[1], order[5]}),
                IsEmpty());
    const std::vector<uint64_t> global = common::EpochOrder(10, 5, true, epoch);
    if (global[1] != order[1] || global[5] != order[5]) {
      EXPECT_THAT(coverage->Check(epoch, {global[1], global[5], global[9]}),
                  ::testing::Not(IsEmpty()));
    }
  }
}

// With repeats, the entries are (sample, repeat) pairs: N = 10, R = 3,
// unshuffled: 0@0 0@1 0@2 1@0 1@1 1@2 ... 3@0 (cut at 10 entries); rank 1
// of 2 takes the odd positions: 0@1, 1@0, 1@2, 2@1, 3@0.
TEST(ShardCoverageTest, RepeatsAreCheckedAsPairs) {
  batchd::v1::Plan plan = MakePlan(2, 1, 2, false, false);
  plan.set_repeats(3);
  absl::StatusOr<ShardCoverage> rank1 = ShardCoverage::Create(10, plan);
  ASSERT_OK(rank1);
  EXPECT_EQ(rank1->samples(), 5u);
  auto entry = [](uint64_t sample, uint64_t repeat) {
    return sample + repeat * 10;
  };
  EXPECT_THAT(rank1->Check(0, {entry(0, 1), entry(1, 0), entry(1, 2),
                               entry(2, 1), entry(3, 0)}),
              IsEmpty());
  // The right images, one of them the wrong repeat.
  EXPECT_THAT(rank1->Check(0, {entry(0, 1), entry(1, 0), entry(1, 2),
                               entry(2, 1), entry(3, 1)}),
              ElementsAre(HasSubstr("sample 3 appeared 0 times"),
                          HasSubstr("sample 13 appeared 1 times")));
  EXPECT_THAT(rank1->Check(0, {entry(0, 3)}),
              ::testing::Contains(HasSubstr("x 3 repeats")));
  plan.set_repeats(17);
  EXPECT_THAT(ShardCoverage::Create(10, plan),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("repeats 17 is above 16")));
}

}  // namespace
}  // namespace batchd::client
