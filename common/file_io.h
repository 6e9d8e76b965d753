// The read and write loops around pread/pwrite: retried on EINTR and on
// short transfers, failures as ErrnoStatus (common/errno_status.h).
//
//   absl::StatusOr<size_t> got =
//       ReadFileRange(fd, offset, size, buffer,
//                     [&] { return absl::StrCat("read '", path, "'"); });
//
// `what` names the operation in an error's message ("<what>: <strerror>"),
// and is called only on failure, so that a read on the sample path formats
// nothing. Thread-safe: neither moves the descriptor's file offset.
#ifndef BATCHD_COMMON_FILE_IO_H_
#define BATCHD_COMMON_FILE_IO_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace batchd::common {

// Reads `length` bytes at `offset` of `fd` into `out`. Returns how many were
// read: fewer than `length` only where the file ends.
absl::StatusOr<size_t> ReadFileRange(int fd, uint64_t offset, size_t length,
                                     void* out,
                                     absl::FunctionRef<std::string()> what);

// Writes all `length` bytes of `data` at `offset` of `fd` (UNAVAILABLE if a
// write makes no progress).
absl::Status WriteFileRange(int fd, uint64_t offset, const void* data,
                            size_t length,
                            absl::FunctionRef<std::string()> what);

}  // namespace batchd::common

#endif  // BATCHD_COMMON_FILE_IO_H_
