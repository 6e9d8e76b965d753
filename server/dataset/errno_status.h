// The absl::Status for a failed system call, with the code a caller should
// act on: NOT_FOUND (ENOENT, ENOTDIR), PERMISSION_DENIED (EACCES, EPERM),
// UNAVAILABLE (anything else, e.g. EIO). Thread-safe.
#ifndef BATCHD_SERVER_DATASET_ERRNO_STATUS_H_
#define BATCHD_SERVER_DATASET_ERRNO_STATUS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace batchd::server {

// strerror_r's text for `error`.
std::string ErrnoText(int error);

// "<message>: <errno text>" with the code for `error`.
absl::Status ErrnoStatus(int error, absl::string_view message);

}  // namespace batchd::server

#endif  // BATCHD_SERVER_DATASET_ERRNO_STATUS_H_
