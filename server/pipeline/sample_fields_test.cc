// The fields beside the image: the UTF-8 cut, missing members, __key__,
// json labels, over an img2dataset-style shard (jpg + txt + json per key,
// no cls).
#include "server/pipeline/sample_fields.h"

#include <stdlib.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/dataset/dataset.h"
#include "testing/tar_builder.h"

namespace batchd::server {
namespace {

using ::testing::ElementsAre;

TEST(FieldCutLengthTest, KeepsAMemberThatFits) {
  EXPECT_EQ(FieldCutLength("hello", 5, 5), 5u);
  EXPECT_EQ(FieldCutLength("", 0, 4), 0u);
}

TEST(FieldCutLengthTest, CutsAtTheLastCharacterBoundary) {
  // "日本" is 6 bytes (3 + 3); a bound of 4 keeps the first character.
  const std::string cjk = "\xE6\x97\xA5\xE6\x9C\xAC";
  EXPECT_EQ(FieldCutLength(cjk.substr(0, 4), 6, 4), 3u);
  EXPECT_EQ(FieldCutLength(cjk.substr(0, 5), 6, 5), 3u);
  EXPECT_EQ(FieldCutLength(cjk.substr(0, 3), 6, 3), 3u);
  // An emoji (4 bytes) after "ab": bounds 3..5 keep "ab", 6 keeps all.
  const std::string emoji = "ab\xF0\x9F\x98\x80";
  for (size_t bound = 3; bound <= 5; ++bound) {
    EXPECT_EQ(FieldCutLength(emoji.substr(0, bound), 6 + 1, bound), 2u)
        << bound;
  }
  EXPECT_EQ(FieldCutLength("abcdef", 10, 4), 4u);
}

TEST(FieldCutLengthTest, CutsBytesThatAreNotUtf8AtTheBound) {
  const std::string binary("\xFF\xFE\x00\x01\x02", 5);
  EXPECT_EQ(FieldCutLength(binary.substr(0, 3), 5, 3), 3u);
  // A lead byte followed by a non-continuation is not a cut character.
  EXPECT_EQ(FieldCutLength("a\xE6" "b", 8, 3), 3u);
}

TEST(JsonLabelTest, ReadsAnIntegerAtATopLevelKey) {
  EXPECT_EQ(JsonLabel(R"({"label": 7, "caption": "x"})", "label"), 7);
  EXPECT_EQ(JsonLabel(R"({"label": 7.5})", "label"), -1);
  EXPECT_EQ(JsonLabel(R"({"label": "7"})", "label"), -1);
  EXPECT_EQ(JsonLabel(R"({"other": 7})", "label"), -1);
  EXPECT_EQ(JsonLabel(R"({"label": 1e12})", "label"), -1);
  EXPECT_EQ(JsonLabel("{\"label\": 3", "label"), -1);  // cut json
  EXPECT_EQ(JsonLabel("[1, 2]", "label"), -1);
}

class SampleFieldsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* base = getenv("TEST_TMPDIR");
    std::string pattern =
        absl::StrCat(base != nullptr ? base : "/tmp", "/fields_XXXXXX");
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    TarBuilder tar;
    // k0: Latin caption and a labelled json; k1: no txt; k2: a CJK caption
    // of 9 bytes; k3: an emoji caption.
    tar.AddFile("k0.jpg", "image0");
    tar.AddFile("k0.txt", "a red bicycle");
    tar.AddFile("k0.json", R"({"label": 4})");
    tar.AddFile("k1.jpg", "image1");
    tar.AddFile("k1.json", R"({"label": 2})");
    tar.AddFile("k2.jpg", "image2");
    tar.AddFile("k2.txt", "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E");
    tar.AddFile("dir/k3.jpg", "image3");
    tar.AddFile("dir/k3.json",
                absl::StrCat(R"({"label": 1, "pad": ")",
                             std::string(kMaxLabelJsonBytes, 'p'), "\"}"));
    tar.AddFile("dir/k3.txt", "ok! \xF0\x9F\x98\x80");
    tar.Finish();
    WriteFileForTest(pattern + "/shard-0.tar", tar.bytes());
    batchd::v1::DatasetConfig config;
    config.set_name("d");
    config.set_path(pattern + "/shard-0.tar");
    absl::StatusOr<std::shared_ptr<const Dataset>> dataset =
        LoadDataset(config);
    ASSERT_TRUE(dataset.ok()) << dataset.status();
    datasets_["d"] = *dataset;
  }

  std::shared_ptr<const ResolvedPlan> Resolve(batchd::v1::Plan plan) {
    plan.set_dataset("d");
    plan.set_batch_size(4);
    plan.mutable_pipeline()->mutable_eval()->set_size(8);
    absl::StatusOr<std::shared_ptr<const ResolvedPlan>> resolved =
        ResolvePlan(plan, datasets_, PlanLimits{});
    EXPECT_TRUE(resolved.ok()) << resolved.status();
    return resolved.ok() ? *resolved : nullptr;
  }

  DatasetMap datasets_;
};

