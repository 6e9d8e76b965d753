#include "server/service/shared_memory_broker.h"

#include <pthread.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace batchd::server {
namespace {

// 128 random bits as 32 hex digits.
std::string RandomHex() {
  unsigned char bytes[16] = {};
  size_t filled = 0;
  while (filled < sizeof(bytes)) {
    const ssize_t got = getrandom(bytes + filled, sizeof(bytes) - filled, 0);
    if (got > 0) filled += static_cast<size_t>(got);
  }
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char b : bytes) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 15]);
  }
  return out;
}

const char* ResultName(const absl::Status& status) {
  if (status.ok()) return "attached";
  return GrpcCodeName(static_cast<int>(status.code()));
}

}  // namespace

absl::StatusOr<std::unique_ptr<SharedMemoryBroker>> SharedMemoryBroker::Start(
    SharedMemoryBrokerOptions options) {
  std::string socket = options.socket;
  if (socket.empty()) {
    socket = absl::StrCat("@batchd-shm-", getpid(), "-", RandomHex());
  }
  if (options.allowed_uids.empty()) options.allowed_uids = {geteuid()};
  absl::StatusOr<common::UniqueFd> listener = common::ListenUnix(socket);
  if (!listener.ok()) {
    return absl::Status(
        listener.status().code(),
        absl::StrCat("--shm-socket: ", listener.status().message(),
                     socket[0] == '@'
                         ? ""
                         : "; remove a stale socket file, or pick another path"));
  }
  return std::unique_ptr<SharedMemoryBroker>(new SharedMemoryBroker(
      std::move(options), *std::move(listener), std::move(socket)));
}

SharedMemoryBroker::SharedMemoryBroker(SharedMemoryBrokerOptions options,
                                       common::UniqueFd listener,
                                       std::string socket)
    : options_(std::move(options)),
      listener_(std::move(listener)),
      socket_(std::move(socket)),
      acceptor_([this] { AcceptLoop(); }) {}

SharedMemoryBroker::~SharedMemoryBroker() {
  // Wakes accept() with an error, which ends the loop.
  shutdown(listener_.get(), SHUT_RDWR);
  acceptor_.join();
  if (socket_[0] != '@') unlink(socket_.c_str());
}

std::string SharedMemoryBroker::Invite(uint64_t slot_bytes, Attach attach) {
  std::string ticket = RandomHex();
  absl::MutexLock lock(&mu_);
  invitations_[ticket] = Invitation{slot_bytes, std::move(attach)};
  return ticket;
}

void SharedMemoryBroker::Withdraw(const std::string& ticket) {
  Invitation dropped;  // destroyed after the lock is released
  absl::MutexLock lock(&mu_);
  auto it = invitations_.find(ticket);
  if (it == invitations_.end()) return;
  dropped = std::move(it->second);
  invitations_.erase(it);
}

void SharedMemoryBroker::AcceptLoop() {
  pthread_setname_np(pthread_self(), "batchd-shm");
  for (;;) {
    const int fd = accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE ||
          errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // Out of descriptors: back off instead of spinning.
        if (errno != EINTR && errno != ECONNABORTED) usleep(10'000);
        continue;
      }
      return;  // shut down
    }
    common::UniqueFd connection(fd);
    const absl::Status result = Serve(connection.get());
    if (options_.metrics != nullptr) {
      options_.metrics->SharedMemoryAttach(ResultName(result));
    }
    if (!result.ok()) {
      std::fprintf(stderr, "batchd: shared memory refused: %s\n",
                   std::string(result.message()).c_str());
    }
    const std::string answer =
        result.ok() ? std::string("0 attached\n")
                    : absl::StrCat(static_cast<int>(result.code()), " ",
                                   result.message(), "\n");
    // Best effort: a client that went away learns nothing either way.
    (void)!send(connection.get(), answer.data(), answer.size(), MSG_NOSIGNAL);
  }
}

absl::Status SharedMemoryBroker::Serve(int connection) {
  if (absl::Status s = common::SetSocketTimeout(connection, kHandshakeTimeout);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = common::CheckPeerUid(connection, options_.allowed_uids);
      !s.ok()) {
    return s;
  }
  absl::StatusOr<common::ReceivedDescriptor> received =
      common::ReceiveDescriptor(connection);
  if (!received.ok()) {
    return absl::Status(received.status().code(),
                        absl::StrCat("reading the descriptor message: ",
                                     received.status().message()));
  }
  std::vector<absl::string_view> words =
      absl::StrSplit(received->message, ' ', absl::SkipEmpty());
  uint32_t slots = 0;
  if (words.size() != 2 || !absl::SimpleAtoi(words[1], &slots)) {
    return absl::InvalidArgumentError(
        "the descriptor message must be \"<ticket> <slots>\"");
  }
  Invitation invitation;
  {
    absl::MutexLock lock(&mu_);
    auto it = invitations_.find(words[0]);
    if (it == invitations_.end()) {
      return absl::NotFoundError(
          "unknown ticket: use the one in this stream's "
          "PlanOpened.shared_memory, once, while the stream is open");
    }
    // Single use, whatever the outcome.
    invitation = std::move(it->second);
    invitations_.erase(it);
  }
  if (slots == 0 || slots > options_.max_slots) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a ring of ", slots, " slots; attach 1..", options_.max_slots,
        " (--max-window)"));
  }
  absl::StatusOr<common::SharedRegion> region = common::SharedRegion::MapSealed(
      std::move(received->fd), uint64_t{slots} * invitation.slot_bytes);
  if (!region.ok()) return region.status();
  return invitation.attach(
      std::make_shared<common::SharedRegion>(*std::move(region)), slots);
}

}  // namespace batchd::server
