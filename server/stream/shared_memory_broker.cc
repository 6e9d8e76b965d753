#include "server/stream/shared_memory_broker.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/errno_status.h"

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

// The uid of the peer of the Unix socket `connection`.
absl::StatusOr<uid_t> PeerUid(int connection) {
  ucred cred{};
  socklen_t length = sizeof(cred);
  if (getsockopt(connection, SOL_SOCKET, SO_PEERCRED, &cred, &length) != 0) {
    return common::ErrnoStatus(errno, "SO_PEERCRED");
  }
  return cred.uid;
}

// Whether `connection` has something to read (or was closed) now.
bool Readable(int connection) {
  pollfd p{connection, POLLIN, 0};
  return poll(&p, 1, 0) > 0;
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
  options.max_handshakes = std::max(options.max_handshakes, 1);
  options.max_handshakes_per_uid =
      std::clamp(options.max_handshakes_per_uid, 1, options.max_handshakes);
  absl::StatusOr<common::UniqueFd> listener = common::ListenUnix(socket);
  if (!listener.ok()) {
    return absl::Status(
        listener.status().code(),
        absl::StrCat("--shm-socket: ", listener.status().message(),
                     socket[0] == '@'
                         ? ""
                         : "; remove a stale socket file, or pick another path"));
  }
  // Accepting never blocks the loop, which polls the listener.
  const int flags = fcntl(listener->get(), F_GETFL);
  if (flags < 0 || fcntl(listener->get(), F_SETFL, flags | O_NONBLOCK) != 0) {
    return common::ErrnoStatus(errno,
                               "making the shared-memory socket non-blocking");
  }
  common::UniqueFd wake(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (wake.get() < 0) {
    return common::ErrnoStatus(errno, "eventfd");
  }
  return std::unique_ptr<SharedMemoryBroker>(
      new SharedMemoryBroker(std::move(options), *std::move(listener),
                             std::move(wake), std::move(socket)));
}

SharedMemoryBroker::SharedMemoryBroker(SharedMemoryBrokerOptions options,
                                       common::UniqueFd listener,
                                       common::UniqueFd wake,
                                       std::string socket)
    : options_(std::move(options)),
      listener_(std::move(listener)),
      wake_(std::move(wake)),
      socket_(std::move(socket)),
      refusal_log_(/*burst=*/5, absl::Seconds(10)),
      thread_([this] { Loop(); }) {}

SharedMemoryBroker::~SharedMemoryBroker() {
  const uint64_t one = 1;
  (void)!write(wake_.get(), &one, sizeof(one));
  thread_.join();
  if (socket_[0] != '@') unlink(socket_.c_str());
}

std::string SharedMemoryBroker::Invite(uint64_t slot_bytes, uint32_t max_slots,
                                       Attach attach) {
  std::string ticket = RandomHex();
  absl::MutexLock lock(&mu_);
  invitations_[ticket] = Invitation{slot_bytes, max_slots, std::move(attach)};
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

void SharedMemoryBroker::Loop() {
  pthread_setname_np(pthread_self(), "batchd-shm");
  // Oldest first. At most options_.max_handshakes.
  std::vector<Waiting> waiting;
  std::vector<pollfd> polled;
  for (;;) {
    polled.clear();
    polled.push_back({wake_.get(), POLLIN, 0});
    polled.push_back({listener_.get(), POLLIN, 0});
    absl::Time next_deadline = absl::InfiniteFuture();
    for (const Waiting& w : waiting) {
      polled.push_back({w.connection.get(), POLLIN, 0});
      next_deadline = std::min(next_deadline, w.deadline);
    }
    int timeout_ms = -1;
    if (next_deadline != absl::InfiniteFuture()) {
      timeout_ms = static_cast<int>(std::max<int64_t>(
          0, absl::ToInt64Milliseconds(next_deadline - absl::Now()) + 1));
    }
    const int ready = poll(polled.data(), polled.size(), timeout_ms);
    if (ready < 0 && errno != EINTR) {
      const std::string why = common::ErrnoMessage(errno, "poll");
      std::fprintf(stderr, "batchd: shared memory side channel: %s\n",
                   why.c_str());
      usleep(10'000);
      continue;
    }
    if (ready > 0 && polled[0].revents != 0) return;  // the destructor
    // Descriptors that arrived (or connections closed) first.
    std::vector<Waiting> still;
    still.reserve(waiting.size());
    const absl::Time now = absl::Now();
    for (size_t i = 0; i < waiting.size(); ++i) {
      Waiting& w = waiting[i];
      if (ready > 0 && polled[i + 2].revents != 0) {
        Answer(w.connection.get(), Serve(w.connection.get()));
      } else if (now >= w.deadline) {
        Answer(w.connection.get(),
               absl::DeadlineExceededError(absl::StrCat(
                   "no descriptor message within ",
                   absl::FormatDuration(options_.handshake_timeout),
                   " of connecting; send \"<ticket> <slots>\" with the "
                   "memfd right after connecting")));
      } else {
        still.push_back(std::move(w));
      }
    }
    waiting = std::move(still);
    if (ready > 0 && polled[1].revents != 0) AcceptAll(waiting);
  }
}

void SharedMemoryBroker::AcceptAll(std::vector<Waiting>& waiting) {
  // A bounded number per round, so that the waiting connections are
  // looked at again even while connections keep coming.
  for (int round = 0; round < options_.max_handshakes; ++round) {
    const int fd = accept4(listener_.get(), nullptr, nullptr,
                           SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
          errno == ENOMEM) {
        // Out of descriptors: back off instead of spinning.
        usleep(10'000);
      }
      return;  // EAGAIN: none left
    }
    common::UniqueFd connection(fd);
    absl::StatusOr<uid_t> uid = PeerUid(fd);
    if (!uid.ok()) {
      Answer(fd, uid.status());
      continue;
    }
    if (absl::Status allowed =
            common::CheckPeerUid(fd, options_.allowed_uids);
        !allowed.ok()) {
      Answer(fd, allowed);
      continue;
    }
    // A client sends its descriptor right after connecting: usually it is
    // here already, and the handshake takes no place in `waiting`.
    if (Readable(fd)) {
      Answer(fd, Serve(fd));
      continue;
    }
    // Room for it: the oldest waiting connection of its uid, or the oldest
    // of all, gives way.
    const auto same_uid = [&](const Waiting& w) { return w.uid == *uid; };
    auto evict = waiting.end();
    if (std::count_if(waiting.begin(), waiting.end(), same_uid) >=
        options_.max_handshakes_per_uid) {
      evict = std::find_if(waiting.begin(), waiting.end(), same_uid);
    } else if (static_cast<int>(waiting.size()) >= options_.max_handshakes) {
      evict = waiting.begin();
    }
    if (evict != waiting.end()) {
      Answer(evict->connection.get(),
             absl::ResourceExhaustedError(absl::StrCat(
                 "too many shared-memory handshakes waiting for their "
                 "descriptor (at most ", options_.max_handshakes_per_uid,
                 " per uid, ", options_.max_handshakes,
                 " in all); this one gave way to a newer one: send the "
                 "descriptor right after connecting")));
      waiting.erase(evict);
    }
    waiting.push_back(Waiting{std::move(connection), *uid,
                              absl::Now() + options_.handshake_timeout});
  }
}

void SharedMemoryBroker::Answer(int connection, const absl::Status& result) {
  if (options_.metrics != nullptr) {
    options_.metrics->SharedMemoryAttach(ResultName(result));
  }
  uint64_t dropped = 0;
  if (!result.ok() && refusal_log_.Allow(absl::Now(), &dropped)) {
    std::fprintf(stderr, "batchd: shared memory refused: %s%s\n",
                 std::string(result.message()).c_str(),
                 dropped == 0
                     ? ""
                     : absl::StrCat(" (", dropped,
                                    " more refusals not logged; see "
                                    "batchd_shared_memory_attach_total)")
                           .c_str());
  }
  const std::string answer =
      result.ok() ? std::string("0 attached\n")
                  : absl::StrCat(static_cast<int>(result.code()), " ",
                                 result.message(), "\n");
  // Best effort and never blocking (a fresh socket's buffer holds a line):
  // a client that went away learns nothing either way.
  (void)!send(connection, answer.data(), answer.size(),
              MSG_NOSIGNAL | MSG_DONTWAIT);
}

absl::Status SharedMemoryBroker::Serve(int connection) {
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
  const uint32_t most = std::min(invitation.max_slots, options_.max_slots);
  if (slots == 0 || slots > most) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a ring of ", slots, " slots, but this stream's granted window "
        "(PlanOpened.window) is ", most, "; create a ring of 1..", most,
        " slots"));
  }
  absl::StatusOr<common::SharedRegion> region = common::SharedRegion::MapSealed(
      std::move(received->fd), uint64_t{slots} * invitation.slot_bytes);
  if (!region.ok()) return region.status();
  return invitation.attach(
      std::make_shared<common::SharedRegion>(*std::move(region)), slots);
}

}  // namespace batchd::server
