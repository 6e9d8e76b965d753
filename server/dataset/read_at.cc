#include "server/dataset/read_at.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/file_io.h"

namespace batchd::server {

absl::StatusOr<size_t> FdReadAt::Read(uint64_t offset, char* out,
                                      size_t size) {
  absl::StatusOr<size_t> done = common::ReadFileRange(
      fd_, offset, size, out,
      [&] { return absl::StrCat("read '", name_, "' at offset ", offset); });
  // Whatever the errno, a read that fails mid-file is worth retrying later,
  // not a reason to give up on the dataset's configuration.
  if (!done.ok()) return absl::UnavailableError(done.status().message());
  return done;
}

}  // namespace batchd::server
