// The absl::Status of a failed system call: "<what>: <strerror text>", with
// the code a caller should act on (absl::ErrnoToStatus's, see below).
//
//   if (::fstat(fd, &st) != 0) {
//     return ErrnoStatus(errno, absl::StrCat("fstat '", path, "'"));
//   }
//
// Thread-safe (the text comes from strerror_r).
#ifndef BATCHD_COMMON_ERRNO_STATUS_H_
#define BATCHD_COMMON_ERRNO_STATUS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace batchd::common {

// "<what>: <strerror text>" with absl::ErrnoToStatusCode's code for
// `errno_value` (ENOENT NOT_FOUND, EACCES and EPERM PERMISSION_DENIED,
// ENOSPC and EDQUOT RESOURCE_EXHAUSTED, ...), except that ENOTDIR (a path
// component is not a directory) is NOT_FOUND, and an error Abseil calls
// UNKNOWN (EIO, ELOOP, ...) is UNAVAILABLE: worth trying again. Never OK,
// even for 0 (a call that failed without setting errno).
absl::Status ErrnoStatus(int errno_value, absl::string_view what);

// ErrnoStatus's message, for a caller that picks the code itself.
std::string ErrnoMessage(int errno_value, absl::string_view what);

}  // namespace batchd::common

#endif  // BATCHD_COMMON_ERRNO_STATUS_H_
