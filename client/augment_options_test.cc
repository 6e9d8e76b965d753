#include "client/augment_options.h"

#include <string>

#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "testing/status_matchers.h"

namespace batchd::client {
namespace {

using ::batchd::testing::StatusIs;
using ::testing::HasSubstr;

// `pipeline` in text format on one line, e.g. "augment { ... }".
std::string Text(const batchd::v1::Pipeline& pipeline) {
  google::protobuf::TextFormat::Printer printer;
  printer.SetSingleLineMode(true);
  std::string out;
  printer.PrintToString(pipeline, &out);
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

absl::StatusOr<std::string> Apply(const AugmentOptions& options) {
  batchd::v1::Pipeline pipeline;
  RETURN_IF_ERROR(ApplyAugmentOptions(options, &pipeline));
  return Text(pipeline);
}

TEST(AugmentOptionsTest, DefaultsLeaveThePipelineAsAnOlderClientSendsIt) {
  ASSERT_OK_AND_ASSIGN(const std::string text, Apply(AugmentOptions()));
  EXPECT_EQ(text, "");
}

TEST(AugmentOptionsTest, CropInterpolation) {
  AugmentOptions options;
  options.interpolation = "bicubic";
  ASSERT_OK_AND_ASSIGN(const std::string text, Apply(options));
  EXPECT_EQ(text, "interpolation: INTERPOLATION_BICUBIC");
  options.interpolation = "nearest";
  EXPECT_THAT(Apply(options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "interpolation must be bilinear or bicubic, not "
                       "'nearest'"));
}

TEST(AugmentOptionsTest, ReferencePoliciesAsTheClassificationPresetAddsThem) {
  const std::pair<const char*, const char*> cases[] = {
      {"ta_wide",
       "augment { trivial_augment_wide { interpolation: "
       "INTERPOLATION_BILINEAR } }"},
      {"ra", "augment { rand_augment { interpolation: INTERPOLATION_BILINEAR "
             "} }"},
      {"augmix",
       "augment { aug_mix { interpolation: INTERPOLATION_BILINEAR } }"},
      {"imagenet",
       "augment { auto_augment { interpolation: INTERPOLATION_BILINEAR } }"},
      {"cifar10",
       "augment { auto_augment { policy: POLICY_CIFAR10 interpolation: "
       "INTERPOLATION_BILINEAR } }"},
      {"svhn",
       "augment { auto_augment { policy: POLICY_SVHN interpolation: "
       "INTERPOLATION_BILINEAR } }"},
  };
  for (const auto& [name, want] : cases) {
    AugmentOptions options;
    options.auto_augment = name;
    ASSERT_OK_AND_ASSIGN(const std::string text, Apply(options));
    EXPECT_EQ(text, want) << name;
  }
}

TEST(AugmentOptionsTest, MagnitudeAndSeverityOnlyWithTheirPolicy) {
  AugmentOptions options;
  options.auto_augment = "ra";
  options.ra_magnitude = 15;
  options.interpolation = "bicubic";
  ASSERT_OK_AND_ASSIGN(std::string text, Apply(options));
  // The policy's geometric ops stay bilinear under a bicubic crop.
  EXPECT_EQ(text,
            "interpolation: INTERPOLATION_BICUBIC augment { rand_augment { "
            "magnitude: 15 interpolation: INTERPOLATION_BILINEAR } }");
  options.ra_magnitude = 31;
  EXPECT_THAT(Apply(options), StatusIs(absl::StatusCode::kInvalidArgument,
                                       HasSubstr("ra_magnitude must be 0..30")));

  options = AugmentOptions();
  options.auto_augment = "augmix";
  options.augmix_severity = 5;
  ASSERT_OK_AND_ASSIGN(text, Apply(options));
  EXPECT_EQ(text,
            "augment { aug_mix { severity: 5 interpolation: "
            "INTERPOLATION_BILINEAR } }");
  options.augmix_severity = 0;
  EXPECT_THAT(Apply(options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "augmix_severity must be 1..10, not 0"));

  options = AugmentOptions();
  options.auto_augment = "ta_wide";
  options.ra_magnitude = 12;
  EXPECT_THAT(Apply(options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "ra_magnitude applies to auto_augment=ra only"));
  options.ra_magnitude = kDefaultRaMagnitude;
  options.augmix_severity = 4;
  EXPECT_THAT(Apply(options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "augmix_severity applies to auto_augment=augmix only"));
  options = AugmentOptions();
  options.auto_augment = "autoaugment";
  EXPECT_THAT(Apply(options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("auto_augment must be ta_wide, ra, augmix, "
                                 "imagenet, cifar10 or svhn, not "
                                 "'autoaugment'")));
}

TEST(AugmentOptionsTest, TextListFollowsThePolicyInOrder) {
  AugmentOptions options;
  options.auto_augment = "ta_wide";
  options.augment =
      "augment { random_grayscale { p: 0.2 } }\n"
      "augment { gaussian_blur { kernel_size: 23 p: 0.5 } }";
  ASSERT_OK_AND_ASSIGN(const std::string text, Apply(options));
  EXPECT_EQ(text,
            "augment { trivial_augment_wide { interpolation: "
            "INTERPOLATION_BILINEAR } } augment { random_grayscale { p: 0.2 "
            "} } augment { gaussian_blur { kernel_size: 23 p: 0.5 } }");
}

TEST(AugmentOptionsTest, TextErrorsSayWhereAndWhat) {
  batchd::v1::Pipeline out;
  EXPECT_THAT(ParseAugmentList("augment { rand_augment { num_op: 3 } }", &out),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("augment: line 1 column ")));
  EXPECT_THAT(ParseAugmentList("augment { rand_augment { num_op: 3 } }", &out),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("num_op")));
  EXPECT_THAT(ParseAugmentList("augment {\n random_invert { p: 2 ", &out),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("augment: line 2")));
  EXPECT_THAT(ParseAugmentList("train { size: 64 }", &out),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "augment: only `augment { ... }` entries (and "
                       "`erasing { ... }`, `mix { ... }`) may be given here, "
                       "not 'train'"));
  EXPECT_THAT(ParseAugmentList("augment { } augment { }", &out),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("augment: entry 1 names no op")));
  // Two ops in one entry: the oneof refuses the second.
  EXPECT_THAT(ParseAugmentList(
                  "augment { random_invert {} random_equalize {} }", &out),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("random_equalize")));
  EXPECT_TRUE(out.augment().empty());
  EXPECT_OK(ParseAugmentList("", &out));
  EXPECT_TRUE(out.augment().empty());
}

