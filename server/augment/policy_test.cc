// AugmentPlan: the checks of augment.proto (each refusal names its field),
// the defaults, torchvision's magnitude tables, Draw as a pure function of
// the generator, Describe, and AugMix's float32 mixing. The sampling
// distributions are tested in policy_sampling_test.cc.
#include "server/augment/policy.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "testing/status_matchers.h"

namespace batchd::server::augment {
namespace {

using ::batchd::testing::StatusIs;
using ::testing::HasSubstr;

google::protobuf::RepeatedPtrField<batchd::v1::Augment> Ops(
    const std::vector<std::string>& texts) {
  google::protobuf::RepeatedPtrField<batchd::v1::Augment> ops;
  for (const std::string& text : texts) {
    EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, ops.Add()))
        << text;
  }
  return ops;
}

absl::StatusOr<AugmentPlan> Make(const std::vector<std::string>& texts) {
  return AugmentPlan::Create(Ops(texts));
}

common::SampleRandom Rng(uint64_t sample) {
  return common::SampleRandom(/*seed=*/7, /*epoch=*/0, sample,
                              common::RandomPurpose::kAugmentOps);
}

struct Refusal {
  std::vector<std::string> ops;
  std::string message;
};

TEST(AugmentPlanTest, RefusesEachBadFieldNamingIt) {
  const std::vector<Refusal> refusals = {
      {{"random_invert {}", "rand_augment { magnitude: 40 }"},
       "pipeline.augment[1].rand_augment.magnitude: 40 is out of range "
       "0..30 (num_magnitude_bins - 1)"},
      {{"rand_augment { num_magnitude_bins: 5 }"},
       "pipeline.augment[0].rand_augment.magnitude: 9 is out of range 0..4"},
      {{"rand_augment { num_ops: 17 }"},
       "pipeline.augment[0].rand_augment.num_ops: 17 is out of range 0..16"},
      {{"rand_augment { magnitude_std: -1 }"},
       "rand_augment.magnitude_std: -1 is out of range 0..100"},
      {{"trivial_augment_wide { num_magnitude_bins: 1 }"},
       "pipeline.augment[0].trivial_augment_wide.num_magnitude_bins: 1 is "
       "out of range 2..1024"},
      {{"trivial_augment_wide { fill: [1, 2] }"},
       "trivial_augment_wide.fill: 2 values; give none"},
      {{"auto_augment { fill: [1, 256, 3] }"},
       "pipeline.augment[0].auto_augment.fill[1]: 256 is out of range 0..255"},
      {{"auto_augment { interpolation: INTERPOLATION_BICUBIC }"},
       "auto_augment.interpolation: INTERPOLATION_BICUBIC is for the crop's "
       "resize only"},
      {{"auto_augment { policy: 9 }"}, "auto_augment.policy: 9 is unknown"},
      {{"aug_mix { severity: 11 }"},
       "aug_mix.severity: 11 is out of range 1..10"},
      {{"aug_mix { mixture_width: 0 }"},
       "aug_mix.mixture_width: 0 is out of range 1..16"},
      {{"aug_mix { chain_depth: 17 }"},
       "aug_mix.chain_depth: 17 is out of range 0..16"},
      {{"aug_mix { alpha: 0 }"}, "aug_mix.alpha: 0 is out of range (0, 100]"},
      {{"color_jitter { brightness: -0.1 }"},
       "color_jitter.brightness: -0.1 is out of range"},
      {{"color_jitter { hue: 0.6 }"},
       "color_jitter.hue: 0.6 is out of range 0..0.5"},
      {{"color_jitter { p: 1.5 }"}, "color_jitter.p: 1.5 is out of range 0..1"},
      {{"random_grayscale { p: -0.5 }"},
       "random_grayscale.p: -0.5 is out of range 0..1"},
      {{"gaussian_blur { }"},
       "gaussian_blur.kernel_size: 0 is out of range 1..255"},
      {{"gaussian_blur { kernel_size: 4 }"},
       "gaussian_blur.kernel_size: 4 is even"},
      {{"gaussian_blur { kernel_size: 3 kernel_size_y: 6 }"},
       "gaussian_blur.kernel_size_y: 6 is even"},
      {{"gaussian_blur { kernel_size: 3 sigma_min: 0 }"},
       "gaussian_blur.sigma_min: 0 is out of range (0, 100]"},
      {{"gaussian_blur { kernel_size: 3 sigma_min: 3 sigma_max: 2 }"},
       "gaussian_blur.sigma_min: 3 is above sigma_max"},
      {{"random_solarize { threshold: 300 }"},
       "random_solarize.threshold: 300 is out of range 0..256"},
      {{"random_posterize { bits: 9 }"},
       "random_posterize.bits: 9 is out of range 0..8"},
      {{"random_autocontrast { p: 2 }"}, "random_autocontrast.p: 2"},
      {{"random_equalize { p: 2 }"}, "random_equalize.p: 2"},
      {{"random_invert { p: 2 }"}, "random_invert.p: 2"},
      {{"random_vertical_flip { p: 2 }"}, "random_vertical_flip.p: 2"},
      {{"random_rotation { degrees_min: -400 }"},
       "random_rotation.degrees_min: -400 is out of range -360..360"},
      {{"random_rotation { degrees_min: 10 degrees_max: 5 }"},
       "random_rotation.degrees_min: 10 is above degrees_max"},
      {{"random_rotation { interpolation: INTERPOLATION_BICUBIC }"},
       "random_rotation.interpolation"},
      {{"random_affine { translate_x: 1.5 }"},
       "random_affine.translate_x: 1.5 is out of range 0..1"},
      {{"random_affine { scale_min: 0.5 }"},
       "random_affine.scale_max: is unset"},
      {{"random_affine { scale_min: 0 scale_max: 1 }"},
       "random_affine.scale_min: 0 is out of range (0, 100]"},
      {{"random_affine { shear_y_min: 5 shear_y_max: 1 }"},
       "random_affine.shear_y_min: 5 is above shear_y_max"},
      {{"random_affine { shear_x_max: 200 }"},
       "random_affine.shear_x_max: 200 is out of range -180..180"},
      {{"random_affine { interpolation: 7 }"},
       "random_affine.interpolation: 7 is unknown"},
      {{"random_invert {}", "random_invert {}", ""},
       "pipeline.augment[2]: no op is set"},
  };
  for (const Refusal& refusal : refusals) {
    SCOPED_TRACE(refusal.message);
    EXPECT_THAT(Make(refusal.ops), StatusIs(absl::StatusCode::kInvalidArgument,
                                            HasSubstr(refusal.message)));
  }
  // A kernel wider than reflect padding allows on the output.
  EXPECT_THAT(
      AugmentPlan::Create(Ops({"gaussian_blur { kernel_size: 65 }"}),
                          "pipeline.augment", /*image_side=*/32),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("pipeline.augment[0].gaussian_blur.kernel_size: 65 "
                         "is out of range 1..63 (at most 2 * the 32-pixel "
                         "output - 1, for reflect padding)")));
  EXPECT_TRUE(AugmentPlan::Create(Ops({"gaussian_blur { kernel_size: 63 }"}),
                                  "pipeline.augment", 32)
                  .ok());
  std::vector<std::string> seventeen(17, "random_invert {}");
  EXPECT_THAT(Make(seventeen),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("pipeline.augment has 17 ops; at most 16")));
  EXPECT_TRUE(Make(std::vector<std::string>(16, "random_invert {}")).ok());
}

