#include "server/plan/resolved_plan.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace batchd::server {
namespace {

// "a" and "b": 10 and 9 samples in shards of 4, 3 and 3 (2); "files": 10
// files.
DatasetMap Datasets() {
  std::vector<Sample> samples(10);
  for (size_t i = 0; i < samples.size(); ++i) {
    samples[i].path = "/nowhere/" + std::to_string(i) + ".jpg";
  }
  auto files = std::make_shared<const Dataset>(
      "files", samples, std::vector<std::string>{"x"});
  for (size_t i = 0; i < samples.size(); ++i) {
    samples[i].shard = i < 4 ? 0 : i < 7 ? 1 : 2;
  }
  auto a = std::make_shared<const Dataset>("a", samples,
                                           std::vector<std::string>{"x"});
  samples.pop_back();
  auto b = std::make_shared<const Dataset>("b", samples,
                                           std::vector<std::string>{"x"});
  return {{"a", a}, {"b", b}, {"files", files}};
}

batchd::v1::Plan BasePlan() {
  batchd::v1::Plan plan;
  plan.set_dataset("a");
  plan.set_batch_size(4);
  plan.set_seed(1);
  plan.set_shuffle(true);
  plan.set_job("base");
  plan.mutable_pipeline()->mutable_train()->set_size(32);
  return plan;
}

std::string Fingerprint(const batchd::v1::Plan& plan) {
  absl::StatusOr<std::shared_ptr<const ResolvedPlan>> resolved =
      ResolvePlan(plan, Datasets(), PlanLimits{});
  EXPECT_TRUE(resolved.ok()) << resolved.status();
  return resolved.ok() ? (*resolved)->fingerprint : "";
}

// Two plans share batches exactly when their fingerprints are equal: one
// case per field that changes the bytes.
TEST(PlanFingerprintTest, EveryByteChangingFieldChangesIt) {
  const std::string base = Fingerprint(BasePlan());
  const std::vector<std::pair<std::string,
                              std::function<void(batchd::v1::Plan&)>>>
      changes = {
          {"dataset", [](auto& p) { p.set_dataset("b"); }},
          {"batch_size", [](auto& p) { p.set_batch_size(5); }},
          {"seed", [](auto& p) { p.set_seed(2); }},
          {"shuffle", [](auto& p) { p.set_shuffle(false); }},
          {"shuffle_window_shards",
           [](auto& p) { p.set_shuffle_window_shards(2); }},
          {"drop_last", [](auto& p) { p.set_drop_last(true); }},
          {"repeats", [](auto& p) { p.set_repeats(3); }},
          {"rank", [](auto& p) {
             p.set_world_size(2);
             p.set_rank(1);
           }},
          {"world_size", [](auto& p) { p.set_world_size(2); }},
          {"train.size",
           [](auto& p) { p.mutable_pipeline()->mutable_train()->set_size(33); }},
          {"train.scale_min",
           [](auto& p) {
             p.mutable_pipeline()->mutable_train()->set_scale_min(0.5f);
           }},
          {"train.scale_max",
           [](auto& p) {
             p.mutable_pipeline()->mutable_train()->set_scale_max(0.9f);
           }},
          {"train.ratio_min",
           [](auto& p) {
             p.mutable_pipeline()->mutable_train()->set_ratio_min(0.5f);
           }},
          {"train.ratio_max",
           [](auto& p) {
             p.mutable_pipeline()->mutable_train()->set_ratio_max(1.5f);
           }},
          {"train.flip_probability",
           [](auto& p) {
             p.mutable_pipeline()->mutable_train()->set_flip_probability(0.25f);
           }},
          {"eval instead of train",
           [](auto& p) { p.mutable_pipeline()->mutable_eval()->set_size(32); }},
          {"layout",
           [](auto& p) {
             p.mutable_pipeline()->set_layout(batchd::v1::LAYOUT_NCHW);
           }},
          {"decoded_max_side",
           [](auto& p) { p.mutable_pipeline()->set_decoded_max_side(64); }},
          {"interpolation",
           [](auto& p) {
             p.mutable_pipeline()->set_interpolation(
                 batchd::v1::INTERPOLATION_BICUBIC);
           }},
          {"augment",
           [](auto& p) {
             p.mutable_pipeline()->add_augment()->mutable_random_invert();
           }},
          {"an augment op's field",
           [](auto& p) {
             p.mutable_pipeline()
                 ->add_augment()
                 ->mutable_random_invert()
                 ->set_p(0.25f);
           }},
          {"erasing",
           [](auto& p) { p.mutable_pipeline()->mutable_erasing(); }},
          {"an erasing field",
           [](auto& p) {
             p.mutable_pipeline()->mutable_erasing()->set_random_value(true);
           }},
          {"mix",
           [](auto& p) {
             p.mutable_pipeline()->mutable_mix()->set_mixup_alpha(0.2f);
             p.mutable_pipeline()->mutable_mix()->set_num_classes(1);
           }},
          {"a mix field",
           [](auto& p) {
             p.mutable_pipeline()->mutable_mix()->set_mixup_alpha(0.2f);
             p.mutable_pipeline()->mutable_mix()->set_num_classes(1);
             p.mutable_pipeline()->mutable_mix()->set_label_smoothing(0.1f);
           }},
      };
  for (const auto& [field, change] : changes) {
    batchd::v1::Plan plan = BasePlan();
    change(plan);
    EXPECT_NE(Fingerprint(plan), base) << field;
  }
}

TEST(PlanFingerprintTest, EvalFieldsChangeIt) {
  batchd::v1::Plan eval = BasePlan();
  eval.mutable_pipeline()->mutable_eval()->set_size(32);
  const std::string base = Fingerprint(eval);
  batchd::v1::Plan shorter = eval;
  shorter.mutable_pipeline()->mutable_eval()->set_resize_shorter(40);
  EXPECT_NE(Fingerprint(shorter), base);
  batchd::v1::Plan size = eval;
  size.mutable_pipeline()->mutable_eval()->set_size(30);
  EXPECT_NE(Fingerprint(size), base);
}

// What does not change the bytes does not split the sharing.
TEST(PlanFingerprintTest, JobAndResumeAndSpelledDefaultsDoNotChangeIt) {
  const std::string base = Fingerprint(BasePlan());
  batchd::v1::Plan job = BasePlan();
  job.set_job("another-job");
  EXPECT_EQ(Fingerprint(job), base);
  batchd::v1::Plan resumed = BasePlan();
  resumed.mutable_resume()->set_epoch(3);
  resumed.mutable_resume()->set_position(4);
  EXPECT_EQ(Fingerprint(resumed), base);
  batchd::v1::Plan spelled = BasePlan();
  spelled.mutable_pipeline()->mutable_train()->set_flip_probability(0.5f);
  spelled.mutable_pipeline()->set_interpolation(
      batchd::v1::INTERPOLATION_BILINEAR);
  EXPECT_EQ(Fingerprint(spelled), base);
  // A plan without augment ops keeps the fingerprint (and the label) it
  // had before Pipeline.augment existed.
  EXPECT_EQ(base.find("augment"), std::string::npos);
  EXPECT_EQ(base.find("interpolation"), std::string::npos);
  EXPECT_EQ(base.find("repeats"), std::string::npos);
  batchd::v1::Plan once = BasePlan();
  once.set_repeats(1);  // 0 and 1 are both "each sample once"
  EXPECT_EQ(Fingerprint(once), base);
  EXPECT_EQ(FingerprintLabel(base).size(), 16u);
  EXPECT_EQ(FingerprintLabel(base), FingerprintLabel(Fingerprint(job)));
}

TEST(ResolvePlanTest, InterpolationAndAugmentAreCheckedAndKept) {
  batchd::v1::Plan plan = BasePlan();
  plan.mutable_pipeline()->set_interpolation(batchd::v1::INTERPOLATION_BICUBIC);
  plan.mutable_pipeline()->add_augment()->mutable_trivial_augment_wide();
  plan.mutable_pipeline()->add_augment()->mutable_random_invert()->set_p(1);
  absl::StatusOr<std::shared_ptr<const ResolvedPlan>> resolved =
      ResolvePlan(plan, Datasets(), PlanLimits{});
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_EQ((*resolved)->interpolation, augment::Interpolation::kBicubic);
  ASSERT_EQ((*resolved)->augment.ops().size(), 2u);
  // Invert with p 1 always runs: TrivialAugmentWide's call, then invert.
  const std::vector<augment::OpCall> calls =
      (*resolved)->AugmentCalls(/*epoch=*/0, /*sample_index=*/3, 32, 32);
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[1].fn, augment::OpFn::kInvert);
  EXPECT_EQ(augment::Describe(calls),
            augment::Describe((*resolved)->AugmentCalls(0, 3, 32, 32)));

