// AugmentPlan::Draw against torchvision 0.14's distributions, over 100,000
// or more samples at a fixed seed: chi-square tests of the categorical
// choices (ops, bins, signs, sub-policies, permutations, rounded
// translations) and of uniform draws binned, and the means of AugMix's
// weights. Deterministic (a fixed seed), so a failure is reproducible; the
// thresholds are the chi-square quantiles at p = 1e-4.
#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "server/augment/distributions.h"
#include "server/augment/policy.h"
#include "testing/status_matchers.h"

namespace batchd::server::augment {
namespace {

constexpr int kDraws = 120000;

AugmentPlan MakePlan(const std::string& text) {
  google::protobuf::RepeatedPtrField<batchd::v1::Augment> ops;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, ops.Add()));
  absl::StatusOr<AugmentPlan> plan = AugmentPlan::Create(ops);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? *std::move(plan) : AugmentPlan();
}

std::vector<OpCall> DrawSample(const AugmentPlan& plan, uint64_t sample,
                               int width = 224, int height = 160) {
  common::SampleRandom rng(/*seed=*/20221028, /*epoch=*/3, sample,
                           common::RandomPurpose::kAugmentOps);
  return plan.Draw(rng, width, height);
}

// The chi-square quantile at p = 1e-4 for `df` degrees of freedom
// (Wilson-Hilferty).
double ChiSquareLimit(int df) {
  const double z = 3.7190;
  const double a = 2.0 / (9.0 * df);
  return df * std::pow(1 - a + z * std::sqrt(a), 3);
}

// Chi-square of `observed` counts against `expected` probabilities
// (categories with probability 0 must be empty and are left out).
void ExpectFits(const std::vector<double>& observed,
                const std::vector<double>& expected, const std::string& what) {
  ASSERT_EQ(observed.size(), expected.size()) << what;
  double total = 0;
  for (double o : observed) total += o;
  double chi = 0;
  int df = -1;
  for (size_t i = 0; i < observed.size(); ++i) {
    if (expected[i] == 0) {
      EXPECT_EQ(observed[i], 0) << what << ": category " << i;
      continue;
    }
    const double e = expected[i] * total;
    chi += (observed[i] - e) * (observed[i] - e) / e;
    ++df;
  }
  ASSERT_GT(df, 0) << what;
  EXPECT_LT(chi, ChiSquareLimit(df))
      << what << ": chi-square " << chi << " with " << df << " df over "
      << total << " draws";
}

std::vector<double> Uniform(int n) { return std::vector<double>(n, 1.0 / n); }

// Uniform draws in [lo, hi) binned in 20.
void ExpectUniform(const std::vector<double>& values, double lo, double hi,
                   const std::string& what) {
  std::vector<double> bins(20, 0);
  for (double v : values) {
    ASSERT_GE(v, lo) << what;
    ASSERT_LE(v, hi) << what;
    bins[std::min<size_t>(19,
                          static_cast<size_t>((v - lo) / (hi - lo) * 20))]++;
  }
  ExpectFits(bins, Uniform(20), what);
}

TEST(SamplingTest, TrivialAugmentWideOpsBinsAndSigns) {
  const AugmentPlan plan = MakePlan("trivial_augment_wide {}");
  std::vector<double> ops(16, 0), bins(31, 0), signs(2, 0);
  for (int i = 0; i < kDraws; ++i) {
    const std::vector<OpCall> calls = DrawSample(plan, i);
    ASSERT_EQ(calls.size(), 1u);
    const OpCall& call = calls[0];
    ops[static_cast<size_t>(call.policy_op)]++;
    if (HasMagnitudes(call.policy_op)) {
      bins[static_cast<size_t>(call.bin)]++;
      EXPECT_EQ(std::abs(call.magnitude),
                Magnitude(OpSpace::kTrivialAugmentWide, call.policy_op, 31,
                          static_cast<int>(call.bin), 224, 160));
    } else {
      EXPECT_EQ(call.bin, -1);
    }
    if (IsSigned(call.policy_op)) signs[std::signbit(call.magnitude) ? 1 : 0]++;
  }
  std::vector<double> expected(16, 1.0 / 14);
  expected[static_cast<size_t>(PolicyOp::kInvert)] = 0;
  expected[static_cast<size_t>(PolicyOp::kNone)] = 0;
  ExpectFits(ops, expected, "op choice");
  ExpectFits(bins, Uniform(31), "magnitude bins");
  ExpectFits(signs, Uniform(2), "signs");
}

