#include "common/file_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/status_matchers.h"

namespace batchd::common {
namespace {

using ::batchd::testing::StatusIs;
using ::testing::HasSubstr;

std::string What() { return "the file"; }

// A temporary file, removed at the end.
class FileIoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* dir = std::getenv("TEST_TMPDIR");
    path_ = std::string(dir != nullptr ? dir : "/tmp") + "/file_io_XXXXXX";
    fd_ = mkstemp(path_.data());
    ASSERT_GE(fd_, 0);
  }
  void TearDown() override {
    ::close(fd_);
    ::unlink(path_.c_str());
  }
  std::string path_;
  int fd_ = -1;
};

TEST_F(FileIoTest, WritesThenReadsARange) {
  const std::string text = "hello, range";
  ASSERT_OK(WriteFileRange(fd_, /*offset=*/0, text.data(), text.size(), What));
  ASSERT_OK(WriteFileRange(fd_, /*offset=*/7, "world", 5, What));
  std::string got(5, '\0');
  ASSERT_OK_AND_ASSIGN(const size_t n,
                       ReadFileRange(fd_, /*offset=*/7, 5, got.data(), What));
  EXPECT_EQ(n, 5u);
  EXPECT_EQ(got, "world");
}

TEST_F(FileIoTest, ReadStopsAtTheEndOfTheFile) {
  ASSERT_OK(WriteFileRange(fd_, /*offset=*/0, "abcdef", 6, What));
  std::string got(10, '\0');
  ASSERT_OK_AND_ASSIGN(const size_t n,
                       ReadFileRange(fd_, /*offset=*/4, 10, got.data(), What));
  EXPECT_EQ(n, 2u);
  EXPECT_EQ(got.substr(0, n), "ef");
  ASSERT_OK_AND_ASSIGN(const size_t none,
                       ReadFileRange(fd_, /*offset=*/6, 10, got.data(), What));
  EXPECT_EQ(none, 0u);
}

TEST_F(FileIoTest, FailuresNameTheOperation) {
  char byte;
  const int write_only = ::open(path_.c_str(), O_WRONLY | O_CLOEXEC);
  ASSERT_GE(write_only, 0);
  // EBADF: not open for reading.
  EXPECT_THAT(
      ReadFileRange(write_only, 0, 1, &byte, What),
      StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("the file: ")));
  ::close(write_only);
  const int read_only = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(read_only, 0);
  EXPECT_THAT(
      WriteFileRange(read_only, 0, "x", 1, What),
      StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("the file: ")));
  ::close(read_only);
}

}  // namespace
}  // namespace batchd::common
