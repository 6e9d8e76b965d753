// ConnectLoopback: a TCP connection to 127.0.0.1:port, for tests that speak
// raw bytes to a server (HTTP peers, slow or silent clients).
#ifndef BATCHD_TESTING_LOOPBACK_SOCKET_H_
#define BATCHD_TESTING_LOOPBACK_SOCKET_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>

namespace batchd::testing {

// The connected descriptor (the caller closes it), or -1.
inline int ConnectLoopback(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

}  // namespace batchd::testing

#endif  // BATCHD_TESTING_LOOPBACK_SOCKET_H_
