// RequestScheduler: decides which daemon is asked for which batch, for a
// client streaming one plan from several daemons. Pure bookkeeping: no
// threads, no gRPC, no clock of its own (callers pass `now`), so its rules
// are unit-tested on constructed event sequences.
//
// The rules (docs/design-choices.md, "Many daemons"):
// - A batch the consumer needs ("wanted") with no live request is sent to
//   the up daemon with spare window whose (outstanding + 1) x recent latency
//   is smallest: the least loaded, relative to its speed.
// - Several daemons may hold a request for the same batch (a hedge, or a
//   late answer after a re-request). The first header to arrive claims the
//   batch; every other copy is cancelled (TakeCancels), and discarded if it
//   arrives anyway. A copy counts against its daemon's window until its last
//   chunk or its rejection (a cancelled copy is answered CANCELLED).
// - A daemon that goes down loses its requests; the wanted ones that no
//   other daemon can still answer are sent again elsewhere ("re-requested").
// - Hedging: a wanted batch with no header after `hedge_factor` x the recent
//   median latency is asked of a second daemon, once; so is one whose
//   daemons have all made no progress (OnProgress) for `progress_timeout`
//   since it was asked for.
//
// Thread-compatible: the Loader calls it under its own mutex.
#ifndef BATCHD_CLIENT_REQUEST_SCHEDULER_H_
#define BATCHD_CLIENT_REQUEST_SCHEDULER_H_

#include <cstdint>
#include <deque>
#include <map>
#include <utility>
#include <vector>

#include "absl/time/time.h"

namespace batchd::client {

class RequestScheduler {
 public:
  using Key = std::pair<uint64_t, uint64_t>;  // (epoch, batch index)

  struct Options {
    // Hedge a batch outstanding longer than this multiple of the recent
    // median latency; 0 disables hedging. Only with two or more daemons up.
    double hedge_factor = 3.0;
    // Never hedge sooner than this after the first request.
    absl::Duration min_hedge_delay = absl::Milliseconds(100);
    // Completed batches the median is taken over; hedging waits until
    // `min_latency_samples` have been seen.
    size_t latency_window = 64;
    size_t min_latency_samples = 8;
    // Hedge a batch with no header whose every copy's daemon has sent
    // nothing for this long since the copy was asked for (a frozen daemon,
    // or one stuck behind a frozen batch); no latency samples needed. Zero
    // disables. Only with two or more daemons up.
    absl::Duration progress_timeout = absl::ZeroDuration();
  };

  // One BatchRequest to send: `indices` of `epoch` to daemon `daemon`.
  struct Request {
    int daemon = -1;
    uint64_t epoch = 0;
    std::vector<uint64_t> indices;
  };

  // What to do with a header that arrived.
  enum class Claim {
    kAccept,   // write this copy's bytes into the batch's slot
    kDiscard,  // read past this copy: the batch is claimed, done or unwanted
  };

  // What a rejected request means for the batch.
  enum class RejectionOutcome {
    kRetryElsewhere,  // the daemon is draining: the batch is asked again
    kFail,            // the request itself is bad: report it to the consumer
    kIgnore,          // nobody waits for this copy any more
  };

  struct DaemonCounters {
    uint64_t requested = 0;      // batch requests sent (hedges included)
    uint64_t served = 0;         // batches whose bytes this daemon delivered
    uint64_t lost = 0;           // requests lost when it went down
    uint64_t hedges = 0;         // hedge requests sent to it
    uint64_t discarded = 0;      // copies that lost, yet arrived whole
    uint64_t cancelled = 0;      // copies that lost and were withdrawn
    absl::Duration latency_ewma; // request to last chunk; zero until known
  };

  explicit RequestScheduler(Options options);

  // Daemons are numbered by AddDaemon(); they start down.
  int AddDaemon();
  // The daemon's stream is open with `window` outstanding batches allowed.
  void DaemonUp(int daemon, uint32_t window);
  // The daemon's stream ended: its requests are gone. Returns the batches
  // whose bytes it was writing (their slots must be reset). Wanted batches
  // that no other daemon can still answer are scheduled again.
  std::vector<Key> DaemonDown(int daemon);
  // The daemon takes no new requests; the ones it holds go on.
  void DaemonDraining(int daemon);
  bool IsUp(int daemon) const;
  // Up and not draining.
  bool Accepting(int daemon) const;
  int accepting_daemons() const;
  uint32_t outstanding(int daemon) const;