TEST(AugmentPlanTest, FillsInTorchvisionDefaults) {
  ASSERT_OK_AND_ASSIGN(
      AugmentPlan plan,
      Make({"rand_augment {}", "aug_mix {}",
            "color_jitter { brightness: 0.4 "
            "hue: 0.1 }",
            "random_grayscale {}",
            "gaussian_blur { "
            "kernel_size: 5 }",
            "random_affine { fill: [1, 2, 3] }", "random_rotation {}"}));
  ASSERT_EQ(plan.ops().size(), 7u);
  const AugmentOp& rand = plan.ops()[0];
  EXPECT_EQ(rand.num_ops, 2);
  EXPECT_EQ(rand.magnitude, 9);
  EXPECT_EQ(rand.num_magnitude_bins, 31);
  EXPECT_EQ(rand.interpolation, Interpolation::kNearest);
  EXPECT_TRUE(rand.fill_none);
  const AugmentOp& mix = plan.ops()[1];
  EXPECT_EQ(mix.severity, 3);
  EXPECT_EQ(mix.mixture_width, 3);
  EXPECT_EQ(mix.chain_depth, 0);
  EXPECT_EQ(mix.alpha, 1.0);
  EXPECT_TRUE(mix.all_ops);
  EXPECT_EQ(mix.interpolation, Interpolation::kBilinear);
  const AugmentOp& jitter = plan.ops()[2];
  EXPECT_EQ(jitter.p, 1.0);
  EXPECT_TRUE(jitter.jitter_enabled[0]);
  EXPECT_FALSE(jitter.jitter_enabled[1]);
  EXPECT_FALSE(jitter.jitter_enabled[2]);
  EXPECT_TRUE(jitter.jitter_enabled[3]);
  EXPECT_FLOAT_EQ(jitter.jitter_min[0], 0.6);
  EXPECT_FLOAT_EQ(jitter.jitter_max[0], 1.4);
  EXPECT_FLOAT_EQ(jitter.jitter_min[3], -0.1);
  EXPECT_FLOAT_EQ(plan.ops()[3].p, 0.1);
  EXPECT_EQ(plan.ops()[4].kernel_y, 5);
  EXPECT_FLOAT_EQ(plan.ops()[4].sigma_min, 0.1);
  EXPECT_FLOAT_EQ(plan.ops()[4].sigma_max, 2.0);
  EXPECT_FALSE(plan.ops()[5].fill_none);
  EXPECT_EQ(plan.ops()[5].fill, (std::array<uint8_t, 3>{1, 2, 3}));
  // RandomRotation's default fill is torchvision's 0, given explicitly.
  EXPECT_FALSE(plan.ops()[6].fill_none);
}