TEST(SamplingTest, RandAugmentOpsAndMagnitudeNoise) {
  const AugmentPlan fixed = MakePlan("rand_augment { num_ops: 3 }");
  std::vector<double> ops(16, 0);
  for (int i = 0; i < kDraws / 3; ++i) {
    const std::vector<OpCall> calls = DrawSample(fixed, i);
    ASSERT_EQ(calls.size(), 3u);
    for (const OpCall& call : calls) {
      ops[static_cast<size_t>(call.policy_op)]++;
      if (HasMagnitudes(call.policy_op)) EXPECT_EQ(call.bin, 9);
    }
  }
  std::vector<double> expected(16, 1.0 / 14);
  expected[static_cast<size_t>(PolicyOp::kInvert)] = 0;
  expected[static_cast<size_t>(PolicyOp::kNone)] = 0;
  ExpectFits(ops, expected, "op choice, with replacement");

  // timm's mstd: bin ~ Normal(9, 10) clipped to [0, 30]. P(0) =
  // Phi(-0.9), P(30) = 1 - Phi(2.1); the rest binned by the normal's CDF.
  const AugmentPlan noisy =
      MakePlan("rand_augment { num_ops: 1 magnitude_std: 10 }");
  auto phi = [](double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); };
  const std::vector<double> edges = {0, 5, 9, 13, 20, 30};
  std::vector<double> observed(edges.size() + 1, 0);
  for (int i = 0; i < kDraws; ++i) {
    const std::vector<OpCall> calls = DrawSample(noisy, i);
    ASSERT_EQ(calls.size(), 1u);
    if (!HasMagnitudes(calls[0].policy_op)) continue;
    const double bin = calls[0].bin;
    ASSERT_GE(bin, 0);
    ASSERT_LE(bin, 30);
    if (bin == 0) {
      observed[0]++;
    } else if (bin == 30) {
      observed.back()++;
    } else {
      for (size_t e = 1; e < edges.size(); ++e) {
        if (bin < edges[e]) {
          observed[e]++;
          break;
        }
      }
    }
  }
  std::vector<double> expected_bins = {phi(-0.9)};
  for (size_t e = 1; e < edges.size(); ++e) {
    expected_bins.push_back(phi((edges[e] - 9) / 10) -
                            phi((edges[e - 1] - 9) / 10));
  }
  expected_bins.push_back(1 - phi(2.1));
  ExpectFits(observed, expected_bins, "clipped normal bins");
}

TEST(SamplingTest, AutoAugmentSubPoliciesAndProbabilities) {
  for (auto [name, policy] :
       {std::pair<const char*, AutoAugmentPolicy>{"POLICY_IMAGENET",
                                                  AutoAugmentPolicy::kImageNet},
        {"POLICY_CIFAR10", AutoAugmentPolicy::kCifar10},
        {"POLICY_SVHN", AutoAugmentPolicy::kSvhn}}) {
    SCOPED_TRACE(name);
    const AugmentPlan plan =
        MakePlan(absl::StrCat("auto_augment { policy: ", name, " }"));
    const auto& subs = SubPolicies(policy);
    // Categories: (sub-policy, which of its ops ran: first, second, both),
    // and "none ran" for all of them together.
    std::vector<double> observed(25 * 3 + 1, 0), expected(25 * 3 + 1, 0);
    for (int k = 0; k < 25; ++k) {
      const double p0 = subs[k][0].probability, p1 = subs[k][1].probability;
      expected[3 * k] = p0 * (1 - p1) / 25;
      expected[3 * k + 1] = (1 - p0) * p1 / 25;
      expected[3 * k + 2] = p0 * p1 / 25;
      expected.back() += (1 - p0) * (1 - p1) / 25;
    }
    std::vector<double> signs(2, 0);
    for (int i = 0; i < kDraws; ++i) {
      const std::vector<OpCall> calls = DrawSample(plan, i);
      if (calls.empty()) {
        observed.back()++;
        continue;
      }
      const int k = calls[0].sub_policy;
      ASSERT_GE(k, 0);
      for (const OpCall& call : calls) {
        EXPECT_EQ(call.sub_policy, k);
        EXPECT_EQ(call.policy_op, subs[k][call.position].op);
        if (IsSigned(call.policy_op) && call.magnitude != 0) {
          signs[std::signbit(call.magnitude) ? 1 : 0]++;
        }
      }
      observed[3 * k + (calls.size() == 2 ? 2 : calls[0].position)]++;
    }
    ExpectFits(observed, expected, "sub-policy and applied ops");
    ExpectFits(signs, Uniform(2), "signs");
  }
}

