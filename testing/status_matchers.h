// gMock matchers and assertions for absl::Status / absl::StatusOr, which
// this Abseil lacks.
//
//   EXPECT_OK(DoThing());
//   ASSERT_OK_AND_ASSIGN(std::string dir, MakeDataset(8, 2, 1));
//   EXPECT_THAT(Parse(""), StatusIs(absl::StatusCode::kInvalidArgument,
//                                   HasSubstr("empty")));
#ifndef BATCHD_TESTING_STATUS_MATCHERS_H_
#define BATCHD_TESTING_STATUS_MATCHERS_H_

#include <ostream>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/status_macros.h"
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

// Evaluates `expr` (an absl::StatusOr<T>), fails the test fatally with its
// status unless it is OK, and moves its value into `lhs` (a declaration or
// an assignable expression).
#define ASSERT_OK_AND_ASSIGN(lhs, expr)                                    \
  BATCHD_ASSERT_OK_AND_ASSIGN_IMPL_(                                       \
      BATCHD_CONCAT_(batchd_statusor_, __LINE__), lhs, expr)
#define BATCHD_ASSERT_OK_AND_ASSIGN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                      \
  ASSERT_TRUE(statusor.ok()) << statusor.status();             \
  lhs = std::move(statusor).value()

#endif  // BATCHD_TESTING_STATUS_MATCHERS_H_