  batchd::v1::Plan nearest = BasePlan();
  nearest.mutable_pipeline()->set_interpolation(
      batchd::v1::INTERPOLATION_NEAREST);
  absl::StatusOr<std::shared_ptr<const ResolvedPlan>> refused =
      ResolvePlan(nearest, Datasets(), PlanLimits{});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find(
                "pipeline.interpolation: INTERPOLATION_NEAREST"),
            std::string::npos)
      << refused.status();

  batchd::v1::Plan bad = BasePlan();
  bad.mutable_pipeline()->add_augment()->mutable_random_invert();
  bad.mutable_pipeline()->add_augment()->mutable_rand_augment()->set_magnitude(
      40);
  refused = ResolvePlan(bad, Datasets(), PlanLimits{});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(refused.status().message(),
            "pipeline.augment[1].rand_augment.magnitude: 40 is out of range "
            "0..30 (num_magnitude_bins - 1)");
}

// Each cap is its own pipeline: two caps never share batches.
TEST(PlanFingerprintTest, DecodedMaxSideValuesDiffer) {
  batchd::v1::Plan a = BasePlan();
  a.mutable_pipeline()->set_decoded_max_side(64);
  batchd::v1::Plan b = BasePlan();
  b.mutable_pipeline()->set_decoded_max_side(65);
  EXPECT_NE(Fingerprint(a), Fingerprint(b));
  EXPECT_EQ(Fingerprint(a), Fingerprint(a));
}

