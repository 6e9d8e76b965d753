#include "server/service/parse_request.h"

#include <string>

#include "batchd/v1/admin.pb.h"
#include "batchd/v1/data.pb.h"
#include "gmock/gmock.h"
#include "google/protobuf/stubs/logging.h"
#include "gtest/gtest.h"
#include "testing/status_matchers.h"

namespace batchd::server {
namespace {

using ::batchd::testing::StatusIs;
using ::testing::HasSubstr;

grpc::ByteBuffer Buffer(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

// Fails the test if libprotobuf logs anything while alive.
class NoProtobufLog {
 public:
  NoProtobufLog() : previous_(google::protobuf::SetLogHandler(&Fail)) {}
  ~NoProtobufLog() { google::protobuf::SetLogHandler(previous_); }

 private:
  static void Fail(google::protobuf::LogLevel /*level*/, const char* file,
                   int line, const std::string& message) {
    ADD_FAILURE() << "libprotobuf logged " << file << ":" << line << " "
                  << message;
  }
  google::protobuf::LogHandler* previous_;
};

std::string OpenBytes(const std::string& job) {
  v1::StreamRequest request;
  request.mutable_open()->mutable_plan()->set_dataset("d");
  request.mutable_open()->mutable_plan()->set_job(job);
  return request.SerializeAsString();
}

TEST(ParseRequestTest, ParsesAGoodRequest) {
  v1::StreamRequest request;
  request.mutable_request()->set_epoch(3);  // cleared by the parse
  ASSERT_OK(ParseRequest(Buffer(OpenBytes("job-1")), &request));
  EXPECT_EQ(request.open().plan().job(), "job-1");
  EXPECT_FALSE(request.has_request());
}

TEST(ParseRequestTest, NamesAStringThatIsNotUtf8WithoutAProtobufLogLine) {
  std::string bytes = OpenBytes("evil");
  bytes[bytes.find("evil") + 3] = '\xff';
  NoProtobufLog quiet;
  v1::StreamRequest request;
  EXPECT_THAT(
      ParseRequest(Buffer(bytes), &request),
      StatusIs(absl::StatusCode::kInvalidArgument,
               "open.plan.job is not valid UTF-8 (byte 0xff at offset 3)"));
}

TEST(ParseRequestTest, NamesTheTypeOfABodyThatDoesNotParse) {
  NoProtobufLog quiet;
  v1::SetWorkersRequest request;
  EXPECT_THAT(
      ParseRequest(Buffer(std::string("\x08\xff\xff", 3)), &request),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("the request is not a batchd.v1.SetWorkersRequest")));
}

}  // namespace
}  // namespace batchd::server
