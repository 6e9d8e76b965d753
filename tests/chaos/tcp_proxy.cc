#include "tests/chaos/tcp_proxy.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace batchd::testing {
namespace {

constexpr size_t kBufferBytes = 64 << 10;
constexpr int kPollMs = 20;

void SetNonBlocking(int fd) {
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

// Closes `fd` with an RST instead of a FIN.
void CloseWithReset(int fd) {
  linger hard{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &hard, sizeof(hard));
  close(fd);
}

// Bytes read from one side, each piece forwardable from its `ready` time.
struct Pipe {
  struct Piece {
    std::string bytes;
    absl::Time ready;
  };
  std::deque<Piece> pieces;
  size_t buffered = 0;
  size_t written = 0;  // of pieces.front()
  bool eof = false;    // the source closed
  bool shut = false;   // the write side was shut down after eof
};

// Moves what `from` has to `pipe`, and what `pipe` holds (when due) to
// `to`. False when a side failed.
bool Pump(int from, int to, Pipe& pipe, short from_events, short to_events,
          bool stalled, absl::Duration latency, absl::Time now) {
  if ((from_events & (POLLIN | POLLHUP | POLLERR)) && !stalled && !pipe.eof &&
      pipe.buffered < kBufferBytes) {
    char buffer[16 << 10];
    const ssize_t n = read(from, buffer, sizeof(buffer));
    if (n > 0) {
      pipe.pieces.push_back({std::string(buffer, n), now + latency});
      pipe.buffered += n;
    } else if (n == 0) {
      pipe.eof = true;
    } else if (errno != EAGAIN && errno != EINTR) {
      return false;
    }
  }
  (void)to_events;
  while (!stalled && !pipe.pieces.empty() && pipe.pieces.front().ready <= now) {
    Pipe::Piece& piece = pipe.pieces.front();
    const ssize_t n = write(to, piece.bytes.data() + pipe.written,
                            piece.bytes.size() - pipe.written);
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) break;
      return false;
    }
    pipe.written += n;
    if (pipe.written == piece.bytes.size()) {
      pipe.buffered -= piece.bytes.size();
      pipe.pieces.pop_front();
      pipe.written = 0;
    }
  }
  if (pipe.eof && pipe.pieces.empty() && !pipe.shut) {
    shutdown(to, SHUT_WR);
    pipe.shut = true;
  }
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TcpProxy>> TcpProxy::Start(
    const std::string& target_ip, int target_port, int max_connections) {
  std::unique_ptr<TcpProxy> proxy(new TcpProxy());
  proxy->target_ip_ = target_ip;
  proxy->target_port_ = target_port;
  proxy->max_connections_ = max_connections;
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("socket: ", strerror(errno)));
  }
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      listen(fd, 64) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    const std::string why = strerror(errno);
    close(fd);
    return absl::InternalError(absl::StrCat("proxy listener: ", why));
  }
  SetNonBlocking(fd);
  proxy->listener_ = fd;
  proxy->port_ = ntohs(address.sin_port);
  TcpProxy* self = proxy.get();
  proxy->acceptor_ = std::thread([self] { self->AcceptLoop(); });
  return proxy;
}

TcpProxy::~TcpProxy() {
  stop_ = true;
  if (acceptor_.joinable()) acceptor_.join();
  for (auto& c : connections_) c->thread.join();
  if (listener_ >= 0) close(listener_);
}

void TcpProxy::SetLatency(absl::Duration latency) {
  absl::MutexLock lock(&mu_);
  latency_ = latency;
}

void TcpProxy::SetStalled(bool stalled) {
  absl::MutexLock lock(&mu_);
  stalled_ = stalled;
}

void TcpProxy::ResetAll() {
  absl::MutexLock lock(&mu_);
  ++resets_;
}

absl::Duration TcpProxy::latency() const {
  absl::MutexLock lock(&mu_);
  return latency_;
}

bool TcpProxy::stalled() const {
  absl::MutexLock lock(&mu_);
  return stalled_;
}

uint64_t TcpProxy::resets() const {
  absl::MutexLock lock(&mu_);
  return resets_;
}

void TcpProxy::Reap() {
  for (auto it = connections_.begin(); it != connections_.end();) {
    if ((*it)->done) {
      (*it)->thread.join();
      it = connections_.erase(it);
    } else {
      ++it;
    }
  }
}

void TcpProxy::AcceptLoop() {
  while (!stop_) {
    Reap();
    pollfd p{listener_, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    const int client = accept(listener_, nullptr, nullptr);
    if (client < 0) continue;
    ++accepted_;
    if (static_cast<int>(connections_.size()) >= max_connections_) {
      CloseWithReset(client);
      continue;
    }
    auto connection = std::make_unique<Connection>();
    Connection* c = connection.get();
    connection->thread = std::thread([this, client, c] { Forward(client, c); });
    connections_.push_back(std::move(connection));
  }
}

void TcpProxy::Forward(int client, Connection* self) {
  const uint64_t generation = resets();
  const int upstream = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(target_port_));
  inet_pton(AF_INET, target_ip_.c_str(), &address.sin_addr);
  // A blocking connect, bounded by the kernel's SYN retries; a partitioned
  // link makes it fail at once (no route) or time out.
  timeval connect_timeout{5, 0};
  setsockopt(upstream, SOL_SOCKET, SO_SNDTIMEO, &connect_timeout,
             sizeof(connect_timeout));
  if (upstream < 0 ||
      connect(upstream, reinterpret_cast<sockaddr*>(&address),
              sizeof(address)) != 0) {
    if (upstream >= 0) close(upstream);
    CloseWithReset(client);
    self->done = true;
    return;
  }
  const int one = 1;
  setsockopt(upstream, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  SetNonBlocking(client);
  SetNonBlocking(upstream);
  Pipe up, down;  // client -> daemon, daemon -> client
  bool reset = false;
  while (!stop_) {
    if (resets() != generation) {
      reset = true;
      break;
    }
    const bool stall = stalled();
    if (stall) {
      // Nothing moves; the kernel's buffers fill and both ends wait.
      absl::SleepFor(absl::Milliseconds(kPollMs));
      continue;
    }
    const absl::Duration delay = latency();
    const absl::Time before = absl::Now();
    auto due = [before](const Pipe& pipe) {
      return !pipe.pieces.empty() && pipe.pieces.front().ready <= before;
    };
    pollfd fds[2] = {{client, 0, 0}, {upstream, 0, 0}};
    if (!up.eof && up.buffered < kBufferBytes) fds[0].events |= POLLIN;
    if (!down.eof && down.buffered < kBufferBytes) fds[1].events |= POLLIN;
    if (due(up)) fds[1].events |= POLLOUT;
    if (due(down)) fds[0].events |= POLLOUT;
    if (poll(fds, 2, kPollMs) < 0 && errno != EINTR) break;
    const absl::Time now = absl::Now();
    if (!Pump(client, upstream, up, fds[0].revents, fds[1].revents, stall,
              delay, now) ||
        !Pump(upstream, client, down, fds[1].revents, fds[0].revents, stall,
              delay, now)) {
      reset = true;
      break;
    }
    if (up.shut && down.shut) break;
  }
  if (reset || stop_) {
    CloseWithReset(client);
    CloseWithReset(upstream);
  } else {
    close(client);
    close(upstream);
  }
  self->done = true;
}

}  // namespace batchd::testing
