#include "server/plan/views.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/plan/resolved_plan.h"

namespace batchd::server {
namespace {

// "d": 10 samples.
DatasetMap Datasets() {
  std::vector<Sample> samples(10);
  for (size_t i = 0; i < samples.size(); ++i) {
    samples[i].path = "/nowhere/" + std::to_string(i) + ".jpg";
  }
  return {{"d", std::make_shared<const Dataset>(
                    "d", samples, std::vector<std::string>{"x"})}};
}

batchd::v1::Plan BasePlan() {
  batchd::v1::Plan plan;
  plan.set_dataset("d");
  plan.set_batch_size(4);
  plan.set_seed(7);
  plan.set_shuffle(true);
  return plan;
}

batchd::v1::ViewGroup* AddGroup(batchd::v1::Plan& plan, uint32_t count,
                                uint32_t size, float scale_min,
                                float scale_max) {
  batchd::v1::ViewGroup* group = plan.add_views();
  group->set_count(count);
  group->mutable_crop()->set_size(size);
  group->mutable_crop()->set_scale_min(scale_min);
  group->mutable_crop()->set_scale_max(scale_max);
  return group;
}

// DINO: 2 global views at 224 (scale 0.4-1), 6 local at 96 (0.05-0.4).
batchd::v1::Plan DinoPlan() {
  batchd::v1::Plan plan = BasePlan();
  AddGroup(plan, 2, 224, 0.4f, 1.0f);
  AddGroup(plan, 6, 96, 0.05f, 0.4f);
  return plan;
}

absl::StatusOr<std::shared_ptr<const ResolvedPlan>> Resolve(
    const batchd::v1::Plan& plan) {
  return ResolvePlan(plan, Datasets(), PlanLimits{});
}

std::string CropText(const CropSpec& c) {
  return absl::StrCat(c.x, ",", c.y, ",", c.width, ",", c.height, ",",
                      c.out_width, "x", c.out_height, c.flip ? " flip" : "");
}

TEST(ViewsTest, DinoPlanResolvesToViewMajorLayout) {
  absl::StatusOr<std::shared_ptr<const ResolvedPlan>> resolved =
      Resolve(DinoPlan());
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  const ResolvedPlan& plan = **resolved;
  ASSERT_EQ(plan.view_count(), 8u);
  EXPECT_EQ(plan.view_size(0), 224);
  EXPECT_EQ(plan.view_size(1), 224);
  EXPECT_EQ(plan.view_size(2), 96);
  EXPECT_EQ(plan.view_size(7), 96);
  const uint64_t global = 3 * 224 * 224, local = 3 * 96 * 96;
  EXPECT_EQ(plan.sample_bytes(), 2 * global + 6 * local);
  EXPECT_EQ(plan.batch_bytes(3), 3 * (2 * global + 6 * local));
  // View-major: all samples' view 0, then view 1, ...
  EXPECT_EQ(plan.view_offset(0, 3), 0u);
  EXPECT_EQ(plan.view_offset(1, 3), 3 * global);
  EXPECT_EQ(plan.view_offset(3, 3), 3 * (2 * global + local));
  EXPECT_EQ(plan.shape(3), std::vector<uint64_t>{plan.batch_bytes(3)});
  const std::vector<batchd::v1::ViewShape> shapes = plan.ViewShapes(3);
  ASSERT_EQ(shapes.size(), 8u);
  EXPECT_EQ(std::vector<uint64_t>(shapes[0].shape().begin(),
                                  shapes[0].shape().end()),
            (std::vector<uint64_t>{3, 224, 224, 3}));
  EXPECT_EQ(std::vector<uint64_t>(shapes[2].shape().begin(),
                                  shapes[2].shape().end()),
            (std::vector<uint64_t>{3, 96, 96, 3}));
  EXPECT_EQ(shapes[2].offset(), 6 * global);
}

TEST(ViewsTest, BadPlansNameTheField) {
  struct Case {
    std::string name;
    std::function<void(batchd::v1::Plan&)> change;
    std::string field;
  };
  const std::vector<Case> cases = {
      {"17 views", [](auto& p) { AddGroup(p, 9, 32, 0.1f, 1); },
       "at most 16 views"},
      {"one group of 17",
       [](auto& p) { p.mutable_views(0)->set_count(17); }, "views[0].count"},
      {"9 groups",
       [](auto& p) {
         p.mutable_views(0)->set_count(1);
         p.mutable_views(1)->set_count(1);
         for (int i = 0; i < 7; ++i) AddGroup(p, 1, 32, 0.1f, 1);
       },
       "groups"},
      {"a group of 0", [](auto& p) { p.mutable_views(1)->set_count(0); },
       "views[1].count"},
      {"size 0",
       [](auto& p) { p.mutable_views(1)->mutable_crop()->set_size(0); },
       "views[1].crop.size"},
      {"size 5000",
       [](auto& p) { p.mutable_views(0)->mutable_crop()->set_size(5000); },
       "views[0].crop.size"},
      {"no crop", [](auto& p) { p.mutable_views(1)->clear_crop(); },
       "views[1].crop"},
      {"scale",
       [](auto& p) { p.mutable_views(1)->mutable_crop()->set_scale_min(0); },
       "views[1].crop scale"},
      {"nearest",
       [](auto& p) {
         p.mutable_views(0)->set_interpolation(
             batchd::v1::INTERPOLATION_NEAREST);
       },
       "views[0].interpolation"},
      {"pipeline.train",
       [](auto& p) { p.mutable_pipeline()->mutable_train()->set_size(32); },
       "pipeline.train"},
      {"pipeline.augment",
       [](auto& p) {
         p.mutable_pipeline()->add_augment()->mutable_trivial_augment_wide();
       },
       "pipeline.augment"},
      {"pipeline.mix",
       [](auto& p) {
         p.mutable_pipeline()->mutable_mix()->set_mixup_alpha(0.2f);
       },
       "pipeline.mix"},
      {"pipeline.erasing",
       [](auto& p) { p.mutable_pipeline()->mutable_erasing()->set_p(0.5f); },
       "pipeline.erasing"},
      {"cap below the largest view",
       [](auto& p) { p.mutable_pipeline()->set_decoded_max_side(100); },
       "pipeline.decoded_max_side"},
  };
  for (const Case& c : cases) {
    batchd::v1::Plan plan = DinoPlan();
    c.change(plan);
    absl::StatusOr<std::shared_ptr<const ResolvedPlan>> resolved =
        Resolve(plan);
    ASSERT_FALSE(resolved.ok()) << c.name;
    EXPECT_EQ(resolved.status().code(), absl::StatusCode::kInvalidArgument)
        << c.name;
    EXPECT_NE(resolved.status().message().find(c.field), std::string::npos)
        << c.name << ": " << resolved.status();
  }
}

// View 0 draws what the same crop draws in a plan without views (its entry
// is the sample's own), with and without repeats; the other views draw
// their own, as entry + view * N * repeats.
TEST(ViewsTest, ViewZeroKeepsTodaysDrawAndViewsDrawApart) {
  for (uint32_t repeats : {1u, 3u}) {
    batchd::v1::Plan single = BasePlan();
    single.set_repeats(repeats);
    single.mutable_pipeline()->mutable_train()->set_size(224);
    single.mutable_pipeline()->mutable_train()->set_scale_min(0.4f);
    single.mutable_pipeline()->mutable_train()->set_scale_max(1.0f);
    batchd::v1::Plan views = DinoPlan();
    views.set_repeats(repeats);
    absl::StatusOr<std::shared_ptr<const ResolvedPlan>> a = Resolve(single);
    absl::StatusOr<std::shared_ptr<const ResolvedPlan>> b = Resolve(views);
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    const uint64_t n = 10;
    int differing = 0;
    for (uint64_t entry = 0; entry < n * repeats; ++entry) {
      EXPECT_EQ(CropText((*a)->Crop(3, entry, 500, 375)),
                CropText((*b)->ViewCrop(3, entry, 0, 500, 375)));
      EXPECT_EQ(CropText((*a)->ViewCrop(3, entry, 0, 500, 375)),
                CropText((*a)->Crop(3, entry, 500, 375)));
      // View 1 (same group) is the plain plan's draw of entry + N * R.
      EXPECT_EQ(CropText((*b)->ViewCrop(3, entry, 1, 500, 375)),
                CropText((*a)->Crop(3, entry + n * repeats, 500, 375)));
      if (CropText((*b)->ViewCrop(3, entry, 0, 500, 375)) !=
          CropText((*b)->ViewCrop(3, entry, 1, 500, 375))) {
        ++differing;
      }
      // The local views are 96 pixels out, each its own window.
      const CropSpec local = (*b)->ViewCrop(3, entry, 2, 500, 375);
      EXPECT_EQ(local.out_width, 96);
      EXPECT_NE(CropText(local),
                CropText((*b)->ViewCrop(3, entry, 3, 500, 375)));
    }
    EXPECT_EQ(differing, static_cast<int>(n * repeats));
  }
}

// A pure function of (plan, epoch, entry): resolving again draws the same,
// another epoch draws otherwise.
TEST(ViewsTest, DrawsArePureFunctions) {
  batchd::v1::Plan plan = DinoPlan();
  plan.mutable_views(1)->add_augment()->mutable_trivial_augment_wide();
  absl::StatusOr<std::shared_ptr<const ResolvedPlan>> a = Resolve(plan);
  absl::StatusOr<std::shared_ptr<const ResolvedPlan>> b = Resolve(plan);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  int epoch_differs = 0;
  for (uint64_t entry = 0; entry < 10; ++entry) {
    for (uint32_t view = 0; view < 8; ++view) {
      EXPECT_EQ(CropText((*a)->ViewCrop(5, entry, view, 640, 480)),
                CropText((*b)->ViewCrop(5, entry, view, 640, 480)));
      EXPECT_EQ(augment::Describe((*a)->ViewAugmentCalls(5, entry, view, 96,
                                                         96)),
                augment::Describe((*b)->ViewAugmentCalls(5, entry, view, 96,
                                                         96)));
      if (CropText((*a)->ViewCrop(5, entry, view, 640, 480)) !=
          CropText((*a)->ViewCrop(6, entry, view, 640, 480))) {
        ++epoch_differs;
      }
    }
    EXPECT_FALSE((*a)->ViewAugmentCalls(5, entry, 2, 96, 96).empty());
    EXPECT_TRUE((*a)->ViewAugmentCalls(5, entry, 0, 224, 224).empty());
  }
  EXPECT_EQ(epoch_differs, 80);
}

TEST(ViewsTest, FingerprintTellsViewPlansApart) {
  auto fingerprint = [](const batchd::v1::Plan& plan) {
    absl::StatusOr<std::shared_ptr<const ResolvedPlan>> r = Resolve(plan);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? (*r)->fingerprint : "";
  };
  batchd::v1::Plan single = BasePlan();
  single.mutable_pipeline()->mutable_train()->set_size(224);
  const std::string dino = fingerprint(DinoPlan());
  EXPECT_NE(dino, fingerprint(single));
  batchd::v1::Plan fewer = DinoPlan();
  fewer.mutable_views(1)->set_count(5);
  EXPECT_NE(dino, fingerprint(fewer));
  batchd::v1::Plan smaller = DinoPlan();
  smaller.mutable_views(1)->mutable_crop()->set_size(95);
  EXPECT_NE(dino, fingerprint(smaller));
  batchd::v1::Plan ops = DinoPlan();
  ops.mutable_views(0)->add_augment()->mutable_trivial_augment_wide();
  EXPECT_NE(dino, fingerprint(ops));
  batchd::v1::Plan bicubic = DinoPlan();
  bicubic.mutable_views(0)->set_interpolation(
      batchd::v1::INTERPOLATION_BICUBIC);
  EXPECT_NE(dino, fingerprint(bicubic));
  // The same plan twice: one fingerprint.
  EXPECT_EQ(dino, fingerprint(DinoPlan()));
}

}  // namespace
}  // namespace batchd::server
