// Fuzz target: the tar-shard reader and the WebDataset index built from it
// (ustar, GNU long names, pax, damage), over the input as a shard file.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>

#include "server/dataset/shard_index.h"
#include "server/dataset/tar_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The readers take a file descriptor and pread it, as for a real shard.
  static const int fd = memfd_create("fuzz-shard", 0);
  if (fd < 0 || ftruncate(fd, 0) != 0) return 0;
  if (size > 0 && pwrite(fd, data, size, 0) != static_cast<ssize_t>(size)) {
    return 0;
  }
  (void)batchd::server::ScanTarFile(fd, size, "fuzz.tar");
  (void)batchd::server::IndexShardFile(fd, size, "fuzz.tar");
  return 0;
}