TEST(SamplingTest, AugMixWeightsDepthsAndOps) {
  for (double alpha : {1.0, 0.5}) {
    SCOPED_TRACE(absl::StrCat("alpha ", alpha));
    const AugmentPlan plan = MakePlan(absl::StrCat(
        "aug_mix { alpha: ", alpha, " severity: 4 all_ops: false }"));
    double sum[4] = {0, 0, 0, 0};
    std::vector<double> depths(3, 0), ops(16, 0), bins(4, 0);
    const int n = kDraws / 2;
    for (int i = 0; i < n; ++i) {
      const std::vector<OpCall> calls = DrawSample(plan, i);
      ASSERT_EQ(calls.size(), 1u);
      const OpCall& mix = calls[0];
      ASSERT_EQ(mix.mix_weights.size(), 4u);
      ASSERT_EQ(mix.chains.size(), 3u);
      double total = 0;
      for (size_t w = 0; w < 4; ++w) {
        sum[w] += mix.mix_weights[w];
        total += mix.mix_weights[w];
      }
      EXPECT_NEAR(total, 1.0, 1e-5);
      for (const std::vector<OpCall>& chain : mix.chains) {
        ASSERT_GE(chain.size(), 1u);
        ASSERT_LE(chain.size(), 3u);
        depths[chain.size() - 1]++;
        for (const OpCall& call : chain) {
          ops[static_cast<size_t>(call.policy_op)]++;
          if (call.bin >= 0) bins[static_cast<size_t>(call.bin)]++;
        }
      }
    }
    // m ~ Beta(a, a): E = 1/2 (variance 1 / (4 (2a + 1))); each chain's
    // weight m1 * Dirichlet(a, a, a)_i: E = 1/6 (variance below 1/20).
    const double beta_sd = std::sqrt(1.0 / (4 * (2 * alpha + 1)) / n);
    EXPECT_NEAR(sum[0] / n, 0.5, 5 * beta_sd);
    for (int w = 1; w < 4; ++w) {
      EXPECT_NEAR(sum[w] / n, 1.0 / 6, 5 * std::sqrt(0.05 / n)) << w;
    }
    ExpectFits(depths, Uniform(3), "chain depth 1..3");
    std::vector<double> expected(16, 0);
    for (PolicyOp op : SpaceOps(OpSpace::kAugMix, /*all_ops=*/false)) {
      expected[static_cast<size_t>(op)] = 1.0 / 9;
    }
    ExpectFits(ops, expected, "ops without the colour ops");
    ExpectFits(bins, Uniform(4), "bins below severity");
  }
}

TEST(SamplingTest, ColorJitterOrderAndFactors) {
  const AugmentPlan plan = MakePlan(
      "color_jitter { brightness: 0.4 contrast: 1.5 saturation: 0.2 hue: "
      "0.1 p: 0.8 }");
  std::map<std::string, double> orders;
  std::vector<double> applied(2, 0);
  std::vector<double> factors[4];
  for (int i = 0; i < kDraws; ++i) {
    const std::vector<OpCall> calls = DrawSample(plan, i);
    applied[calls.empty() ? 0 : 1]++;
    if (calls.empty()) continue;
    ASSERT_EQ(calls.size(), 4u);
    std::string order;
    for (const OpCall& call : calls) {
      const int which = call.fn == OpFn::kAdjustBrightness   ? 0
                        : call.fn == OpFn::kAdjustContrast   ? 1
                        : call.fn == OpFn::kAdjustSaturation ? 2
                                                             : 3;
      order += static_cast<char>('0' + which);
      factors[which].push_back(call.factor);
    }
    orders[order]++;
  }
  ExpectFits(applied, {0.2, 0.8}, "applied with p");
  ASSERT_EQ(orders.size(), 24u);
  std::vector<double> counts;
  for (const auto& [order, count] : orders) counts.push_back(count);
  ExpectFits(counts, Uniform(24), "order permutations");
  ExpectUniform(factors[0], 0.6, 1.4, "brightness");
  ExpectUniform(factors[1], 0.0, 2.5, "contrast, clipped at 0");
  ExpectUniform(factors[2], 0.8, 1.2, "saturation");
  ExpectUniform(factors[3], -0.1, 0.1, "hue");
}

