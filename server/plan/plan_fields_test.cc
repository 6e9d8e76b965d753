// Plan.fields, missing_fields and label_field: defaults, and every bad
// plan refused with INVALID_ARGUMENT naming the field.
#include "server/plan/plan_fields.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace batchd::server {
namespace {

using ::testing::HasSubstr;

Dataset Files() {
  return Dataset("files", {{"a/x.jpg", 0}, {"b/y.jpg", 1}}, {"a", "b"});
}

absl::StatusOr<PlanFields> Resolve(const batchd::v1::Plan& plan,
                                   uint32_t batch_size = 32) {
  static const Dataset* dataset = new Dataset(Files());
  return ResolveFields(plan, *dataset, batch_size);
}

batchd::v1::Plan WithFields(std::initializer_list<const char*> names) {
  batchd::v1::Plan plan;
  for (const char* name : names) plan.add_fields()->set_name(name);
  return plan;
}

void ExpectInvalid(const absl::StatusOr<PlanFields>& got,
                   const std::string& names) {
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(got.status().message()), HasSubstr(names));
}

TEST(PlanFieldsTest, DefaultsPerField) {
  absl::StatusOr<PlanFields> got =
      Resolve(WithFields({"txt", "json", "__key__", "seg.png"}),
              /*batch_size=*/8);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->fields.size(), 4u);
  EXPECT_EQ(got->fields[0].max_bytes, kDefaultTxtBytes);
  EXPECT_EQ(got->fields[1].max_bytes, kDefaultJsonBytes);
  EXPECT_EQ(got->fields[2].max_bytes, kDefaultKeyBytes);
  EXPECT_TRUE(got->fields[2].key);
  EXPECT_EQ(got->fields[3].max_bytes, kDefaultOtherFieldBytes);
  // A file dataset has no members: every field but __key__ is missing.
  EXPECT_EQ(got->fields[0].extension, -1);
  EXPECT_EQ(got->label_source, LabelSource::kDataset);
  EXPECT_EQ(Resolve(batchd::v1::Plan())->Fingerprint(), "");
}

TEST(PlanFieldsTest, RefusesBadNames) {
  ExpectInvalid(Resolve(WithFields({"txt", "TXT"})), "fields[1] 'TXT'");
  ExpectInvalid(Resolve(WithFields({""})), "fields[0] ''");
  ExpectInvalid(Resolve(WithFields({"a b"})), "fields[0] 'a b'");
  ExpectInvalid(Resolve(WithFields({".txt"})), "fields[0] '.txt'");
  ExpectInvalid(Resolve(WithFields({"txt", "json", "txt"})),
                "fields[2] 'txt' is named twice");
}

TEST(PlanFieldsTest, RefusesTooManyFields) {
  ExpectInvalid(Resolve(WithFields({"a", "b", "c", "d", "e", "f", "g", "h",
                                    "i"})),
                "at most 8");
}

TEST(PlanFieldsTest, RefusesBoundsAboveTheMaximum) {
  batchd::v1::Plan plan = WithFields({"txt", "json"});
  plan.mutable_fields(1)->set_max_bytes(kMaxFieldBytes + 1);
  ExpectInvalid(Resolve(plan), "fields[1] 'json': max_bytes is 1048577");
  plan.mutable_fields(1)->set_max_bytes(kMaxFieldBytes);
  ExpectInvalid(Resolve(plan, /*batch_size=*/32), "lower the fields' max_bytes");
  EXPECT_TRUE(Resolve(plan, /*batch_size=*/1).ok());
  // 0 is the default, not a bound of 0 bytes.
  plan.mutable_fields(1)->set_max_bytes(0);
  EXPECT_EQ(Resolve(plan)->fields[1].max_bytes, kDefaultJsonBytes);
}

TEST(PlanFieldsTest, LabelSources) {
  batchd::v1::Plan plan;
  plan.set_label_field("json:label");
  absl::StatusOr<PlanFields> json = Resolve(plan);
  ASSERT_TRUE(json.ok());
  EXPECT_EQ(json->label_source, LabelSource::kJson);
  EXPECT_EQ(json->label_json_key, "label");
  plan.set_label_field("none");
  EXPECT_EQ(Resolve(plan)->label_source, LabelSource::kNone);
  plan.set_label_field("cls");
  EXPECT_EQ(Resolve(plan)->label_source, LabelSource::kDataset);
  plan.set_label_field("json:");
  ExpectInvalid(Resolve(plan), "label_field 'json:'");
  plan.set_label_field("txt");
  ExpectInvalid(Resolve(plan), "label_field 'txt'");
}

TEST(PlanFieldsTest, RefusesAnUnknownMissingPolicy) {
  batchd::v1::Plan plan = WithFields({"txt"});
  plan.set_missing_fields(static_cast<batchd::v1::MissingFieldPolicy>(7));
  ExpectInvalid(Resolve(plan), "missing_fields 7");
}

}  // namespace
}  // namespace batchd::server
