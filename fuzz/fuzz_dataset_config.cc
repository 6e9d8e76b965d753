// Fuzz target: the daemon's configuration parsers: the --dataset flag, the
// DaemonConfig text format, and a list file (`path label` lines) loaded as
// a dataset. The first byte picks the parser, the rest is its input.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "server/dataset/dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case 0:
      (void)batchd::server::ParseDatasetFlag(text);
      return 0;
    case 1:
    case 2: {
      // The parsers read files: hand them the input as one.
      static const int fd = memfd_create("fuzz-config", 0);
      if (fd < 0 || ftruncate(fd, 0) != 0) return 0;
      if (!text.empty() &&
          pwrite(fd, text.data(), text.size(), 0) !=
              static_cast<ssize_t>(text.size())) {
        return 0;
      }
      const std::string path = absl::StrCat("/proc/self/fd/", fd);
      if (data[0] % 3 == 1) {
        (void)batchd::server::ReadConfigFile(path);
      } else {
        batchd::v1::DatasetConfig config;
        config.set_name("fuzz");
        config.set_path(path);
        config.set_format(batchd::v1::DatasetConfig::LIST_FILE);
        // Samples resolve under a root that does not exist: the parse is
        // what is fuzzed, not the file system.
        config.set_root("/nonexistent-batchd-fuzz-root");
        (void)batchd::server::LoadDataset(config);
      }
      return 0;
    }
  }
  return 0;
}