TEST(AugmentPlanTest, FingerprintSaysWhatDecidesTheCalls) {
  ASSERT_OK_AND_ASSIGN(AugmentPlan none, Make({}));
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(none.fingerprint(), "");
  ASSERT_OK_AND_ASSIGN(AugmentPlan implicit, Make({"rand_augment {}"}));
  ASSERT_OK_AND_ASSIGN(
      AugmentPlan explicit_defaults,
      Make({"rand_augment { num_ops: 2 magnitude: 9 num_magnitude_bins: 31 "
            "interpolation: INTERPOLATION_NEAREST }"}));
  EXPECT_EQ(implicit.fingerprint(), explicit_defaults.fingerprint());
  for (const std::string& other :
       {"rand_augment { magnitude: 10 }", "rand_augment { magnitude_std: 0.5 }",
        "rand_augment { fill: [0, 0, 0] }", "trivial_augment_wide {}",
        "rand_augment { interpolation: INTERPOLATION_BILINEAR }"}) {
    ASSERT_OK_AND_ASSIGN(AugmentPlan plan, Make({other}));
    EXPECT_NE(plan.fingerprint(), implicit.fingerprint()) << other;
  }
  ASSERT_OK_AND_ASSIGN(AugmentPlan ab,
                       Make({"random_invert {}", "random_equalize {}"}));
  ASSERT_OK_AND_ASSIGN(AugmentPlan ba,
                       Make({"random_equalize {}", "random_invert {}"}));
  EXPECT_NE(ab.fingerprint(), ba.fingerprint());
}

