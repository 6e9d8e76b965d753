#include "common/utf8_fields.h"

#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "batchd/v1/data.pb.h"
#include "gmock/gmock.h"
#include "google/protobuf/stubs/logging.h"
#include "gtest/gtest.h"
#include "testing/status_matchers.h"

namespace batchd::common {
namespace {

using ::batchd::testing::StatusIs;
using ::testing::HasSubstr;

// Discards libprotobuf's log lines while alive: serializing a string that
// is not UTF-8, as these tests do on purpose, logs one.
class QuietProtobuf {
 public:
  QuietProtobuf() : previous_(google::protobuf::SetLogHandler(nullptr)) {}
  ~QuietProtobuf() { google::protobuf::SetLogHandler(previous_); }

 private:
  google::protobuf::LogHandler* previous_;
};

std::string OpenWithJob(const std::string& job) {
  QuietProtobuf quiet;
  v1::StreamRequest request;
  request.mutable_open()->mutable_plan()->set_dataset("d");
  request.mutable_open()->mutable_plan()->set_batch_size(8);
  request.mutable_open()->mutable_plan()->set_job(job);
  request.mutable_open()->set_window(2);
  return request.SerializeAsString();
}

TEST(ValidUtf8PrefixTest, FindsTheFirstByteOutsideAWellFormedCharacter) {
  struct Case {
    std::string text;
    size_t valid;
  };
  const std::vector<Case> cases = {
      {"", 0},
      {"job-1", 5},
      {"caf\xc3\xa9", 5},                // U+00E9
      {"\xe2\x82\xac", 3},               // U+20AC
      {"\xf0\x9f\x98\x80!", 5},          // U+1F600
      {"\xf4\x8f\xbf\xbf", 4},           // U+10FFFF
      {"\xed\x9f\xbf", 3},               // U+D7FF, below the surrogates
      {std::string("a\0b", 3), 3},       // NUL is UTF-8
      {"evi\xff", 3},
      {"a\x80", 1},                      // a lone continuation byte
      {"ab\xc3", 2},                     // cut short
      {"\xe2\x82", 0},                   // cut short
      {"\xc3(", 0},                      // second byte not a continuation
      {"\xc0\x80", 0},                   // overlong NUL
      {"\xc1\xbf", 0},                   // overlong
      {"\xe0\x80\xaf", 0},               // overlong
      {"\xf0\x8f\xbf\xbf", 0},           // overlong
      {"x\xed\xa0\x80", 1},              // a surrogate (U+D800)
      {"\xf4\x90\x80\x80", 0},           // above U+10FFFF
      {"\xf5\x80\x80\x80", 0},
      {"\xe2\x82\xac\xe2\x28\xa1", 3},   // the third byte never checked
  };
  for (const Case& c : cases) {
    EXPECT_EQ(ValidUtf8Prefix(c.text), c.valid) << absl::CEscape(c.text);
  }
}

// What CheckUtf8Fields refuses is exactly what protobuf's parse refuses.
TEST(CheckUtf8FieldsTest, AgreesWithProtobufsParse) {
  for (const std::string job :
       {"job-1", "caf\xc3\xa9", "\xf0\x9f\x98\x80", "evi\xff", "a\x80",
        "ab\xc3", "\xc0\x80", "\xe0\x80\xaf", "x\xed\xa0\x80",
        "\xf4\x90\x80\x80", "\xef\xbf\xbf"}) {
    const std::string bytes = OpenWithJob(job);
    QuietProtobuf quiet;
    v1::StreamRequest parsed;
    EXPECT_EQ(
        CheckUtf8Fields(bytes, *v1::StreamRequest::descriptor()).ok(),
        parsed.ParseFromString(bytes))
        << absl::CEscape(job);
  }
}

TEST(CheckUtf8FieldsTest, NamesTheFieldTheByteAndItsOffset) {
  EXPECT_THAT(
      CheckUtf8Fields(OpenWithJob("evi\xff"),
                      *v1::StreamRequest::descriptor()),
      StatusIs(absl::StatusCode::kInvalidArgument,
               "open.plan.job is not valid UTF-8 (byte 0xff at offset 3)"));
  EXPECT_OK(CheckUtf8Fields(OpenWithJob("job-1"),
                            *v1::StreamRequest::descriptor()));
  // From the Plan itself.
  v1::Plan plan;
  plan.set_dataset("\xc3(");
  std::string bytes;
  {
    QuietProtobuf quiet;
    bytes = plan.SerializeAsString();
  }
  EXPECT_THAT(
      CheckUtf8Fields(bytes, *v1::Plan::descriptor()),
      StatusIs(absl::StatusCode::kInvalidArgument,
               "dataset is not valid UTF-8 (byte 0xc3 at offset 0)"));
}

TEST(CheckUtf8FieldsTest, CountsTheElementsOfRepeatedFields) {
  v1::ListDatasetsResponse list;
  list.add_datasets()->set_name("a");
  v1::DatasetInfo* second = list.add_datasets();
  second->set_name("b");
  second->add_class_names("cat");
  second->add_class_names("dog");
  second->add_class_names("\x80");
  std::string bytes;
  {
    QuietProtobuf quiet;
    bytes = list.SerializeAsString();
  }
  EXPECT_THAT(CheckUtf8Fields(bytes, *v1::ListDatasetsResponse::descriptor()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("datasets[1].class_names[2] is not valid "
                                 "UTF-8 (byte 0x80 at offset 0)")));
}

TEST(CheckUtf8FieldsTest, LeavesMalformedBytesAndUnknownFieldsToTheParser) {
  const google::protobuf::Descriptor& type = *v1::StreamRequest::descriptor();
  const std::string good = OpenWithJob("job-1");
  // Cut short: not a message, whatever its strings.
  EXPECT_OK(CheckUtf8Fields(good.substr(0, good.size() - 2), type));
  EXPECT_OK(CheckUtf8Fields(std::string("\x08\xff\xff", 3), type));
  // An unknown field number (15) with bytes that are not UTF-8: protobuf
  // keeps it as an unknown field and parses the message.
  const std::string unknown = "\x7a\x01\xff";
  EXPECT_OK(CheckUtf8Fields(unknown, type));
  v1::StreamRequest parsed;
  EXPECT_TRUE(parsed.ParseFromString(unknown));
  // The job's number with another wire type (a varint) is not a string.
  EXPECT_OK(CheckUtf8Fields(std::string("\x48\x7f", 2),
                            *v1::Plan::descriptor()));
}

}  // namespace
}  // namespace batchd::common
