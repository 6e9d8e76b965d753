#include "client/erase_mix_batch.h"

#include <vector>

#include "gtest/gtest.h"

namespace batchd::client {
namespace {

cuda::NormalizeParams Params() {
  cuda::NormalizeSpec spec;
  spec.dtype = cuda::DType::kFloat32;
  cuda::NormalizeParams params;
  EXPECT_TRUE(cuda::MakeNormalizeParams({4, 16, 12, 3}, cuda::Layout::kNHWC,
                                        spec, &params)
                  .ok());
  return params;
}

batchd::v1::Plan MixPlan() {
  batchd::v1::Plan plan;
  plan.set_batch_size(4);
  plan.mutable_pipeline()->mutable_mix()->set_mixup_alpha(0.2f);
  plan.mutable_pipeline()->mutable_mix()->set_num_classes(10);
  return plan;
}

BatchInfo Batch() {
  BatchInfo batch;
  batch.batch_index = 7;
  batch.labels = {1, 2, 3, 9};
  batchd::v1::ErasedRegion region;
  region.set_position(2);
  region.set_top(3);
  region.set_left(4);
  region.set_height(5);
  region.set_width(6);
  region.set_noise(true);
  region.set_noise_key(99);
  batch.erased.push_back(region);
  batchd::v1::BatchMix mix;
  mix.set_kind(batchd::v1::BatchMix::KIND_CUTMIX);
  mix.set_lambda(0.75);
  mix.set_box_top(0);
  mix.set_box_left(0);
  mix.set_box_height(8);
  mix.set_box_width(6);
  mix.set_label_smoothing(0.1f);
  mix.set_num_classes(10);
  batch.mix = mix;
  return batch;
}

TEST(EraseMixBatchTest, HeaderFieldsBecomeTheCudaParameters) {
  cuda::EraseMix em;
  ASSERT_TRUE(ToEraseMix(Batch(), Params(), &em).ok());
  ASSERT_EQ(em.rects.size(), 4u);
  EXPECT_EQ(em.rects[0].height, 0u);
  EXPECT_EQ(em.rects[2].top, 3u);
  EXPECT_EQ(em.rects[2].width, 6u);
  EXPECT_EQ(em.rects[2].noise, 1u);
  EXPECT_EQ(em.rects[2].noise_key, 99u);
  EXPECT_EQ(em.mix.kind, cuda::MixKind::kCutmix);
  EXPECT_EQ(em.mix.lambda_self, 0.75f);
  EXPECT_EQ(em.mix.lambda_rolled, 0.25f);
  EXPECT_EQ(em.mix.box_height, 8u);
  std::vector<float> soft;
  ASSERT_TRUE(SoftLabelsOf(Batch(), em.mix, MixPlan(), &soft).ok());
  ASSERT_EQ(soft.size(), 40u);
  for (int row = 0; row < 4; ++row) {
    float total = 0;
    for (int k = 0; k < 10; ++k) total += soft[row * 10 + k];
    EXPECT_NEAR(total, 1.0f, 1e-6f);
  }
}

// What a daemon sends is checked before anything is allocated or written:
// rectangles and boxes outside the image, positions past the batch, a
// lambda outside [0, 1], and a mix or num_classes the plan did not ask for
// are INTERNAL, naming the batch.
TEST(EraseMixBatchTest, HostileHeadersAreRefused) {
  cuda::EraseMix em;
  BatchInfo outside = Batch();
  outside.erased[0].set_top(12);
  EXPECT_EQ(ToEraseMix(outside, Params(), &em).code(),
            absl::StatusCode::kInternal);
  BatchInfo position = Batch();
  position.erased[0].set_position(4);
  EXPECT_EQ(ToEraseMix(position, Params(), &em).code(),
            absl::StatusCode::kInternal);
  BatchInfo box = Batch();
  box.mix->set_box_width(13);
  EXPECT_EQ(ToEraseMix(box, Params(), &em).code(),
            absl::StatusCode::kInternal);
  BatchInfo lambda = Batch();
  lambda.mix->set_lambda(-0.5);
  absl::Status status = ToEraseMix(lambda, Params(), &em);
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_NE(status.message().find("batch 7"), absl::string_view::npos);
  std::vector<float> soft;
  BatchInfo classes = Batch();
  classes.mix->set_num_classes(1 << 20);
  EXPECT_EQ(SoftLabelsOf(classes, em.mix, MixPlan(), &soft).code(),
            absl::StatusCode::kInternal);
  EXPECT_TRUE(soft.empty());
  batchd::v1::Plan no_mix;
  no_mix.set_batch_size(4);
  EXPECT_EQ(SoftLabelsOf(Batch(), em.mix, no_mix, &soft).code(),
            absl::StatusCode::kInternal);
  BatchInfo label = Batch();
  label.labels[3] = 10;
  EXPECT_EQ(SoftLabelsOf(label, em.mix, MixPlan(), &soft).code(),
            absl::StatusCode::kInvalidArgument);
  // A uint8 output cannot hold erased or mixed values.
  cuda::NormalizeSpec spec;
  spec.dtype = cuda::DType::kUint8;
  cuda::NormalizeParams u8;
  ASSERT_TRUE(cuda::MakeNormalizeParams({4, 16, 12, 3}, cuda::Layout::kNHWC,
                                        spec, &u8)
                  .ok());
  EXPECT_EQ(ToEraseMix(Batch(), u8, &em).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace batchd::client