  // The consumer needs `key` (it has a slot for it).
  void Want(const Key& key);
  // The consumer no longer needs `key` (StartEpoch() moved on). Copies
  // still outstanding are discarded on arrival.
  void Unwant(const Key& key);

  // Requests to send now: new assignments first, then hedges, grouped per
  // daemon and epoch, indices ascending.
  std::vector<Request> Schedule(absl::Time now);

  // `daemon` sent something (any message) at `now`: its queue moves.
  void OnProgress(int daemon, absl::Time now);
  // `daemon` sent the header of `key`.
  Claim OnHeader(int daemon, const Key& key);
  // `daemon`'s copy of `key` is complete (last chunk). If it was the
  // accepted copy the batch is done: no longer wanted, and other copies are
  // discarded.
  void OnComplete(int daemon, const Key& key, absl::Time now);
  // `daemon` rejected its request for `key` with gRPC code `code`.
  RejectionOutcome OnRejected(int daemon, const Key& key, int code);

  // Copies nobody needs any more (another daemon's header claimed the
  // batch, or the consumer moved on) whose header has not arrived: the
  // CancelBatches to send now, grouped per daemon and epoch. Each copy is
  // returned once; it stays outstanding until its daemon answers.
  std::vector<Request> TakeCancels();
  bool has_cancels() const { return !cancels_.empty(); }
  // Whether `daemon` holds a request for `key` (a header for anything else
  // is a protocol error).
  bool HasRequest(int daemon, const Key& key) const;

  const DaemonCounters& counters(int daemon) const;
  // Totals: wanted batches asked again after a daemon was lost, and hedges.
  uint64_t rerequested() const { return rerequested_; }
  uint64_t hedged() const { return hedged_; }
  // The median latency of recent batches, or zero before any.
  absl::Duration median_latency() const;
  // Wanted batches with no request anywhere (waiting for a daemon).
  size_t unassigned() const;

 private:
  struct Copy {
    int daemon = -1;
    absl::Time sent;
    bool headered = false;  // its header arrived (accepted or discarded)
    bool cancelling = false;  // a cancel is queued or sent for it
  };
  struct Entry {
    bool wanted = false;
    int claimed_by = -1;  // daemon whose bytes fill the slot
    bool hedged = false;
    std::vector<Copy> copies;
  };
  struct Daemon {
    bool up = false;
    bool draining = false;
    uint32_t window = 0;
    uint32_t outstanding = 0;
    absl::Time last_progress = absl::InfinitePast();
    DaemonCounters counters;
  };

  // A copy that can still claim the batch: not yet headered, on a daemon,
  // and not being cancelled.
  static bool HasClaimableCopy(const Entry& entry);
  // Queues a cancel for every copy of `key` whose header has not arrived,
  // except `keep`'s.
  void CancelCopies(const Key& key, Entry& entry, int keep);
  // Removes `daemon`'s copy of `key`; erases the entry once it is neither
  // wanted nor held anywhere.
  void DropCopy(int daemon, const Key& key);
  void EraseIfIdle(std::map<Key, Entry>::iterator it);
  // Whether no daemon holding a copy of `entry` has made progress for
  // `progress_timeout` since that copy was asked for.
  bool NoProgress(const Entry& entry, absl::Time now) const;
  // The accepting daemon with spare window and the least expected wait,
  // excluding daemons that already hold a copy of `entry`; -1 if none.
  int PickDaemon(const Entry& entry) const;

  const Options options_;
  std::vector<Daemon> daemons_;
  std::map<Key, Entry> entries_;
  std::deque<absl::Duration> latencies_;  // recent, oldest first
  // (daemon, epoch) -> indices to cancel; ascending per key.
  std::map<std::pair<int, uint64_t>, std::vector<uint64_t>> cancels_;
  uint64_t rerequested_ = 0;
  uint64_t hedged_ = 0;
};

}  // namespace batchd::client

#endif  // BATCHD_CLIENT_REQUEST_SCHEDULER_H_
