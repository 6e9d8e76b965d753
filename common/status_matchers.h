// gMock matchers for absl::Status / absl::StatusOr, which this Abseil lacks.
//
//   EXPECT_OK(DoThing());
//   EXPECT_THAT(Parse(""), StatusIs(absl::StatusCode::kInvalidArgument,
//                                   HasSubstr("empty")));
#ifndef BATCHD_COMMON_STATUS_MATCHERS_H_
#define BATCHD_COMMON_STATUS_MATCHERS_H_

#include <ostream>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace batchd::testing {

inline const absl::Status& GetStatus(const absl::Status& status) { return status; }
template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& status_or) {
  return status_or.status();
}

MATCHER_P2(StatusIs, code, message_matcher,
           "has code " + absl::StatusCodeToString(code)) {
  const absl::Status& status = ::batchd::testing::GetStatus(arg);
  if (status.code() != code) {
    *result_listener << "whose status is " << status.ToString();
    return false;
  }
  return ::testing::ExplainMatchResult(message_matcher,
                                       std::string(status.message()),
                                       result_listener);
}

}  // namespace batchd::testing

#define EXPECT_OK(expr)                                                \
  do {                                                                 \
    /* A copy: `expr` may be a temporary StatusOr that dies here. */   \
    const absl::Status batchd_s_ = ::batchd::testing::GetStatus((expr)); \
    EXPECT_TRUE(batchd_s_.ok()) << batchd_s_.ToString();               \
  } while (false)
#define ASSERT_OK(expr)                                                \
  do {                                                                 \
    /* A copy: `expr` may be a temporary StatusOr that dies here. */   \
    const absl::Status batchd_s_ = ::batchd::testing::GetStatus((expr)); \
    ASSERT_TRUE(batchd_s_.ok()) << batchd_s_.ToString();               \
  } while (false)

#endif  // BATCHD_COMMON_STATUS_MATCHERS_H_
