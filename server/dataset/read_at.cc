#include "server/dataset/read_at.h"

#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "server/dataset/errno_status.h"

namespace batchd::server {

absl::StatusOr<size_t> FdReadAt::Read(uint64_t offset, char* out,
                                      size_t size) {
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::pread(fd_, out + done, size - done,
                              static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      const absl::Status status = ErrnoStatus(
          errno, absl::StrCat("read '", name_, "' at offset ", offset + done));
      // Whatever the errno, a read that fails mid-file is worth retrying
      // later, not a reason to give up on the dataset's configuration.
      return absl::UnavailableError(status.message());
    }
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  return done;
}

}  // namespace batchd::server
