#include "common/file_io.h"

#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "common/errno_status.h"
#include "common/status_macros.h"

namespace batchd::common {
namespace {

// Calls `io` (pread or pwrite) until `length` bytes of `bytes` have moved or
// a call moves none (a read at the end of the file), retrying EINTR.
// Returns how many moved.
template <typename Io, typename Byte>
absl::StatusOr<size_t> Transfer(Io io, int fd, uint64_t offset, size_t length,
                                Byte* bytes,
                                absl::FunctionRef<std::string()> what) {
  size_t done = 0;
  while (done < length) {
    const ssize_t n =
        io(fd, bytes + done, length - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      const int error = errno;  // what() may change errno
      return ErrnoStatus(error, what());
    }
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  return done;
}

}  // namespace

absl::StatusOr<size_t> ReadFileRange(int fd, uint64_t offset, size_t length,
                                     void* out,
                                     absl::FunctionRef<std::string()> what) {
  return Transfer(::pread, fd, offset, length, static_cast<char*>(out), what);
}

absl::Status WriteFileRange(int fd, uint64_t offset, const void* data,
                            size_t length,
                            absl::FunctionRef<std::string()> what) {
  ASSIGN_OR_RETURN(const size_t done,
                   Transfer(::pwrite, fd, offset, length,
                            static_cast<const char*>(data), what));
  if (done < length) {
    return absl::UnavailableError(
        absl::StrCat(what(), ": wrote ", done, " of ", length, " bytes"));
  }
  return absl::OkStatus();
}

}  // namespace batchd::common
