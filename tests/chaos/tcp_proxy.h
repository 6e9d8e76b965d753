// TcpProxy: a small userspace TCP proxy for the chaos run
// (tests/chaos/chaos.cc), standing between the clients and one daemon to
// inject what the kernel's missing netem would: latency, resets and stalls.
//
// It listens on 127.0.0.1 (a free port) and forwards every connection to
// `target_ip`:`target_port`. Bounded: at most `max_connections` at once
// (more are accepted and closed at once), 64 KiB buffered per direction,
// one thread per connection plus the accept thread, all owned and joined.
//
//   auto proxy = TcpProxy::Start("10.213.0.2", 7070, /*max_connections=*/64);
//   (*proxy)->SetLatency(absl::Milliseconds(100));
//   (*proxy)->ResetAll();
//
// Thread-safety: every method may be called from any thread.
#ifndef BATCHD_TESTS_CHAOS_TCP_PROXY_H_
#define BATCHD_TESTS_CHAOS_TCP_PROXY_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace batchd::testing {

class TcpProxy {
 public:
  static absl::StatusOr<std::unique_ptr<TcpProxy>> Start(
      const std::string& target_ip, int target_port, int max_connections);
  // Closes every connection and joins every thread.
  ~TcpProxy();
  TcpProxy(const TcpProxy&) = delete;
  TcpProxy& operator=(const TcpProxy&) = delete;

  int port() const { return port_; }
  // Each read is held this long before it is forwarded (both directions).
  void SetLatency(absl::Duration latency) ABSL_LOCKS_EXCLUDED(mu_);
  // While stalled nothing is forwarded; the connections stay open.
  void SetStalled(bool stalled) ABSL_LOCKS_EXCLUDED(mu_);
  // Every open connection is reset (RST to both ends).
  void ResetAll() ABSL_LOCKS_EXCLUDED(mu_);
  // Connections accepted so far.
  uint64_t accepted() const { return accepted_.load(); }

 private:
  struct Connection {
    std::thread thread;
    std::atomic<bool> done{false};
  };
  TcpProxy() = default;
  void AcceptLoop();
  void Forward(int client, Connection* self);
  absl::Duration latency() const ABSL_LOCKS_EXCLUDED(mu_);
  bool stalled() const ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t resets() const ABSL_LOCKS_EXCLUDED(mu_);
  // Joins the connections whose threads ended. REQUIRES: accept thread.
  void Reap();

  // Constant after Start().
  std::string target_ip_;
  int target_port_ = 0;
  int max_connections_ = 0;
  int listener_ = -1;
  int port_ = 0;

  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> accepted_{0};
  mutable absl::Mutex mu_;
  absl::Duration latency_ ABSL_GUARDED_BY(mu_);
  bool stalled_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t resets_ ABSL_GUARDED_BY(mu_) = 0;  // ResetAll() calls
  // Accept thread only.
  std::vector<std::unique_ptr<Connection>> connections_;
  std::thread acceptor_;
};

}  // namespace batchd::testing

#endif  // BATCHD_TESTS_CHAOS_TCP_PROXY_H_