TEST_F(SampleFieldsTest, KeysWithoutClassMakeAnUnlabelledDataset) {
  const Dataset& dataset = *datasets_["d"];
  ASSERT_EQ(dataset.size(), 4u);
  EXPECT_FALSE(dataset.labelled());
  EXPECT_EQ(dataset.sample(0).label, -1);
  EXPECT_EQ(dataset.index_stats().skipped_samples, 0u);
  EXPECT_EQ(dataset.Key(3), "dir/k3");
}

TEST_F(SampleFieldsTest, ReadsCutsAndMarksMissingFields) {
  batchd::v1::Plan plan;
  auto* txt = plan.add_fields();
  txt->set_name("txt");
  txt->set_max_bytes(7);
  plan.add_fields()->set_name("__key__");
  std::shared_ptr<const ResolvedPlan> resolved = Resolve(plan);
  ASSERT_NE(resolved, nullptr);

  absl::StatusOr<SampleFields> k0 = ReadSampleFields(*resolved, 0);
  ASSERT_TRUE(k0.ok()) << k0.status();
  EXPECT_THAT(k0->values, ElementsAre("a red b", "k0"));
  EXPECT_THAT(k0->cut, ElementsAre(true, false));
  EXPECT_THAT(k0->missing, ElementsAre(false, false));

  absl::StatusOr<SampleFields> k1 = ReadSampleFields(*resolved, 1);
  ASSERT_TRUE(k1.ok());
  EXPECT_THAT(k1->values, ElementsAre("", "k1"));
  EXPECT_THAT(k1->missing, ElementsAre(true, false));
  EXPECT_FALSE(HasAllFields(*resolved, 1));
  EXPECT_TRUE(HasAllFields(*resolved, 0));

  // 9 bytes of CJK under a bound of 7: two whole characters.
  absl::StatusOr<SampleFields> k2 = ReadSampleFields(*resolved, 2);
  ASSERT_TRUE(k2.ok());
  EXPECT_EQ(k2->values[0], "\xE6\x97\xA5\xE6\x9C\xAC");
  EXPECT_TRUE(k2->cut[0]);
  // "ok! " + a 4-byte emoji under 7: the emoji is left out whole.
  absl::StatusOr<SampleFields> k3 = ReadSampleFields(*resolved, 3);
  ASSERT_TRUE(k3.ok());
  EXPECT_EQ(k3->values[0], "ok! ");
  EXPECT_TRUE(k3->cut[0]);
  EXPECT_EQ(k3->values[1], "dir/k3");
}

TEST_F(SampleFieldsTest, LabelsFromJsonOrNone) {
  batchd::v1::Plan plan;
  plan.set_label_field("json:label");
  std::shared_ptr<const ResolvedPlan> json = Resolve(plan);
  ASSERT_NE(json, nullptr);
  EXPECT_EQ(*SampleLabel(*json, 0), 4);
  EXPECT_EQ(*SampleLabel(*json, 1), 2);
  EXPECT_EQ(*SampleLabel(*json, 2), -1);  // no json member
  EXPECT_EQ(*SampleLabel(*json, 3), -1);  // json past kMaxLabelJsonBytes
  plan.set_label_field("none");
  std::shared_ptr<const ResolvedPlan> none = Resolve(plan);
  ASSERT_NE(none, nullptr);
  EXPECT_EQ(*SampleLabel(*none, 0), -1);
}

TEST_F(SampleFieldsTest, FieldsDecideTheFingerprint) {
  batchd::v1::Plan plain;
  batchd::v1::Plan txt;
  txt.add_fields()->set_name("txt");
  batchd::v1::Plan txt_again = txt;
  batchd::v1::Plan txt_short = txt;
  txt_short.mutable_fields(0)->set_max_bytes(100);
  batchd::v1::Plan substitute = txt;
  substitute.set_missing_fields(batchd::v1::MISSING_FIELD_SUBSTITUTE);
  const std::string a = Resolve(plain)->fingerprint;
  const std::string b = Resolve(txt)->fingerprint;
  EXPECT_NE(a, b);
  EXPECT_EQ(b, Resolve(txt_again)->fingerprint);
  EXPECT_NE(b, Resolve(txt_short)->fingerprint);
  EXPECT_NE(b, Resolve(substitute)->fingerprint);
}

}  // namespace
}  // namespace batchd::server
