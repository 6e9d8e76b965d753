#include "common/shared_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/errno_status.h"

namespace batchd::common {
namespace {

// `address` as a sockaddr_un (see ListenUnix); `length` is what to pass to
// bind/connect.
absl::Status UnixAddress(absl::string_view address, sockaddr_un* out,
                         socklen_t* length) {
  *out = sockaddr_un{};
  out->sun_family = AF_UNIX;
  if (address.empty() || address == "@") {
    return absl::InvalidArgumentError("an empty Unix socket address");
  }
  if (address.size() >= sizeof(out->sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the Unix socket address \"", address, "\" is longer than ",
        sizeof(out->sun_path) - 1, " bytes"));
  }
  std::memcpy(out->sun_path, address.data(), address.size());
  const bool abstract = address[0] == '@';
  if (abstract) out->sun_path[0] = '\0';
  // An abstract name is exactly its bytes; a path ends at its NUL.
  *length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) +
                                   address.size() + (abstract ? 0 : 1));
  return absl::OkStatus();
}

}  // namespace

absl::Status SetSocketTimeout(int socket, absl::Duration timeout) {
  const timeval tv = absl::ToTimeval(timeout);
  if (setsockopt(socket, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0 ||
      setsockopt(socket, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) != 0) {
    return ErrnoStatus(errno, "setting the socket's timeout");
  }
  return absl::OkStatus();
}

absl::StatusOr<UniqueFd> ListenUnix(absl::string_view address) {
  sockaddr_un addr;
  socklen_t length;
  if (absl::Status s = UnixAddress(address, &addr, &length); !s.ok()) return s;
  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return ErrnoStatus(errno, "socket(AF_UNIX)");
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), length) != 0) {
    return ErrnoStatus(errno,
                       absl::StrCat("binding the Unix socket ", address));
  }
  if (listen(fd.get(), kListenBacklog) != 0) {
    return ErrnoStatus(errno, absl::StrCat("listening on ", address));
  }
  return fd;
}

absl::StatusOr<UniqueFd> ConnectUnix(absl::string_view address,
                                     absl::Duration timeout) {
  sockaddr_un addr;
  socklen_t length;
  if (absl::Status s = UnixAddress(address, &addr, &length); !s.ok()) return s;
  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return ErrnoStatus(errno, "socket(AF_UNIX)");
  if (absl::Status s = SetSocketTimeout(fd.get(), timeout); !s.ok()) return s;
  int rc;
  do {
    rc = connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), length);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    return absl::UnavailableError(ErrnoMessage(
        errno, absl::StrCat("cannot connect to the Unix socket ", address)));
  }
  return fd;
}

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = other.release();
  }
  return *this;
}

UniqueFd::~UniqueFd() {
  if (fd_ >= 0) close(fd_);
}

absl::StatusOr<SharedRegion> SharedRegion::Create(size_t bytes) {
  if (bytes == 0) return absl::InvalidArgumentError("a region of 0 bytes");
  UniqueFd fd(memfd_create("batchd-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (fd.get() < 0) return ErrnoStatus(errno, "memfd_create");
  if (ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0) {
    return ErrnoStatus(errno, "ftruncate of the memfd");
  }
  // Allocates every page now, in one call, rather than one fault at a time
  // (~13 us each on a VM) while the daemon writes its first batches; a
  // host that cannot back the ring says so here.
  if (fallocate(fd.get(), 0, 0, static_cast<off_t>(bytes)) != 0) {
    return ErrnoStatus(errno, "allocating the memfd's pages");
  }
  if (fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) !=
      0) {
    return ErrnoStatus(errno, "sealing the memfd");
  }
  void* data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                    MAP_SHARED | MAP_POPULATE, fd.get(), 0);
  if (data == MAP_FAILED) return ErrnoStatus(errno, "mmap of the memfd");
  return SharedRegion(std::move(fd), static_cast<uint8_t*>(data), bytes);
}

