// Reads a small text file (a token, a certificate, a key) whole.
//
//   ASSIGN_OR_RETURN(std::string pem, ReadTextFile("/etc/batchd/ca.pem"));
//
// Thread-safe.
#ifndef BATCHD_COMMON_TEXT_FILE_H_
#define BATCHD_COMMON_TEXT_FILE_H_

#include <string>

#include "absl/status/statusor.h"

namespace batchd::common {

// The contents of `path`; NOT_FOUND "cannot read PATH: <errno text>" when it
// cannot be opened.
absl::StatusOr<std::string> ReadTextFile(const std::string& path);

}  // namespace batchd::common

#endif  // BATCHD_COMMON_TEXT_FILE_H_