// Entries printed by torch 1.13 / torchvision 0.14 (_augmentation_space).
TEST(OpSpaceTest, MagnitudeTablesAreTorchvisions) {
  const std::vector<double> wide_translate = {0.0,
                                              1.0666667222976685,
                                              2.133333444595337,
                                              3.200000286102295,
                                              4.266666889190674,
                                              5.333333492279053,
                                              6.40000057220459,
                                              7.466667175292969,
                                              8.533333778381348,
                                              9.600000381469727,
                                              10.666666984558105,
                                              11.733333587646484,
                                              12.80000114440918,
                                              13.866666793823242,
                                              14.933334350585938,
                                              16.0,
                                              17.066665649414062,
                                              18.133333206176758,
                                              19.19999885559082,
                                              20.266666412353516,
                                              21.333332061767578,
                                              22.399999618530273,
                                              23.46666717529297,
                                              24.53333282470703,
                                              25.600000381469727,
                                              26.66666603088379,
                                              27.733333587646484,
                                              28.799999237060547,
                                              29.866666793823242,
                                              30.933332443237305,
                                              32.0};
  const std::vector<int> wide_posterize = {8, 8, 8, 7, 7, 7, 7, 7, 6, 6, 6,
                                           6, 6, 5, 5, 5, 5, 5, 4, 4, 4, 4,
                                           4, 3, 3, 3, 3, 3, 2, 2, 2};
  const std::vector<int> rand_posterize = {8, 8, 8, 8, 7, 7, 7, 7, 7, 7, 7,
                                           7, 6, 6, 6, 6, 6, 6, 6, 5, 5, 5,
                                           5, 5, 5, 5, 5, 4, 4, 4, 4};
  const std::vector<int> augmix_posterize = {4, 4, 3, 3, 2, 2, 1, 1, 0, 0};
  for (int i = 0; i < 31; ++i) {
    const float translate = Magnitude(OpSpace::kTrivialAugmentWide,
                                      PolicyOp::kTranslateX, 31, i, 224, 160);
    // Within one float32 ulp, and the same after int().
    EXPECT_NEAR(translate, wide_translate[i], 4e-6) << i;
    EXPECT_EQ(static_cast<int>(translate), static_cast<int>(wide_translate[i]))
        << i;
    EXPECT_EQ(Magnitude(OpSpace::kTrivialAugmentWide, PolicyOp::kPosterize, 31,
                        i, 1, 1),
              wide_posterize[i])
        << i;
    EXPECT_EQ(
        Magnitude(OpSpace::kRandAugment, PolicyOp::kPosterize, 31, i, 1, 1),
        rand_posterize[i])
        << i;
  }
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(Magnitude(OpSpace::kAugMix, PolicyOp::kPosterize, 10, i, 1, 1),
              augmix_posterize[i])
        << i;
  }
  // 224 wide, 160 high: TranslateX scales with the width.
  EXPECT_FLOAT_EQ(
      Magnitude(OpSpace::kRandAugment, PolicyOp::kTranslateX, 31, 9, 224, 160),
      30.45317268371582f);
  EXPECT_FLOAT_EQ(
      Magnitude(OpSpace::kRandAugment, PolicyOp::kTranslateY, 31, 9, 224, 160),
      21.75226593017578f);
  EXPECT_FLOAT_EQ(
      Magnitude(OpSpace::kAutoAugment, PolicyOp::kTranslateX, 10, 9, 224, 160),
      101.51057434082031f);
  EXPECT_FLOAT_EQ(
      Magnitude(OpSpace::kAugMix, PolicyOp::kTranslateX, 10, 1, 224, 160),
      8.296296119689941f);
  EXPECT_FLOAT_EQ(
      Magnitude(OpSpace::kAugMix, PolicyOp::kTranslateY, 10, 9, 224, 160),
      53.33333206176758f);
  EXPECT_FLOAT_EQ(
      Magnitude(OpSpace::kTrivialAugmentWide, PolicyOp::kSolarize, 31, 1, 1, 1),
      246.5f);
  EXPECT_FLOAT_EQ(
      Magnitude(OpSpace::kRandAugment, PolicyOp::kShearX, 31, 9, 1, 1),
      0.09000000357627869f);
  EXPECT_FLOAT_EQ(
      Magnitude(OpSpace::kTrivialAugmentWide, PolicyOp::kRotate, 31, 7, 1, 1),
      31.5f);
  // A fractional bin lies between its neighbours; an integral one is exact.
  EXPECT_EQ(FractionalMagnitude(OpSpace::kRandAugment, PolicyOp::kRotate, 31,
                                9.0, 1, 1),
            Magnitude(OpSpace::kRandAugment, PolicyOp::kRotate, 31, 9, 1, 1));
  EXPECT_NEAR(FractionalMagnitude(OpSpace::kRandAugment, PolicyOp::kRotate, 31,
                                  9.25, 1, 1),
              9.25, 1e-5);
}

TEST(OpSpaceTest, ApplyOpMakesTorchvisionsCalls) {
  const std::array<uint8_t, 3> fill = {0, 0, 0};
  OpCall shear = PolicyCall(PolicyOp::kShearX, -0.3, Interpolation::kNearest,
                            fill, /*fill_none=*/true);
  EXPECT_EQ(shear.fn, OpFn::kAffine);
  EXPECT_FLOAT_EQ(shear.affine.shear_x, -16.69924423f);  // degrees(atan(.3))
  EXPECT_TRUE(shear.affine.center_set);                  // center=[0, 0]
  OpCall translate = PolicyCall(PolicyOp::kTranslateY, -30.9,
                                Interpolation::kBilinear, fill, true);
  EXPECT_EQ(translate.affine.translate_y, -30.0f);  // int(): toward zero
  EXPECT_FALSE(translate.affine.center_set);
  EXPECT_EQ(
      PolicyCall(PolicyOp::kPosterize, 6.0, Interpolation::kNearest, fill, true)
          .bits,
      6);
  EXPECT_EQ(PolicyCall(PolicyOp::kSolarize, 246.5, Interpolation::kNearest,
                       fill, true)
                .threshold,
            246.5);
  EXPECT_EQ(
      PolicyCall(PolicyOp::kColor, -0.5, Interpolation::kNearest, fill, true)
          .factor,
      0.5);
}

