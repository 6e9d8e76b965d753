// SharedRegion: a memfd-backed memory region that a trainer shares with a
// daemon on the same host (same-host zero-copy, docs/design-choices.md).
//
// The client creates the region sealed against shrinking and growing, so
// that nobody can truncate it under the daemon (which would SIGBUS it), and
// passes the descriptor over a Unix socket with SCM_RIGHTS. The daemon
// maps it only after checking the seals and the size.
//
//   // Client:
//   ASSIGN_OR_RETURN(SharedRegion ring, SharedRegion::Create(slots * bytes));
//   RETURN_IF_ERROR(SendDescriptor(socket, ring.fd(), "stream 42"));
//   // Daemon:
//   ASSIGN_OR_RETURN(ReceivedDescriptor got, ReceiveDescriptor(socket));
//   RETURN_IF_ERROR(CheckPeerUid(socket, {getuid()}));
//   ASSIGN_OR_RETURN(SharedRegion ring,
//                    SharedRegion::MapSealed(std::move(got.fd), slots * bytes));
//
// Move-only; unmaps and closes on destruction. Not thread-safe; the bytes
// are the caller's to synchronise.
#ifndef BATCHD_COMMON_SHARED_REGION_H_
#define BATCHD_COMMON_SHARED_REGION_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace batchd::common {

// An owned file descriptor; closed on destruction. Move-only.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd();

  int get() const { return fd_; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_ = -1;
};

class SharedRegion {
 public:
  // The seals a region must carry before a daemon maps it.
  static constexpr int kRequiredSeals = 0x0002 | 0x0004;  // SHRINK | GROW
  // Seals that make the region unwritable, which a daemon refuses.
  static constexpr int kWriteSeal = 0x0008;         // F_SEAL_WRITE
  static constexpr int kFutureWriteSeal = 0x0010;   // F_SEAL_FUTURE_WRITE

  // A new memfd of `bytes` (> 0), its pages allocated, sealed against
  // shrinking, growing and further sealing, mapped read-write.
  static absl::StatusOr<SharedRegion> Create(size_t bytes);
  // Maps a descriptor received from a client, after checking that it is a
  // memfd sealed against shrinking and growing (FAILED_PRECONDITION
  // otherwise: an unsealed file could be truncated under the mapping) and
  // exactly `expected_bytes` long (INVALID_ARGUMENT otherwise). A
  // descriptor open read-only or sealed against writing is
  // FAILED_PRECONDITION too. Maps without populating: pages are touched
  // (and counted in the daemon's RSS) only as batches are written.
  static absl::StatusOr<SharedRegion> MapSealed(UniqueFd fd,
                                                size_t expected_bytes);

  SharedRegion() = default;
  SharedRegion(SharedRegion&& other) noexcept;
  SharedRegion& operator=(SharedRegion&& other) noexcept;
  SharedRegion(const SharedRegion&) = delete;
  SharedRegion& operator=(const SharedRegion&) = delete;
  ~SharedRegion();

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  int fd() const { return fd_.get(); }

 private:
  SharedRegion(UniqueFd fd, uint8_t* data, size_t size)
      : fd_(std::move(fd)), data_(data), size_(size) {}
  void Unmap();

  UniqueFd fd_;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Sends `message` (at most kMaxDescriptorMessage bytes) with `fd` attached
// (SCM_RIGHTS) on the connected Unix socket `socket`.
inline constexpr size_t kMaxDescriptorMessage = 256;
absl::Status SendDescriptor(int socket, int fd, absl::string_view message);

struct ReceivedDescriptor {
  UniqueFd fd;
  std::string message;
};
// Receives one message sent by SendDescriptor. INVALID_ARGUMENT when it
// carries no descriptor (or more than one: the extras are closed), or is
// too long; UNAVAILABLE when the peer closed the socket.
absl::StatusOr<ReceivedDescriptor> ReceiveDescriptor(int socket);

// Unix stream sockets named like SharedMemoryInvite.socket: "@name" is a
// Linux abstract socket (the @ stands for the leading NUL; no file, gone
// with its owner), anything else a filesystem path. INVALID_ARGUMENT for an
// empty or over-long (> 107 bytes) address.
//
// ListenUnix binds and listens (backlog kListenBacklog); a path must not
// exist yet.
inline constexpr int kListenBacklog = 256;
absl::StatusOr<UniqueFd> ListenUnix(absl::string_view address);
// ConnectUnix connects, with `timeout` for every later read and write on
// the socket (SO_RCVTIMEO / SO_SNDTIMEO). UNAVAILABLE when nobody listens.
absl::StatusOr<UniqueFd> ConnectUnix(absl::string_view address,
                                     absl::Duration timeout);
// Sets `timeout` for reads and writes on `socket`.
absl::Status SetSocketTimeout(int socket, absl::Duration timeout);

// PERMISSION_DENIED unless the peer of the Unix socket `socket` runs as one
// of `allowed` (SO_PEERCRED).
absl::Status CheckPeerUid(int socket, const std::vector<uid_t>& allowed);

}  // namespace batchd::common

#endif  // BATCHD_COMMON_SHARED_REGION_H_