TEST(SamplingTest, RandomAffineParameters) {
  const AugmentPlan plan = MakePlan(
      "random_affine { degrees_min: -30 degrees_max: 30 translate_x: 0.1 "
      "translate_y: 0.05 scale_min: 0.8 scale_max: 1.2 shear_x_min: -10 "
      "shear_x_max: 10 shear_y_min: 0 shear_y_max: 5 }");
  std::vector<double> angle, scale, shear_x, shear_y;
  // 100 x 200: max_dx = 0.1 * 100 = 10, max_dy = 0.05 * 200 = 10.
  std::vector<double> tx(21, 0), ty(21, 0);
  for (int i = 0; i < kDraws; ++i) {
    const std::vector<OpCall> calls = DrawSample(plan, i, 100, 200);
    ASSERT_EQ(calls.size(), 1u);
    const AffineParams& a = calls[0].affine;
    EXPECT_FALSE(a.center_set);
    angle.push_back(a.angle);
    scale.push_back(a.scale);
    shear_x.push_back(a.shear_x);
    shear_y.push_back(a.shear_y);
    ASSERT_EQ(a.translate_x, std::round(a.translate_x));
    tx[static_cast<size_t>(a.translate_x + 10)]++;
    ty[static_cast<size_t>(a.translate_y + 10)]++;
  }
  ExpectUniform(angle, -30, 30, "angle");
  ExpectUniform(scale, 0.8, 1.2, "scale");
  ExpectUniform(shear_x, -10, 10, "shear x");
  ExpectUniform(shear_y, 0, 5, "shear y");
  // round(U(-10, 10)): each integer's interval is 1 wide, +-10's half.
  std::vector<double> rounded(21, 1.0 / 20);
  rounded.front() = rounded.back() = 1.0 / 40;
  ExpectFits(tx, rounded, "translate x");
  ExpectFits(ty, rounded, "translate y");
}

TEST(SamplingTest, StandAloneOpsRunWithTheirProbability) {
  for (const char* text :
       {"random_grayscale { p: 0.3 }", "random_solarize { p: 0.3 }",
        "random_posterize { p: 0.3 }", "random_invert { p: 0.3 }",
        "gaussian_blur { kernel_size: 3 p: 0.3 }",
        "random_vertical_flip { p: 0.3 }"}) {
    SCOPED_TRACE(text);
    const AugmentPlan plan = MakePlan(text);
    std::vector<double> ran(2, 0);
    std::vector<double> sigma;
    for (int i = 0; i < kDraws; ++i) {
      const std::vector<OpCall> calls = DrawSample(plan, i);
      ran[calls.size()]++;
      if (!calls.empty() && calls[0].fn == OpFn::kGaussianBlur) {
        sigma.push_back(calls[0].sigma);
      }
    }
    ExpectFits(ran, {0.7, 0.3}, "applied");
    if (!sigma.empty()) ExpectUniform(sigma, 0.1, 2.0, "sigma");
  }
}

TEST(DistributionsTest, GammaAndNormalMoments) {
  common::SampleRandom rng(1, 0, 0, common::RandomPurpose::kAugmentOps);
  for (double shape : {0.2, 1.0, 4.5}) {
    double sum = 0, squares = 0;
    for (int i = 0; i < kDraws; ++i) {
      const double x = Gamma(rng, shape);
      ASSERT_GT(x, 0);
      sum += x;
      squares += x * x;
    }
    const double mean = sum / kDraws;
    const double variance = squares / kDraws - mean * mean;
    // Gamma(k, 1): mean k, variance k.
    EXPECT_NEAR(mean, shape, 5 * std::sqrt(shape / kDraws)) << shape;
    EXPECT_NEAR(variance, shape, 0.05 * shape + 0.01) << shape;
  }
  double sum = 0, squares = 0;
  for (int i = 0; i < kDraws; ++i) {
    const double x = StandardNormal(rng);
    sum += x;
    squares += x * x;
  }
  EXPECT_NEAR(sum / kDraws, 0, 5 / std::sqrt(kDraws));
  EXPECT_NEAR(squares / kDraws, 1, 0.02);
}

}  // namespace
}  // namespace batchd::server::augment