TEST(AugmentPlanTest, DrawIsAPureFunctionOfTheGenerator) {
  ASSERT_OK_AND_ASSIGN(
      AugmentPlan plan,
      Make({"trivial_augment_wide {}", "rand_augment { magnitude_std: 1 }",
            "auto_augment { policy: POLICY_SVHN }", "aug_mix {}",
            "color_jitter { brightness: 0.4 contrast: 0.4 saturation: 0.4 "
            "hue: 0.1 p: 0.8 }",
            "random_grayscale { p: 0.2 }", "gaussian_blur { kernel_size: 9 }",
            "random_affine { "
            "degrees_min: -10 degrees_max: 10 translate_x: 0.1 translate_y: "
            "0.1 scale_min: 0.9 scale_max: 1.1 shear_x_min: -5 shear_x_max: "
            "5 }",
            "random_rotation { degrees_min: -20 degrees_max: 20 }"}));
  std::vector<std::string> first;
  for (uint64_t sample = 0; sample < 200; ++sample) {
    common::SampleRandom a = Rng(sample);
    common::SampleRandom b = Rng(sample);
    const std::string once = Describe(plan.Draw(a, 224, 192));
    EXPECT_EQ(once, Describe(plan.Draw(b, 224, 192)));
    // Same state, same calls: a copy of a generator mid-stream too.
    common::SampleRandom c = a;
    EXPECT_EQ(Describe(plan.Draw(a, 224, 192)),
              Describe(plan.Draw(c, 224, 192)));
    first.push_back(once);
  }
  // Samples differ (a collision of two is not impossible, of many is).
  std::sort(first.begin(), first.end());
  EXPECT_GT(std::unique(first.begin(), first.end()) - first.begin(), 190);
}

TEST(DescribeTest, WritesTorchvisionCalls) {
  EXPECT_EQ(Describe({}), "");
  OpCall brightness;
  brightness.fn = OpFn::kAdjustBrightness;
  brightness.factor = 1.25;
  OpCall translate;
  translate.fn = OpFn::kAffine;
  translate.affine.translate_x = -5;
  translate.fill_none = true;
  OpCall rotate;
  rotate.fn = OpFn::kRotate;
  rotate.affine.angle = 12.5f;
  rotate.affine.interpolation = Interpolation::kBilinear;
  rotate.affine.fill = {1, 2, 3};
  OpCall blur;
  blur.fn = OpFn::kGaussianBlur;
  blur.kernel_x = 3;
  blur.kernel_y = 5;
  blur.sigma = 0.5;
  OpCall posterize;
  posterize.fn = OpFn::kPosterize;
  posterize.bits = 3;
  OpCall mix;
  mix.fn = OpFn::kAugMix;
  mix.mix_weights = {0.5f, 0.25f, 0.25f};
  mix.chains = {{posterize}, {OpCall{}}};
  EXPECT_EQ(Describe({brightness, translate, rotate, blur, mix}),
            "adjust_brightness(brightness_factor=1.25), affine(angle=0, "
            "translate=[-5, 0], scale=1, shear=[0, 0], center=None, "
            "interpolation=nearest, fill=None), rotate(angle=12.5, "
            "interpolation=bilinear, fill=[1, 2, 3]), "
            "gaussian_blur(kernel_size=[3, 5], sigma=[0.5, 0.5]), "
            "augmix(weights=[0.5, 0.25, 0.25], chains=[[posterize(bits=3)], "
            "[identity()]])");
}

// AugMix's mixing with ops whose output is exact (Invert): 0.5 * v + 0.5 *
// (255 - v) = 127.5 in float32, truncated to 127 as `.to(torch.uint8)`.
TEST(ApplyTest, AugMixMixesInFloat32AndTruncates) {
  std::vector<uint8_t> pixels = {0, 10, 200, 255, 3, 4};
  const Image image{pixels.data(), 2, 1, 6};
  OpCall invert;
  invert.fn = OpFn::kInvert;
  OpCall mix;
  mix.fn = OpFn::kAugMix;
  mix.mix_weights = {0.5f, 0.5f};
  mix.chains = {{invert}};
  Scratch scratch;
  Apply({mix}, image, &scratch);
  EXPECT_EQ(pixels, std::vector<uint8_t>(6, 127));

  // Two identity chains and the original: the weights sum to 1 up to
  // float32 rounding, never past 255.
  std::vector<uint8_t> white(12, 255);
  mix.mix_weights = {0.3f, 0.2f, 0.5f};
  mix.chains = {{}, {}};
  Apply({mix}, Image{white.data(), 2, 2, 6}, &scratch);
  for (uint8_t v : white) EXPECT_GE(v, 254);
}

}  // namespace
}  // namespace batchd::server::augment
