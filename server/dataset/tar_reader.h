// Tar archive scanning: the regular-file members of a tar file (name, data
// offset, size), found by reading its 512-byte headers only, never the
// members' data (except GNU long-name and pax extended headers, which are
// the next member's metadata).
//
// Formats: v7, POSIX ustar (name + prefix), GNU (long names, "L" members;
// base-256 sizes) and POSIX pax extended headers ("x" members: path and
// size). Global pax headers ("g") and long link names ("K") are skipped.
//
// Damage is never an error: the scan stops at the first damaged block (a
// header that fails its checksum, a file that ends inside a header or a
// member, an oversized long name or pax header) and returns the members
// before it, with a message saying what and where. Only failing to read the
// file is an error.
//
//   ASSIGN_OR_RETURN(TarScan scan, ScanTarFile(fd, size, "a.tar"));
//   for (const TarMember& m : scan.members) { ... pread(fd, m.offset ...) }
//   if (!scan.damage.empty()) Log(scan.damage);
//
// Pure functions; thread-safe.
#ifndef BATCHD_SERVER_DATASET_TAR_READER_H_
#define BATCHD_SERVER_DATASET_TAR_READER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/dataset/read_at.h"

namespace batchd::server {

inline constexpr uint64_t kTarBlockBytes = 512;
// Largest GNU long name or pax extended header accepted (a name is at most a
// few KB; anything larger is damage, not something to allocate).
inline constexpr uint64_t kMaxTarMetadataBytes = uint64_t{1} << 20;

struct TarMember {
  std::string name;     // full path inside the archive
  uint64_t offset = 0;  // of the member's first data byte in the file
  uint64_t size = 0;    // data bytes
};

struct TarScan {
  std::vector<TarMember> members;  // regular files, in archive order
  // Empty when the archive is intact; otherwise where and why the scan
  // stopped, e.g. "bad header checksum at offset 10240".
  std::string damage;
};

// Scans the tar file open as `fd` (`file_size` bytes; reads with pread, so
// the file offset is unchanged). `name` is used in messages only.
// UNAVAILABLE when a read fails.
absl::StatusOr<TarScan> ScanTarFile(int fd, uint64_t file_size,
                                    const std::string& name);

// The same scan over any ReadAt (a remote object's ranged reads): the one
// scanner both kinds of shard go through. Reads headers (512 bytes each)
// and long-name / pax data only.
absl::StatusOr<TarScan> ScanTar(ReadAt& file, uint64_t file_size,
                                const std::string& name);

// The same scan, calling `visit` with each regular member as soon as its
// header is read, before any later header (so a reader that keeps its last
// block serves the member's small data without another request). Returns
// the damage ("" when intact); an error from `visit` stops the scan and is
// returned.
absl::StatusOr<std::string> VisitTar(
    ReadAt& file, uint64_t file_size, const std::string& name,
    const std::function<absl::Status(TarMember)>& visit);

}  // namespace batchd::server

#endif  // BATCHD_SERVER_DATASET_TAR_READER_H_