TEST(ResolvePlanTest, DecodedMaxSideMustCoverTheOutput) {
  batchd::v1::Plan plan = BasePlan();  // train size 32
  plan.mutable_pipeline()->set_decoded_max_side(31);
  absl::StatusOr<std::shared_ptr<const ResolvedPlan>> resolved =
      ResolvePlan(plan, Datasets(), PlanLimits{});
  ASSERT_FALSE(resolved.ok());
  EXPECT_EQ(resolved.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(resolved.status().message().find("decoded_max_side"),
            std::string::npos);
  plan.mutable_pipeline()->set_decoded_max_side(kMaxDecodedSide + 1);
  EXPECT_FALSE(ResolvePlan(plan, Datasets(), PlanLimits{}).ok());
  plan.mutable_pipeline()->set_decoded_max_side(32);
  resolved = ResolvePlan(plan, Datasets(), PlanLimits{});
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_EQ((*resolved)->decoded_max_side, 32u);
}

// Each window below the shard count is another order; windows of at least
// the shard count (3) are one.
TEST(PlanFingerprintTest, ShuffleWindowShardsChangesItUpToTheShardCount) {
  auto with_window = [](uint32_t window) {
    batchd::v1::Plan plan = BasePlan();
    plan.set_shuffle_window_shards(window);
    return Fingerprint(plan);
  };
  EXPECT_NE(with_window(1), with_window(0));
  EXPECT_NE(with_window(1), with_window(2));
  EXPECT_NE(with_window(2), with_window(3));
  EXPECT_EQ(with_window(3), with_window(4));
  EXPECT_EQ(with_window(3), with_window(65536));
}

TEST(ResolvePlanTest, ShuffleWindowShardsIsCheckedAndResolved) {
  const DatasetMap datasets = Datasets();
  batchd::v1::Plan plan = BasePlan();
  plan.set_shuffle_window_shards(2);
  absl::StatusOr<std::shared_ptr<const ResolvedPlan>> resolved =
      ResolvePlan(plan, datasets, PlanLimits{});
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_EQ((*resolved)->shard.shuffle_window_shards, 2u);
  ASSERT_NE((*resolved)->shard.shard_samples, nullptr);
  EXPECT_EQ(*(*resolved)->shard.shard_samples,
            (std::vector<uint64_t>{4, 3, 3}));
  // The default is the per-sample shuffle.
  resolved = ResolvePlan(BasePlan(), datasets, PlanLimits{});
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_EQ((*resolved)->shard.shuffle_window_shards, 0u);

  auto error = [&](const batchd::v1::Plan& bad) {
    absl::StatusOr<std::shared_ptr<const ResolvedPlan>> r =
        ResolvePlan(bad, datasets, PlanLimits{});
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(r.status().message());
  };
  batchd::v1::Plan files = plan;
  files.set_dataset("files");
  EXPECT_NE(error(files).find("dataset 'files' has no shards"),
            std::string::npos)
      << error(files);
  batchd::v1::Plan unshuffled = plan;
  unshuffled.set_shuffle(false);
  EXPECT_NE(error(unshuffled).find("shuffle is off"), std::string::npos)
      << error(unshuffled);
  batchd::v1::Plan huge = plan;
  huge.set_shuffle_window_shards(65537);
  EXPECT_NE(error(huge).find("it must be 1..65536"), std::string::npos)
      << error(huge);
  huge.set_shuffle_window_shards(0xFFFFFFFFu);
  EXPECT_NE(error(huge).find("it must be 1..65536"), std::string::npos);
  // The largest allowed window is fine (it opens all 3 shards).
  huge.set_shuffle_window_shards(65536);
  EXPECT_TRUE(ResolvePlan(huge, datasets, PlanLimits{}).ok());
}

TEST(ResolvePlanTest, RepeatsAreCheckedAndResolved) {
  const DatasetMap datasets = Datasets();
  batchd::v1::Plan plan = BasePlan();
  plan.set_repeats(4);
  absl::StatusOr<std::shared_ptr<const ResolvedPlan>> resolved =
      ResolvePlan(plan, datasets, PlanLimits{});
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_EQ((*resolved)->shard.repeats, 4u);
  resolved = ResolvePlan(BasePlan(), datasets, PlanLimits{});
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_EQ((*resolved)->shard.repeats, 1u);

  plan.set_repeats(17);
  resolved = ResolvePlan(plan, datasets, PlanLimits{});
  EXPECT_EQ(resolved.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(resolved.status().message().find("repeats is 17; it must be 0..16"),
            std::string::npos)
      << resolved.status();
}

}  // namespace
}  // namespace batchd::server
