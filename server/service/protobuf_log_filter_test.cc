#include "server/service/protobuf_log_filter.h"

#include <string>

#include "batchd/v1/data.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace batchd::server {
namespace {

using ::testing::HasSubstr;

size_t Count(const std::string& text, const std::string& needle) {
  size_t n = 0, at = 0;
  while ((at = text.find(needle, at)) != std::string::npos) {
    ++n;
    at += needle.size();
  }
  return n;
}

// Every line libprotobuf logs goes through the filter; a flood of them
// (here: serializing a class name that is not UTF-8, as ListDatasets would
// for a class directory with such a name) writes a few.
TEST(ProtobufLogFilterTest, WritesAFewLinesOfAFlood) {
  InstallProtobufLogFilter();
  v1::DatasetInfo info;
  info.set_name("d");
  info.add_class_names("caf\xe9");  // Latin-1
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 200; ++i) {
    EXPECT_FALSE(info.SerializeAsString().empty());
  }
  // Parsing one also logs, through the same limit.
  v1::DatasetInfo parsed;
  EXPECT_FALSE(parsed.ParseFromString(info.SerializeAsString()));
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(Count(log, "\n"), static_cast<size_t>(kProtobufLogBurst)) << log;
  EXPECT_EQ(Count(log, "[libprotobuf ERROR "),
            static_cast<size_t>(kProtobufLogBurst));
  EXPECT_THAT(log, HasSubstr("batchd.v1.DatasetInfo.class_names"));
}

}  // namespace
}  // namespace batchd::server
