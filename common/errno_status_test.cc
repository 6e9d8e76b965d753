#include "common/errno_status.h"

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/status_matchers.h"

namespace batchd::common {
namespace {

using ::batchd::testing::StatusIs;

TEST(ErrnoStatusTest, MessageIsWhatThenTheErrnoText) {
  EXPECT_THAT(ErrnoStatus(ENOENT, "open 'a.jpg'"),
              StatusIs(absl::StatusCode::kNotFound,
                       absl::StrCat("open 'a.jpg': ", std::strerror(ENOENT))));
  EXPECT_EQ(ErrnoMessage(EACCES, "read 'b'"),
            absl::StrCat("read 'b': ", std::strerror(EACCES)));
}

TEST(ErrnoStatusTest, CodeSaysWhatTheCallerShouldDo) {
  EXPECT_EQ(ErrnoStatus(ENOENT, "x").code(), absl::StatusCode::kNotFound);
  // A path component that is not a directory: the file is not there.
  EXPECT_EQ(ErrnoStatus(ENOTDIR, "x").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ErrnoStatus(EACCES, "x").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(ErrnoStatus(EPERM, "x").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(ErrnoStatus(ENOSPC, "x").code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ErrnoStatus(EDQUOT, "x").code(),
            absl::StatusCode::kResourceExhausted);
  // What Abseil leaves UNKNOWN (an I/O error) is worth trying again.
  EXPECT_EQ(ErrnoStatus(EIO, "x").code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(ErrnoStatus(EAGAIN, "x").code(), absl::StatusCode::kUnavailable);
}

TEST(ErrnoStatusTest, NeverOk) {
  EXPECT_THAT(ErrnoStatus(0, "close 'c'"),
              StatusIs(absl::StatusCode::kUnavailable,
                       ::testing::HasSubstr("close 'c'")));
}

}  // namespace
}  // namespace batchd::common