absl::StatusOr<SharedRegion> SharedRegion::MapSealed(UniqueFd fd,
                                                     size_t expected_bytes) {
  const int seals = fcntl(fd.get(), F_GET_SEALS);
  if (seals < 0) {
    return absl::FailedPreconditionError(
        "the shared-memory descriptor is not a sealable memfd; create it "
        "with memfd_create(MFD_ALLOW_SEALING) and seal it");
  }
  if ((seals & kRequiredSeals) != kRequiredSeals) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the shared-memory region is not sealed against shrinking and "
        "growing (seals 0x",
        absl::Hex(seals),
        "); add F_SEAL_SHRINK | F_SEAL_GROW before passing it, so that it "
        "cannot be truncated under the daemon"));
  }
  if ((seals & (kWriteSeal | kFutureWriteSeal)) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the shared-memory region is sealed against writing (seals 0x",
        absl::Hex(seals),
        "); the daemon writes the batches into it, so leave out F_SEAL_WRITE "
        "and F_SEAL_FUTURE_WRITE"));
  }
  const int access = fcntl(fd.get(), F_GETFL);
  if (access < 0) return ErrnoStatus(errno, "fcntl(F_GETFL) of the memfd");
  if ((access & O_ACCMODE) != O_RDWR) {
    return absl::FailedPreconditionError(
        "the shared-memory descriptor is open read-only; the daemon writes "
        "the batches into it, so pass the read-write descriptor that "
        "memfd_create returned");
  }
  struct stat st;
  if (fstat(fd.get(), &st) != 0) {
    return ErrnoStatus(errno, "fstat of the memfd");
  }
  if (expected_bytes == 0 ||
      static_cast<uint64_t>(st.st_size) != expected_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the shared-memory region has ", st.st_size, " bytes; the plan's "
        "slots need exactly ", expected_bytes));
  }
  // No MAP_POPULATE: mapping costs the same whatever the size, and the
  // daemon touches a page only when a worker writes a batch into a slot
  // granted to it. Populating here would fault in, on the broker's thread
  // and in the daemon's RSS, every page of a ring the client never touched.
  void* data = mmap(nullptr, expected_bytes, PROT_READ | PROT_WRITE,
                    MAP_SHARED, fd.get(), 0);
  if (data == MAP_FAILED) {
    const int error = errno;
    if (error == EPERM || error == EACCES) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the shared-memory region cannot be mapped for writing (",
          std::strerror(error),
          "); pass a read-write memfd that is not sealed against writing"));
    }
    return ErrnoStatus(error, "mmap of the client's region");
  }
  return SharedRegion(std::move(fd), static_cast<uint8_t*>(data),
                      expected_bytes);
}

SharedRegion::SharedRegion(SharedRegion&& other) noexcept
    : fd_(std::move(other.fd_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

SharedRegion& SharedRegion::operator=(SharedRegion&& other) noexcept {
  if (this != &other) {
    Unmap();
    fd_ = std::move(other.fd_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

SharedRegion::~SharedRegion() { Unmap(); }

void SharedRegion::Unmap() {
  if (data_ != nullptr) munmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
}

absl::Status SendDescriptor(int socket, int fd, absl::string_view message) {
  if (message.size() > kMaxDescriptorMessage || message.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a descriptor message must have 1..", kMaxDescriptorMessage,
        " bytes"));
  }
  iovec iov{const_cast<char*>(message.data()), message.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
  cmsg->cmsg_level = SOL_SOCKET;
  cmsg->cmsg_type = SCM_RIGHTS;
  cmsg->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(cmsg), &fd, sizeof(int));
  ssize_t sent;
  do {
    sent = sendmsg(socket, &msg, MSG_NOSIGNAL);
  } while (sent < 0 && errno == EINTR);
  if (sent < 0) return ErrnoStatus(errno, "sendmsg with the descriptor");
  if (static_cast<size_t>(sent) != message.size()) {
    return absl::InternalError("sendmsg sent part of the message");
  }
  return absl::OkStatus();
}

absl::StatusOr<ReceivedDescriptor> ReceiveDescriptor(int socket) {
  // One byte more than the limit, to tell a long message from a full one;
  // room for a few descriptors, so that extras are received and closed
  // rather than leaked into the socket.
  char buffer[kMaxDescriptorMessage + 1];
  iovec iov{buffer, sizeof(buffer)};
  alignas(cmsghdr) char control[CMSG_SPACE(4 * sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t got;
  do {
    got = recvmsg(socket, &msg, MSG_CMSG_CLOEXEC);
  } while (got < 0 && errno == EINTR);
  if (got < 0) return ErrnoStatus(errno, "recvmsg");
  std::vector<UniqueFd> fds;
  for (cmsghdr* cmsg = CMSG_FIRSTHDR(&msg); cmsg != nullptr;
       cmsg = CMSG_NXTHDR(&msg, cmsg)) {
    if (cmsg->cmsg_level != SOL_SOCKET || cmsg->cmsg_type != SCM_RIGHTS) {
      continue;
    }
    const size_t count = (cmsg->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(cmsg) + i * sizeof(int), sizeof(int));
      fds.emplace_back(fd);
    }
  }
  if (got == 0 && fds.empty()) {
    return absl::UnavailableError("the peer closed the socket");
  }
  if ((msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0 ||
      static_cast<size_t>(got) > kMaxDescriptorMessage) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a descriptor message longer than ", kMaxDescriptorMessage,
        " bytes, or with more descriptors than one"));
  }
  if (fds.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the message carries ", fds.size(),
        " descriptors; send exactly one, the memfd of the ring"));
  }
  return ReceivedDescriptor{std::move(fds[0]),
                            std::string(buffer, static_cast<size_t>(got))};
}

absl::Status CheckPeerUid(int socket, const std::vector<uid_t>& allowed) {
  ucred cred{};
  socklen_t length = sizeof(cred);
  if (getsockopt(socket, SOL_SOCKET, SO_PEERCRED, &cred, &length) != 0) {
    return ErrnoStatus(errno, "SO_PEERCRED");
  }
  if (std::find(allowed.begin(), allowed.end(), cred.uid) != allowed.end()) {
    return absl::OkStatus();
  }
  return absl::PermissionDeniedError(absl::StrCat(
      "uid ", cred.uid, " may not share memory with this daemon (allowed: ",
      absl::StrJoin(allowed, ", "), "); run the trainer as an allowed user "
      "or use the bytes path"));
}

}  // namespace batchd::common
