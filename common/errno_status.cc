#include "common/errno_status.h"

#include <cerrno>

#include "absl/strings/str_cat.h"

namespace batchd::common {

absl::Status ErrnoStatus(int errno_value, absl::string_view what) {
  absl::StatusCode code = absl::ErrnoToStatusCode(errno_value);
  if (errno_value == ENOTDIR) {
    code = absl::StatusCode::kNotFound;
  } else if (code == absl::StatusCode::kUnknown ||
             code == absl::StatusCode::kOk) {
    code = absl::StatusCode::kUnavailable;
  }
  return absl::Status(code, ErrnoMessage(errno_value, what));
}

std::string ErrnoMessage(int errno_value, absl::string_view what) {
  // ErrnoToStatus(0, ...) is OK, which keeps no message.
  if (errno_value == 0) return absl::StrCat(what, ": errno not set");
  return std::string(absl::ErrnoToStatus(errno_value, what).message());
}

}  // namespace batchd::common
