#include "common/file_io.h"

#include <unistd.h>

#include <cerrno>

#include "common/errno_status.h"

namespace batchd::common {

absl::StatusOr<size_t> ReadFileRange(int fd, uint64_t offset, size_t length,
                                     void* out,
                                     absl::FunctionRef<std::string()> what) {
  char* const bytes = static_cast<char*>(out);
  size_t done = 0;
  while (done < length) {
    const ssize_t n = ::pread(fd, bytes + done, length - done,
                              static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      const int error = errno;
      return ErrnoStatus(error, what());
    }
    if (n == 0) break;  // the end of the file
    done += static_cast<size_t>(n);
  }
  return done;
}

absl::Status WriteFileRange(int fd, uint64_t offset, const void* data,
                            size_t length,
                            absl::FunctionRef<std::string()> what) {
  const char* const bytes = static_cast<const char*>(data);
  size_t done = 0;
  while (done < length) {
    const ssize_t n = ::pwrite(fd, bytes + done, length - done,
                               static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      const int error = errno;
      return ErrnoStatus(error, what());
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

}  // namespace batchd::common
