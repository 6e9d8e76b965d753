#include "common/text_file.h"

#include <cerrno>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/errno_status.h"

namespace batchd::common {

absl::StatusOr<std::string> ReadTextFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(
        ErrnoMessage(errno, absl::StrCat("cannot read ", path)));
  }
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace batchd::common