// torchvision's --random-erase, --mixup-alpha, --cutmix-alpha and
// --label-smoothing become Pipeline.erasing and Pipeline.mix; the text
// form (what batchd.augment writes) wins over them.
TEST(AugmentOptionsTest, ReferenceFlagsAndTextSetErasingAndMix) {
  AugmentOptions options;
  options.random_erase = 0.1;
  options.mixup_alpha = 0.2;
  options.cutmix_alpha = 1.0;
  options.label_smoothing = 0.1;
  options.num_classes = 1000;
  ASSERT_OK_AND_ASSIGN(const std::string text, Apply(options));
  EXPECT_EQ(text,
            "erasing { p: 0.1 } mix { mixup_alpha: 0.2 cutmix_alpha: 1 "
            "label_smoothing: 0.1 num_classes: 1000 }");
  options.augment = "erasing { p: 0.25 random_value: true } "
                    "mix { cutmix_alpha: 1 num_classes: 10 prob: 0.5 }";
  ASSERT_OK_AND_ASSIGN(const std::string replaced, Apply(options));
  EXPECT_EQ(replaced,
            "erasing { p: 0.25 random_value: true } mix { cutmix_alpha: 1 "
            "num_classes: 10 prob: 0.5 }");
  AugmentOptions smoothing_alone;
  smoothing_alone.label_smoothing = 0.1;
  EXPECT_THAT(Apply(smoothing_alone).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("CrossEntropyLoss(label_smoothing")));
  AugmentOptions no_classes;
  no_classes.mixup_alpha = 0.2;
  EXPECT_THAT(Apply(no_classes).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("num_classes")));
  AugmentOptions bad_p;
  bad_p.random_erase = 1.5;
  EXPECT_THAT(Apply(bad_p).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("random_erase")));
}

TEST(ParseViewListTest, SetsTheViewsAndClearsTheCrop) {
  batchd::v1::Plan plan;
  plan.mutable_pipeline()->mutable_train()->set_size(224);
  ASSERT_TRUE(ParseViewList("views { count: 2 crop { size: 224 } }\n"
                            "views { count: 6 crop { size: 96 } }",
                            &plan)
                  .ok());
  ASSERT_EQ(plan.views_size(), 2);
  EXPECT_EQ(plan.views(1).count(), 6u);
  EXPECT_EQ(plan.views(1).crop().size(), 96u);
  EXPECT_FALSE(plan.pipeline().has_train());
  batchd::v1::Plan untouched;
  untouched.mutable_pipeline()->mutable_train()->set_size(224);
  EXPECT_TRUE(ParseViewList("", &untouched).ok());
  EXPECT_TRUE(untouched.pipeline().has_train());
  EXPECT_THAT(ParseViewList("seed: 3", &plan),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("only `views { ... }` entries")));
  EXPECT_THAT(ParseViewList("views { count: ", &plan),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("views: ")));
}

}  // namespace
}  // namespace batchd::client
