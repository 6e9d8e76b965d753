#include "server/dataset/errno_status.h"

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace batchd::server {
namespace {

// strerror_r comes in a GNU flavour (returns the text) and an XSI one
// (returns an error code and fills the buffer); these pick the right one.
[[maybe_unused]] const char* StrerrorResult(const char* text, const char*) {
  return text;
}
[[maybe_unused]] const char* StrerrorResult(int rc, const char* buffer) {
  return rc == 0 ? buffer : "unknown error";
}

}  // namespace

std::string ErrnoText(int error) {
  char buffer[256] = {};
  return StrerrorResult(strerror_r(error, buffer, sizeof(buffer)), buffer);
}

absl::Status ErrnoStatus(int error, absl::string_view message) {
  const std::string text = absl::StrCat(message, ": ", ErrnoText(error));
  switch (error) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(text);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(text);
    default:
      return absl::UnavailableError(text);
  }
}

}  // namespace batchd::server
