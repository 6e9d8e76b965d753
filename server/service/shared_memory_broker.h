// SharedMemoryBroker: the daemon's side channel for same-host shared memory
// (docs/design-choices.md, "Same-host shared memory").
//
// A stream that accepts a client's offer gets a single-use ticket
// (Invite). The client then connects to the broker's Unix socket and sends
// "<ticket> <slots>" with its ring's memfd attached (SCM_RIGHTS). The
// broker checks, in this order, the peer's uid (SO_PEERCRED), the ticket,
// the slot count, and the seals and size of the memfd (so that no client
// can truncate the file under the daemon's mapping and SIGBUS it), maps it,
// hands the region to the stream's Attach callback, and answers one line:
// "0 attached" or "<grpc code> <what was wrong>". One handshake at a time,
// each bounded by kHandshakeTimeout.
//
// Owns its listening socket and accept thread; the destructor stops both
// and removes a socket file. Thread-safe.
#ifndef BATCHD_SERVER_SERVICE_SHARED_MEMORY_BROKER_H_
#define BATCHD_SERVER_SERVICE_SHARED_MEMORY_BROKER_H_

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
#include "common/shared_region.h"
#include "server/server_metrics.h"

namespace batchd::server {

// How long a client has to send its descriptor once connected, and to read
// the answer: a client that connects and says nothing holds the broker no
// longer than this.
inline constexpr absl::Duration kHandshakeTimeout = absl::Seconds(2);

struct SharedMemoryBrokerOptions {
  // "@name" (a Linux abstract socket) or a filesystem path. Empty: an
  // abstract name unique to this process, "@batchd-shm-<pid>-<random>".
  std::string socket;
  // Who may attach memory (SO_PEERCRED uids). Empty: the daemon's own uid.
  std::vector<uid_t> allowed_uids;
  // The most slots one region may have (the daemon's --max-window).
  uint32_t max_slots = 64;
  // Where attach results are counted; nullptr counts nothing. Not owned.
  ServerMetrics* metrics = nullptr;
};

class SharedMemoryBroker {
 public:
  // Gives a stream the mapped region of `slots` slots; its error is sent
  // back to the client. Runs on the broker's thread.
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
  // each. `attach` is called at most once, when the ticket is used; it is
  // dropped by then or by Withdraw.
  std::string Invite(uint64_t slot_bytes, Attach attach)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Forgets `ticket` (its stream ended). Unknown tickets are ignored.
  void Withdraw(const std::string& ticket) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Invitation {
    uint64_t slot_bytes = 0;
    Attach attach;
  };

  SharedMemoryBroker(SharedMemoryBrokerOptions options,
                     common::UniqueFd listener, std::string socket);
  void AcceptLoop();
  // One handshake on `connection`: the status to answer.
  absl::Status Serve(int connection) ABSL_LOCKS_EXCLUDED(mu_);

  // Constant after construction.
  const SharedMemoryBrokerOptions options_;
  const common::UniqueFd listener_;
  const std::string socket_;

  absl::Mutex mu_;
  absl::flat_hash_map<std::string, Invitation> invitations_
      ABSL_GUARDED_BY(mu_);

  std::thread acceptor_;  // last: starts once the rest exists
};

}  // namespace batchd::server

#endif  // BATCHD_SERVER_SERVICE_SHARED_MEMORY_BROKER_H_
