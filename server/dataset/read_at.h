// ReadAt: the one thing the tar scanner and the shard indexer need from a
// shard, "the bytes at this offset", so a local file (pread) and a remote
// object (ranged GETs, remote_shards.h) share one scanner.
//
//   FdReadAt file(fd, "a.tar");
//   ASSIGN_OR_RETURN(TarScan scan, ScanTar(file, size, "a.tar"));
//
// Implementations say whether they are thread-safe; FdReadAt is.
#ifndef BATCHD_SERVER_DATASET_READ_AT_H_
#define BATCHD_SERVER_DATASET_READ_AT_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace batchd::server {

class ReadAt {
 public:
  virtual ~ReadAt() = default;
  // Reads `size` bytes at `offset` into `out`; returns how many were read,
  // fewer than `size` only at the end of the data. UNAVAILABLE (or the
  // store's error) when a read fails.
  virtual absl::StatusOr<size_t> Read(uint64_t offset, char* out,
                                      size_t size) = 0;
};

// pread on a file descriptor it does not own. `name` is for messages.
class FdReadAt : public ReadAt {
 public:
  FdReadAt(int fd, std::string name) : fd_(fd), name_(std::move(name)) {}
  absl::StatusOr<size_t> Read(uint64_t offset, char* out,
                              size_t size) override;

 private:
  const int fd_;
  const std::string name_;
};

}  // namespace batchd::server

#endif  // BATCHD_SERVER_DATASET_READ_AT_H_
