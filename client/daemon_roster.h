// DaemonRoster: the daemons one client streams from, and where each one's
// connection stands: connecting, up, down until its reconnect backoff ends,
// failed for good, or removed (gone from DNS and owed nothing). It keeps
// each daemon's endpoint, whether the DNS name still lists it, the failures
// since it last delivered, and why it last went down; it applies a fresh
// DNS answer (Reconcile) and a stream's end (Ended) to them.
//
// Pure bookkeeping: no threads, no gRPC objects, no clock of its own
// (callers pass `now`), so reconnects, DNS changes and the "every daemon
// failed" error are unit-tested on constructed event sequences
// (daemon_roster_test.cc). DaemonSet owns the channels and streams.
//
// Daemons are numbered by Add(), in step with RequestScheduler's numbers.
// Thread-compatible: DaemonSet calls it under its mutex.
#ifndef BATCHD_CLIENT_DAEMON_ROSTER_H_
#define BATCHD_CLIENT_DAEMON_ROSTER_H_

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace batchd::client {

// The wait before reconnecting after `failures` (>= 1) failures in a row:
// `min` doubled per failure after the first, at most `max`; without jitter.
absl::Duration ReconnectBackoff(int failures, absl::Duration min,
                                absl::Duration max);

class DaemonRoster {
 public:
  enum class State { kConnecting, kUp, kDown, kFailed, kRemoved };
  // What a stream's end means for its daemon (JudgeStreamEnd decides).
  enum class Next {
    kReconnect,  // down for now: reconnect after the backoff
    kFail,       // not asked again (a protocol error, or its verdict)
    kRemove,     // gone from DNS and owed nothing: done with it
  };

  struct Options {
    // The reconnect backoff (ReconnectBackoff), spread by +-20 %.
    absl::Duration reconnect_backoff_min = absl::Milliseconds(100);
    absl::Duration reconnect_backoff_max = absl::Seconds(5);
    // Seeds the spread, so that many clients do not retry in step.
    uint32_t jitter_seed = 1;
  };

  explicit DaemonRoster(Options options);

  // A daemon at `endpoint`, connecting; returns its number.
  int Add(std::string endpoint);
  int size() const { return static_cast<int>(daemons_.size()); }
  bool Knows(const std::string& endpoint) const;

  const std::string& endpoint(int daemon) const;
  State state(int daemon) const;
  // Whether the DNS name lists it (always, for a fixed list); false: it
  // drains, then goes.
  bool in_dns(int daemon) const;
  // Why it last went down; OK once it recovered or before any failure.
  const absl::Status& last_error(int daemon) const;
  // Stream failures since it last delivered a batch (or was up with
  // nothing asked of it): the backoff grows with them, and while they are
  // not 0 a reconnect does not count as recovery.
  int failures(int daemon) const;
  absl::Time retry_at(int daemon) const;
  // How many daemons are in `state`.
  int CountIn(State state) const;

  // A stream to `daemon` is opening.
  void Connecting(int daemon);
  // Its stream answered the plan. Returns whether that is a recovery by
  // itself: true unless it failed since it last delivered (such a daemon
  // proves itself by delivering, so that one that accepts every stream and
  // then fails it neither keeps the loader waiting nor reconnects without
  // backoff).
  bool Up(int daemon);
  // `daemon` works again: its failures are forgiven, its error cleared.
  void Recovered(int daemon);
  // Its stream ended while the loader stops: down, and nothing judged.
  void Stopped(int daemon);
  // Its stream ended, with `next` and `error` from JudgeStreamEnd. On
  // kReconnect it is down until `now` + the backoff (with jitter).
  void Ended(int daemon, Next next, absl::Status error, absl::Time now);
  // Whether `daemon` is down, still listed, and its backoff over at `now`.
  bool DueForRetry(int daemon, absl::Time now) const;

  // What a DNS answer changed.
  struct Reconciled {
    // Listed no longer: take no new requests (they drain).
    std::vector<int> draining;
    // Listed and unknown, in the answer's order: Add() and connect them.
    std::vector<std::string> added;
  };
  // Applies the DNS answer `listed` at `now`: a daemon listed again is
  // listed (and, if it was removed, down and due for a reconnect at `now`).
  Reconciled Reconcile(const std::vector<std::string>& listed,
                       absl::Time now);

  // "host-a:7070 (why); host-b:7070 (never answered)", for errors.
  std::string Summary() const;
  // Once every daemon failed for good, the loader's error: the last one's
  // if there is one daemon, else "every batchd daemon failed: <summary>"
  // with its code. OK while some daemon may serve, or while `may_grow` (a
  // DNS name may bring new daemons; a fixed list cannot).
  absl::Status AllFailedError(bool may_grow) const;
  // "connecting", "up", "draining" (up, not `accepting`), "down",
  // "failed" or "removed", for DaemonStats::state.
  const char* StateName(int daemon, bool accepting) const;

 private:
  struct Daemon {
    std::string endpoint;
    State state = State::kConnecting;
    bool in_dns = true;
    absl::Status last_error;
    int failures = 0;
    absl::Time retry_at = absl::InfinitePast();
  };

  const Options options_;
  std::vector<Daemon> daemons_;  // by number
  std::minstd_rand jitter_;
};

}  // namespace batchd::client

#endif  // BATCHD_CLIENT_DAEMON_ROSTER_H_
