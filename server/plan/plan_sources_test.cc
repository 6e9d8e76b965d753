#include "server/plan/plan_sources.h"

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/plan/resolved_plan.h"

namespace batchd::server {
namespace {

// "a": 10 samples labelled 0..9 % 2; "b": 7 samples.
DatasetMap Datasets() {
  std::vector<Sample> samples(10);
  for (size_t i = 0; i < samples.size(); ++i) {
    samples[i].path = "/nowhere/" + std::to_string(i) + ".jpg";
    samples[i].label = static_cast<int32_t>(i % 2);
  }
  auto a = std::make_shared<const Dataset>(
      "a", samples, std::vector<std::string>{"x", "y"});
  samples.resize(7);
  auto b = std::make_shared<const Dataset>("b", samples,
                                           std::vector<std::string>{"x"});
  return {{"a", a}, {"b", b}};
}

batchd::v1::Plan MixPlan() {
  batchd::v1::Plan plan;
  plan.set_batch_size(4);
  plan.set_seed(1);
  plan.set_shuffle(true);
  plan.mutable_pipeline()->mutable_train()->set_size(32);
  batchd::v1::MixtureSource* a = plan.add_sources();
  a->set_dataset("a");
  a->set_weight(0.7);
  batchd::v1::MixtureSource* b = plan.add_sources();
  b->set_dataset("b");
  b->set_weight(0.3);
  return plan;
}

absl::StatusOr<std::shared_ptr<const ResolvedPlan>> Resolve(
    const batchd::v1::Plan& plan) {
  return ResolvePlan(plan, Datasets(), PlanLimits{});
}

TEST(PlanSourcesTest, ResolvesToAMixtureOverTheConcatenatedSamples) {
  batchd::v1::Plan plan = MixPlan();
  plan.set_samples_per_epoch(100);
  auto resolved = Resolve(plan);
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  const ResolvedPlan& p = **resolved;
  EXPECT_EQ(p.dataset, nullptr);
  ASSERT_EQ(p.sources.size(), 2u);
  EXPECT_EQ(p.shard.num_samples, 17u);
  ASSERT_NE(p.shard.mixture, nullptr);
  EXPECT_EQ(common::EpochLength(p.shard), 100u);
  EXPECT_EQ(common::MixtureQuotas(*p.shard.mixture),
            (std::vector<uint64_t>{70, 30}));
  const ResolvedPlan::SampleRef ref = p.At(12);
  EXPECT_EQ(ref.dataset->name(), "b");
  EXPECT_EQ(ref.index, 2u);
  EXPECT_EQ(ref.source, 1u);
  EXPECT_EQ(p.At(9).dataset->name(), "a");
  EXPECT_EQ(p.At(9).index, 9u);
  // Default epoch: the sources' sizes summed.
  auto whole = Resolve(MixPlan());
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(common::EpochLength((*whole)->shard), 17u);
}

TEST(PlanSourcesTest, WeightsCursorsAndEpochAreInTheFingerprint) {
  const std::string base = (*Resolve(MixPlan()))->fingerprint;
  batchd::v1::Plan plan = MixPlan();
  plan.mutable_sources(0)->set_weight(0.6);
  EXPECT_NE((*Resolve(plan))->fingerprint, base);
  plan = MixPlan();
  plan.mutable_sources(1)->set_cursor(5);
  EXPECT_NE((*Resolve(plan))->fingerprint, base);
  plan = MixPlan();
  plan.set_sources_epoch(3);
  EXPECT_NE((*Resolve(plan))->fingerprint, base);
  plan = MixPlan();
  plan.set_samples_per_epoch(18);
  EXPECT_NE((*Resolve(plan))->fingerprint, base);
  EXPECT_EQ((*Resolve(MixPlan()))->fingerprint, base);
}

void ExpectInvalid(const batchd::v1::Plan& plan, const std::string& words) {
  auto resolved = Resolve(plan);
  ASSERT_FALSE(resolved.ok());
  EXPECT_EQ(resolved.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(resolved.status().message().find(words), std::string::npos)
      << resolved.status().message();
}

TEST(PlanSourcesTest, BadSourcesAreRefusedNamingTheField) {
  batchd::v1::Plan plan = MixPlan();
  plan.mutable_sources(1)->set_dataset("nope");
  ExpectInvalid(plan, "sources[1].dataset: unknown dataset 'nope'");
  for (double weight : {0.0, -1.0, std::nan(""),
                        std::numeric_limits<double>::infinity()}) {
    plan = MixPlan();
    plan.mutable_sources(0)->set_weight(weight);
    ExpectInvalid(plan, "sources[0].weight is");
  }
  plan = MixPlan();
  plan.set_dataset("a");
  ExpectInvalid(plan, "both dataset 'a' and 2 sources");
  plan = MixPlan();
  plan.mutable_sources(1)->set_dataset("a");
  ExpectInvalid(plan, "sources[1].dataset: 'a' is listed twice");
  plan = MixPlan();
  for (int i = 0; i < 63; ++i) *plan.add_sources() = plan.sources(0);
  ExpectInvalid(plan, "sources has 65 entries");
  plan = MixPlan();
  plan.set_repeats(2);
  ExpectInvalid(plan, "repeats");
  plan = MixPlan();
  plan.add_views()->set_count(2);
  ExpectInvalid(plan, "views");
  plan = MixPlan();
  plan.set_samples_per_epoch((uint64_t{1} << 32) + 1);
  ExpectInvalid(plan, "samples_per_epoch is");
  plan = MixPlan();
  plan.mutable_sources(0)->set_cursor((uint64_t{1} << 62) + 1);
  ExpectInvalid(plan, "sources[0].cursor is");
}

}  // namespace
}  // namespace batchd::server
