// SharedMemoryBroker: the daemon's side channel for same-host shared memory
// (docs/design-choices.md, "Same-host shared memory").
//
// A stream that accepts a client's offer gets a single-use ticket
// (Invite). The client then connects to the broker's Unix socket and sends
// "<ticket> <slots>" with its ring's memfd attached (SCM_RIGHTS). The
// broker checks, in this order, the peer's uid (SO_PEERCRED), the ticket,
// the slot count (at most the stream's granted window), and the seals,
// access mode and size of the memfd (so that no client can truncate the
// file under the daemon's mapping and SIGBUS it), maps it without touching
// its pages, hands the region to the stream's Attach callback, and answers
// one line: "0 attached" or "<grpc code> <what was wrong>".
//
// One thread serves every handshake at once (poll over non-blocking
// sockets), so a connection that says nothing delays nobody. What a peer
// can make it hold is bounded: connections waiting for their descriptor,
// per uid and in all (the oldest waiting one is answered
// RESOURCE_EXHAUSTED to make room for a new one), each for at most
// `handshake_timeout` (then DEADLINE_EXCEEDED). Every refusal is counted
// (batchd_shared_memory_attach_total{result}) and logged, at most a few
// lines a second.
//
// Owns its listening socket and its thread; the destructor stops both
// and removes a socket file. Thread-safe.
#ifndef BATCHD_SERVER_STREAM_SHARED_MEMORY_BROKER_H_
#define BATCHD_SERVER_STREAM_SHARED_MEMORY_BROKER_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/log_limiter.h"
#include "common/shared_region.h"
#include "server/metrics/server_metrics.h"

namespace batchd::server {

// How long a client has to send its descriptor once connected: a client
// sends it right after connecting, and one that says nothing holds a place
// no longer than this.
inline constexpr absl::Duration kHandshakeTimeout = absl::Milliseconds(500);
// Connections waiting for their descriptor, from one uid and in all.
inline constexpr int kMaxHandshakesPerUid = 8;
inline constexpr int kMaxHandshakes = 64;

struct SharedMemoryBrokerOptions {
  // "@name" (a Linux abstract socket) or a filesystem path. Empty: an
  // abstract name unique to this process, "@batchd-shm-<pid>-<random>".
  std::string socket;
  // Who may attach memory (SO_PEERCRED uids). Empty: the daemon's own uid.
  std::vector<uid_t> allowed_uids;
  // The most slots one region may have (the daemon's --max-window); each
  // invitation allows at most its stream's granted window.
  uint32_t max_slots = 64;
  // See kHandshakeTimeout, kMaxHandshakesPerUid and kMaxHandshakes.
  absl::Duration handshake_timeout = kHandshakeTimeout;
  int max_handshakes_per_uid = kMaxHandshakesPerUid;
  int max_handshakes = kMaxHandshakes;
  // Where attach results are counted; nullptr counts nothing. Not owned.
  ServerMetrics* metrics = nullptr;
};

class SharedMemoryBroker {
 public:
  // Gives a stream the mapped region of `slots` slots; its error is sent
  // back to the client. Runs on the broker's thread: must not block.
  using Attach = std::function<absl::Status(
      std::shared_ptr<common::SharedRegion> region, uint32_t slots)>;

  static absl::StatusOr<std::unique_ptr<SharedMemoryBroker>> Start(
      SharedMemoryBrokerOptions options);
  ~SharedMemoryBroker();
  SharedMemoryBroker(const SharedMemoryBroker&) = delete;
  SharedMemoryBroker& operator=(const SharedMemoryBroker&) = delete;

  // The address clients connect to, as SharedMemoryInvite.socket.
  const std::string& socket() const { return socket_; }

  // A new ticket (32 hex digits) for a stream whose slots are `slot_bytes`
  // each and whose granted window is `max_slots`: a ring of more slots is
  // refused (INVALID_ARGUMENT) before it is mapped. `attach` is called at
  // most once, when the ticket is used; it is dropped by then or by
  // Withdraw.
  std::string Invite(uint64_t slot_bytes, uint32_t max_slots, Attach attach)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Forgets `ticket` (its stream ended). Unknown tickets are ignored.
  void Withdraw(const std::string& ticket) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Invitation {
    uint64_t slot_bytes = 0;
    uint32_t max_slots = 0;
    Attach attach;
  };
  // An accepted connection whose descriptor has not arrived yet.
  struct Waiting {
    common::UniqueFd connection;
    uid_t uid = 0;
    absl::Time deadline;
  };

  SharedMemoryBroker(SharedMemoryBrokerOptions options,
                     common::UniqueFd listener, common::UniqueFd wake,
                     std::string socket);
  // The broker's thread: polls the listener and every waiting connection.
  void Loop();
  // Takes the connections the listener has queued into `waiting`, serving
  // at once those whose descriptor came with them.
  void AcceptAll(std::vector<Waiting>& waiting);
  // One handshake on `connection`, whose message is ready: the status to
  // answer.
  absl::Status Serve(int connection) ABSL_LOCKS_EXCLUDED(mu_);
  // Sends `result` on `connection` (never blocks), counts it and logs a
  // refusal (rate-limited).
  void Answer(int connection, const absl::Status& result);

  // Constant after construction.
  const SharedMemoryBrokerOptions options_;
  const common::UniqueFd listener_;
  const common::UniqueFd wake_;  // eventfd: the destructor's stop signal
  const std::string socket_;

  // Thread-safe itself.
  common::LogLimiter refusal_log_;

  absl::Mutex mu_;
  absl::flat_hash_map<std::string, Invitation> invitations_
      ABSL_GUARDED_BY(mu_);

  std::thread thread_;  // last: starts once the rest exists
};

}  // namespace batchd::server

#endif  // BATCHD_SERVER_STREAM_SHARED_MEMORY_BROKER_H_
