#include "server/plan/erase_mix.h"

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/plan/resolved_plan.h"

namespace batchd::server {
namespace {

// "ten": 64 samples of 10 classes.
DatasetMap Datasets() {
  std::vector<Sample> samples(64);
  for (size_t i = 0; i < samples.size(); ++i) {
    samples[i].path = "/nowhere/" + std::to_string(i) + ".jpg";
    samples[i].label = static_cast<int32_t>(i % 10);
  }
  std::vector<std::string> classes;
  for (int c = 0; c < 10; ++c) classes.push_back(std::to_string(c));
  return {{"ten", std::make_shared<const Dataset>("ten", samples, classes)}};
}

batchd::v1::Plan MixPlan() {
  batchd::v1::Plan plan;
  plan.set_dataset("ten");
  plan.set_batch_size(8);
  plan.set_seed(5);
  plan.set_shuffle(true);
  plan.mutable_pipeline()->mutable_train()->set_size(224);
  plan.mutable_pipeline()->mutable_erasing()->set_p(0.5f);
  batchd::v1::MixupCutmix* mix = plan.mutable_pipeline()->mutable_mix();
  mix->set_mixup_alpha(0.2f);
  mix->set_cutmix_alpha(1.0f);
  mix->set_label_smoothing(0.1f);
  mix->set_num_classes(10);
  return plan;
}

std::shared_ptr<const ResolvedPlan> Resolve(const batchd::v1::Plan& plan) {
  absl::StatusOr<std::shared_ptr<const ResolvedPlan>> resolved =
      ResolvePlan(plan, Datasets(), PlanLimits{});
  EXPECT_TRUE(resolved.ok()) << resolved.status();
  return resolved.ok() ? *resolved : nullptr;
}

// Same (plan, epoch, batch) -> same parameters, whoever computes them;
// another batch, epoch or seed draws anew.
TEST(EraseMixTest, DrawsArePureFunctionsOfPlanEpochAndBatch) {
  std::shared_ptr<const ResolvedPlan> a = Resolve(MixPlan());
  std::shared_ptr<const ResolvedPlan> b = Resolve(MixPlan());
  ASSERT_NE(a, nullptr);
  const std::vector<uint64_t> samples = {3, 17, 9, 40, 41, 0, 63, 22};
  for (uint64_t epoch : {0, 1, 7}) {
    for (uint64_t batch = 0; batch < 8; ++batch) {
      EXPECT_EQ(a->Mix(epoch, batch)->SerializeAsString(),
                b->Mix(epoch, batch)->SerializeAsString());
    }
    const auto erased_a = a->Erased(epoch, samples);
    const auto erased_b = b->Erased(epoch, samples);
    ASSERT_EQ(erased_a.size(), erased_b.size());
    for (size_t i = 0; i < erased_a.size(); ++i) {
      EXPECT_EQ(erased_a[i].SerializeAsString(),
                erased_b[i].SerializeAsString());
    }
  }
  int differ = 0;
  for (uint64_t batch = 0; batch < 16; ++batch) {
    differ += a->Mix(0, batch)->lambda() != a->Mix(1, batch)->lambda();
  }
  EXPECT_GE(differ, 14);
  batchd::v1::Plan reseeded = MixPlan();
  reseeded.set_seed(6);
  EXPECT_NE(Resolve(reseeded)->Mix(0, 0)->lambda(), a->Mix(0, 0)->lambda());
  // A sample's rectangle is its own: it does not depend on its batch.
  const auto alone = a->Erased(0, {40});
  const auto in_batch = a->Erased(0, samples);
  for (const auto& region : in_batch) {
    if (samples[region.position()] != 40) continue;
    ASSERT_EQ(alone.size(), 1u);
    EXPECT_EQ(alone[0].top(), region.top());
    EXPECT_EQ(alone[0].width(), region.width());
  }
  // Ranks draw apart.
  batchd::v1::Plan rank1 = MixPlan();
  rank1.set_world_size(2);
  rank1.set_rank(1);
  batchd::v1::Plan rank0 = rank1;
  rank0.set_rank(0);
  EXPECT_NE(Resolve(rank0)->Mix(0, 3)->lambda(),
            Resolve(rank1)->Mix(0, 3)->lambda());
}

// Mean and variance of Beta(a, a): 1/2 and 1 / (4 (2a + 1)).
void ExpectBeta(const std::vector<double>& draws, double alpha) {
  ASSERT_GT(draws.size(), 1000u);
  double mean = 0;
  for (double x : draws) mean += x;
  mean /= draws.size();
  double var = 0;
  for (double x : draws) var += (x - mean) * (x - mean);
  var /= draws.size() - 1;
  const double want_var = 1.0 / (4 * (2 * alpha + 1));
  // Standard error of the mean: sqrt(var / n); 5 of them.
  EXPECT_NEAR(mean, 0.5, 5 * std::sqrt(want_var / draws.size())) << alpha;
  EXPECT_NEAR(var, want_var, 0.1 * want_var) << alpha;
  // Kolmogorov-Smirnov against a reference sample of the same law
  // (std::gamma_distribution, an independent generator): D below the 0.1 %
  // critical value 1.95 * sqrt(2 / n).
  std::mt19937_64 gen(12345);
  std::gamma_distribution<double> gamma(alpha, 1.0);
  std::vector<double> ref(draws.size());
  for (double& x : ref) {
    const double g1 = gamma(gen), g2 = gamma(gen);
    x = g1 / (g1 + g2);
  }
  std::vector<double> got = draws;
  std::sort(got.begin(), got.end());
  std::sort(ref.begin(), ref.end());
  double d = 0;
  size_t i = 0, j = 0;
  while (i < got.size() && j < ref.size()) {
    if (got[i] <= ref[j]) ++i; else ++j;
    d = std::max(d, std::abs(static_cast<double>(i) - static_cast<double>(j)) /
                        got.size());
  }
  EXPECT_LT(d, 1.95 * std::sqrt(2.0 / draws.size())) << alpha;
}

TEST(EraseMixTest, MixupLambdaFollowsBetaAlphaAlpha) {
  for (double alpha : {0.2, 1.0, 4.0}) {
    MixSpec spec;
    spec.mixup_alpha = alpha;
    spec.num_classes = 10;
    std::vector<double> lambdas;
    for (uint64_t batch = 0; batch < 4000; ++batch) {
      common::SampleRandom rng(9, 0, batch, common::RandomPurpose::kBatchMix);
      const batchd::v1::BatchMix mix = DrawMix(spec, 224, 224, rng);
      ASSERT_EQ(mix.kind(), batchd::v1::BatchMix::KIND_MIXUP);
      lambdas.push_back(mix.lambda());
    }
    ExpectBeta(lambdas, alpha);
  }
}

// The switch, prob, and CutMix's box: inside the image, its lambda the
// share of the image left outside it, and its area (before clipping)
// (1 - lambda) of the image on average.
TEST(EraseMixTest, SwitchProbAndCutmixBoxes) {
  MixSpec spec;
  spec.mixup_alpha = 0.2;
  spec.cutmix_alpha = 1.0;
  spec.switch_prob = 0.3;
  spec.prob = 0.8;
  spec.num_classes = 10;
  const int kDraws = 4000, kH = 160, kW = 224;
  int none = 0, cutmix = 0;
  double area_fraction = 0;
  for (uint64_t batch = 0; batch < kDraws; ++batch) {
    common::SampleRandom rng(2, 1, batch, common::RandomPurpose::kBatchMix);
    const batchd::v1::BatchMix mix = DrawMix(spec, kH, kW, rng);
    EXPECT_EQ(mix.num_classes(), 10u);
    EXPECT_FLOAT_EQ(mix.label_smoothing(), 0.0f);
    if (mix.kind() == batchd::v1::BatchMix::KIND_NONE) {
      ++none;
      EXPECT_EQ(mix.lambda(), 1.0);
      continue;
    }
    if (mix.kind() != batchd::v1::BatchMix::KIND_CUTMIX) continue;
    ++cutmix;
    ASSERT_LE(mix.box_top() + mix.box_height(), static_cast<uint32_t>(kH));
    ASSERT_LE(mix.box_left() + mix.box_width(), static_cast<uint32_t>(kW));
    const double area = static_cast<double>(mix.box_height()) *
                        mix.box_width() / (kH * kW);
    EXPECT_DOUBLE_EQ(mix.lambda(), 1.0 - area);
    area_fraction += area;
  }
  const double n = kDraws;
  // Binomial: 5 standard deviations.
  EXPECT_NEAR(none / n, 0.2, 5 * std::sqrt(0.2 * 0.8 / n));
  const double mixed = kDraws - none;
  EXPECT_NEAR(cutmix / mixed, 0.3, 5 * std::sqrt(0.3 * 0.7 / mixed));
  // E[area] with lambda ~ U(0, 1): the unclipped box covers about
  // 1 - lambda (1/2 on average); clipping at the borders takes a share
  // that a simulation of the same definition gives (std::mt19937).
  std::mt19937_64 gen(7);
  std::uniform_real_distribution<double> u(0, 1);
  double want = 0;
  const int kRef = 200000;
  for (int i = 0; i < kRef; ++i) {
    const double lambda = u(gen);
    const int cx = static_cast<int>(u(gen) * kW);
    const int cy = static_cast<int>(u(gen) * kH);
    const double r = 0.5 * std::sqrt(1 - lambda);
    const int hw = static_cast<int>(r * kW), hh = static_cast<int>(r * kH);
    const int x1 = std::max(cx - hw, 0), x2 = std::min(cx + hw, kW);
    const int y1 = std::max(cy - hh, 0), y2 = std::min(cy + hh, kH);
    want += static_cast<double>(x2 - x1) * (y2 - y1) / (kH * kW);
  }
  want /= kRef;
  EXPECT_NEAR(area_fraction / cutmix, want, 0.03);
  EXPECT_GT(want, 0.3);
  EXPECT_LT(want, 0.5);
}

TEST(EraseMixTest, ErasingRectanglesFollowTorchvisionsGetParams) {
  ErasingSpec spec;  // p 0.5, scale [0.02, 0.33], ratio [0.3, 3.3]
  const int kSide = 224, kDraws = 4000;
  int erased = 0;
  double area_sum = 0;
  for (uint64_t sample = 0; sample < kDraws; ++sample) {
    common::SampleRandom rng(3, 0, sample, common::RandomPurpose::kErasing);
    common::SampleRandom noise(3, 0, sample,
                               common::RandomPurpose::kErasingNoise);
    const auto region = DrawErasing(spec, kSide, kSide, 7, rng, noise);
    if (!region.has_value()) continue;
    ++erased;
    EXPECT_EQ(region->position(), 7u);
    EXPECT_FALSE(region->noise());
    ASSERT_GE(region->height(), 1u);
    ASSERT_LT(region->height(), static_cast<uint32_t>(kSide));
    ASSERT_LE(region->top() + region->height(), static_cast<uint32_t>(kSide));
    ASSERT_LE(region->left() + region->width(), static_cast<uint32_t>(kSide));
    const double area =
        static_cast<double>(region->height()) * region->width() /
        (kSide * kSide);
    // Rounding each side to whole pixels moves the area a little.
    EXPECT_GE(area, 0.02 * 0.9);
    EXPECT_LE(area, 0.33 * 1.1);
    area_sum += area;
  }
  // Almost every try fits a 224 image at these ranges: p within 5 sigma.
  EXPECT_NEAR(erased / static_cast<double>(kDraws), 0.5,
              5 * std::sqrt(0.25 / kDraws) + 0.01);
  // Area ~ U(0.02, 0.33) among the rectangles that fit (tall or wide ones
  // that do not are retried, which favours small areas a little).
  EXPECT_NEAR(area_sum / erased, 0.175, 0.02);
  spec.random_value = true;
  spec.p = 1;
  common::SampleRandom rng(3, 0, 1, common::RandomPurpose::kErasing);
  common::SampleRandom noise(3, 0, 1, common::RandomPurpose::kErasingNoise);
  const auto region = DrawErasing(spec, kSide, kSide, 0, rng, noise);
  ASSERT_TRUE(region.has_value());
  EXPECT_TRUE(region->noise());
  EXPECT_NE(region->noise_key(), 0u);
}

void ExpectInvalid(const std::function<void(batchd::v1::Plan&)>& change,
                   const std::string& field) {
  batchd::v1::Plan plan = MixPlan();
  change(plan);
  absl::StatusOr<std::shared_ptr<const ResolvedPlan>> resolved =
      ResolvePlan(plan, Datasets(), PlanLimits{});
  ASSERT_FALSE(resolved.ok()) << field;
  EXPECT_EQ(resolved.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(resolved.status().message().find(field), std::string::npos)
      << resolved.status();
}

TEST(EraseMixTest, BadPlansNameTheField) {
  auto erasing = [](batchd::v1::Plan& p) {
    return p.mutable_pipeline()->mutable_erasing();
  };
  auto mix = [](batchd::v1::Plan& p) {
    return p.mutable_pipeline()->mutable_mix();
  };
  ExpectInvalid([&](auto& p) { erasing(p)->set_p(1.5f); },
                "pipeline.erasing.p");
  ExpectInvalid([&](auto& p) { erasing(p)->set_p(-0.1f); },
                "pipeline.erasing.p");
  ExpectInvalid([&](auto& p) { erasing(p)->set_p(NAN); },
                "pipeline.erasing.p");
  ExpectInvalid([&](auto& p) { erasing(p)->set_scale_min(0); },
                "pipeline.erasing.scale_min");
  ExpectInvalid([&](auto& p) { erasing(p)->set_scale_max(1.5f); },
                "pipeline.erasing.scale_min/scale_max");
  ExpectInvalid([&](auto& p) { erasing(p)->set_scale_min(0.5f);
                               erasing(p)->set_scale_max(0.4f); },
                "scale_min <= scale_max");
  ExpectInvalid([&](auto& p) { erasing(p)->set_ratio_min(-1); },
                "pipeline.erasing.ratio_min");
  ExpectInvalid([&](auto& p) { erasing(p)->set_ratio_max(INFINITY); },
                "pipeline.erasing.ratio_min/ratio_max");
  ExpectInvalid([&](auto& p) { mix(p)->set_mixup_alpha(0); },
                "pipeline.mix.mixup_alpha");
  ExpectInvalid([&](auto& p) { mix(p)->set_cutmix_alpha(-1); },
                "pipeline.mix.cutmix_alpha");
  ExpectInvalid([&](auto& p) { mix(p)->set_cutmix_alpha(1000); },
                "pipeline.mix.cutmix_alpha");
  ExpectInvalid([&](auto& p) { mix(p)->clear_mixup_alpha();
                               mix(p)->clear_cutmix_alpha(); },
                "neither mixup_alpha nor cutmix_alpha");
  ExpectInvalid([&](auto& p) { mix(p)->set_switch_prob(2); },
                "pipeline.mix.switch_prob");
  ExpectInvalid([&](auto& p) { mix(p)->set_prob(-0.5f); },
                "pipeline.mix.prob");
  ExpectInvalid([&](auto& p) { mix(p)->set_label_smoothing(1); },
                "pipeline.mix.label_smoothing");
  ExpectInvalid([&](auto& p) { mix(p)->set_label_smoothing(-0.1f); },
                "pipeline.mix.label_smoothing");
  ExpectInvalid([&](auto& p) { mix(p)->set_num_classes(0); },
                "pipeline.mix.num_classes");
  ExpectInvalid([&](auto& p) { mix(p)->set_num_classes(11); },
                "1..10");
  // The soft labels' memory: batch_size x num_classes values at most.
  {
    std::vector<Sample> samples(4);
    for (size_t i = 0; i < samples.size(); ++i) {
      samples[i].path = "/nowhere/" + std::to_string(i) + ".jpg";
    }
    std::vector<std::string> classes(1 << 20, "c");
    DatasetMap many = {
        {"many", std::make_shared<const Dataset>("many", samples, classes)}};
    batchd::v1::Plan plan = MixPlan();
    plan.set_dataset("many");
    plan.set_batch_size(65);
    mix(plan)->set_num_classes(1 << 20);
    absl::StatusOr<std::shared_ptr<const ResolvedPlan>> resolved =
        ResolvePlan(plan, many, PlanLimits{});
    ASSERT_FALSE(resolved.ok());
    EXPECT_EQ(resolved.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(resolved.status().message().find("soft-label values"),
              std::string::npos);
    plan.set_batch_size(64);
    EXPECT_TRUE(ResolvePlan(plan, many, PlanLimits{}).ok());
  }
  // The edges are accepted.
  batchd::v1::Plan edges = MixPlan();
  erasing(edges)->set_p(1);
  mix(edges)->set_label_smoothing(0.999f);
  mix(edges)->set_num_classes(10);
  mix(edges)->set_switch_prob(0);
  EXPECT_NE(Resolve(edges), nullptr);
}

}  // namespace
}  // namespace batchd::server
