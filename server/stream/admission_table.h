// AdmissionTable: which StreamBatches calls hold a place in the daemon, by
// identity (the caller's token, else its peer host) and by connection (the
// gRPC peer string, address and port), and the rules that admit a new one
// or pick which open streams end to make room for it:
//
//   1. A connection holds at most `max_planless_per_connection` streams that
//      have not sent their plan. At the cap, the connection's oldest
//      plan-less stream is ended, not the new one refused.
//   2. An identity holds at most `max_streams_per_identity` streams. At the
//      cap, its oldest plan-less stream (on any of its connections) is
//      ended; with none, the new stream is refused.
//   3. The daemon holds at most `max_open_streams`. When full, the oldest
//      plan-less stream of anyone is ended; with none, and when the new
//      stream's identity holds less than its fair share (max_open_streams
//      divided by the identities holding streams, the newcomer's included)
//      while the identity with the most streams holds more, that identity's
//      newest stream is ended; else the new stream is refused.
//
// Why plan-less streams are ended rather than new ones refused: a trainer's
// stream is plan-less only for the round trip between its call and its
// `open`, so a stream still plan-less at a cap is the one most likely idle
// or hostile; ending the oldest means a new stream that sends its plan
// promptly is never refused because of streams that do not. Counting per
// connection means another process's plan-less streams never touch a
// trainer's TCP connection at all (each TCP connection has its own port,
// and gRPC multiplexes one process's calls over its channel's connection);
// on the Unix socket gRPC names every connection alike, and rule 1's
// eviction is what keeps the guarantee there. Rule 3's fair share is
// max-min fairness of places: no identity holds more than its share while
// another under its share is refused.
//
// A stream chosen to end stops counting at once (its place goes to the new
// stream); if it turns out to have sent its plan meanwhile (the caller's
// end was a no-op), Restore counts it again.
//
// Pure bookkeeping: no threads, no gRPC, no clock (callers pass `now`).
// Thread-compatible: DataServiceImpl calls it under its mutex.
#ifndef BATCHD_SERVER_STREAM_ADMISSION_TABLE_H_
#define BATCHD_SERVER_STREAM_ADMISSION_TABLE_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/time/time.h"

namespace batchd::server {

class AdmissionTable {
 public:
  // The caller's handle of a stream (DataServiceImpl: its BatchStream*).
  using Handle = const void*;

  struct Limits {
    uint32_t max_open_streams = 1024;            // --max-open-streams
    uint32_t max_streams_per_identity = 512;     // --max-streams-per-identity
    uint32_t max_planless_per_connection = 64;   // --max-planless-streams-per-connection
    absl::Duration open_timeout = absl::Seconds(10);  // --open-timeout
  };

  // A stream to end, and the status to end it with (RESOURCE_EXHAUSTED,
  // saying which limit and whose). `planless`: end it only if its plan has
  // not arrived (then call Restore when it had); else end it regardless.
  struct Ended {
    Handle stream;
    absl::Status status;
    bool planless = true;
    const char* bound = "";  // the metrics' name of the limit
  };
  struct Decision {
    absl::Status status;         // OK: admitted
    const char* refused_by = "";  // the bound that refused it, if any
    std::vector<Ended> ended;    // to end now (also when refused: none)
  };

  explicit AdmissionTable(Limits limits);

  // Admits `stream` from `identity` over `connection`, plan-less from
  // `now`, or says why not. `identity` is for messages ("peer host
  // 127.0.0.1", "token on line 3 of --auth-token-file"), never a secret.
  Decision Admit(Handle stream, const std::string& identity,
                 const std::string& connection, absl::Time now);
  // Its plan arrived (or the stream is ending because of its request): it
  // no longer counts as plan-less. Idempotent; no-op for unknown streams.
  void PlanArrived(Handle stream);
  // A stream ended for a place (Decision::ended, Overdue) had sent its plan
  // after all and goes on: it counts again, as a stream with a plan.
  void Restore(Handle stream);
  // The stream is gone. No-op for unknown streams.
  void Remove(Handle stream);
  // Plan-less streams admitted `open_timeout` or more before `now`; they
  // stop counting (as Decision::ended), Restore if the end was a no-op.
  std::vector<Handle> Overdue(absl::Time now);

  // Streams that count (not ended for a place), of everyone / `identity`.
  size_t open() const { return open_; }
  size_t open(const std::string& identity) const;
  size_t planless() const { return planless_.size(); }
  // Streams known, counting or ending.
  size_t known() const { return entries_.size(); }

 private:
  enum class State { kPlanless, kPlanned, kEnding };
  struct Entry {
    std::string identity;
    std::string connection;
    uint64_t seq = 0;  // admission order
    absl::Time admitted;
    State state = State::kPlanless;
  };
  // Counting streams of one identity, or of one connection, by admission
  // order.
  struct Group {
    std::map<uint64_t, Handle> planless;
    std::map<uint64_t, Handle> planned;
    size_t size() const { return planless.size() + planned.size(); }
  };

  // Stops counting `stream` (state kEnding).
  void Uncount(Handle stream);
  void Count(Handle stream);
  Ended EndPlanless(Handle stream, const char* bound, std::string why);

  const Limits limits_;
  uint64_t next_seq_ = 1;
  size_t open_ = 0;  // entries not kEnding
  absl::flat_hash_map<Handle, Entry> entries_;
  std::map<uint64_t, Handle> planless_;  // every counting plan-less stream
  absl::flat_hash_map<std::string, Group> identities_;   // empty: absent
  absl::flat_hash_map<std::string, Group> connections_;  // empty: absent
};

}  // namespace batchd::server

#endif  // BATCHD_SERVER_STREAM_ADMISSION_TABLE_H_
