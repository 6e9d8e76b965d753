// DaemonWatch: the supervisor's rules for one client's daemons, as
// bookkeeping. It notes when each daemon last sent anything and decides
// when a stream is to be cancelled: silence with batches owed
// (`stall_timeout`), or a batch frozen mid-send while another daemon could
// take it (`progress_timeout`, LoaderOptions::batch_progress_timeout). It
// judges how a stream's end counts (JudgeStreamEnd, with the stall it
// caused), and runs the set's unavailable clock: the time since no daemon
// took requests, which fails the loader after `unavailable_timeout`.
// Hedging slow batches is RequestScheduler's rule; the supervisor thread
// that applies all of them is DaemonSet's.
//
// Pure bookkeeping: no threads, no gRPC calls, no clock of its own (callers
// pass `now`), so the rules are unit-tested on constructed event sequences
// (daemon_watch_test.cc).
//
// Daemons are numbered by Add(), in step with DaemonRoster's.
// Thread-compatible: DaemonSet calls it under its mutex.
#ifndef BATCHD_CLIENT_DAEMON_WATCH_H_
#define BATCHD_CLIENT_DAEMON_WATCH_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/channel_security.h"
#include "client/daemon_roster.h"
#include "grpcpp/support/status.h"

namespace batchd::client {

// What the end of a daemon's stream means for it.
struct StreamEndVerdict {
  using Next = DaemonRoster::Next;
  Next next = Next::kReconnect;
  // Why, for DaemonStats::last_error and the loader's errors.
  absl::Status error;
};
// The stream to `endpoint` ended with gRPC's `status`, or with a sink's
// `protocol_error`; `stalled`: the supervisor cancelled it for silence;
// `owed`: the batches it still owed; `in_dns`: still listed; `opened`:
// the daemon had answered its plan (a RESOURCE_EXHAUSTED before that is a
// refused open, asked again after the backoff; after it, the daemon's
// verdict).
StreamEndVerdict JudgeStreamEnd(absl::string_view endpoint,
                                const grpc::Status& status,
                                const absl::Status& protocol_error,
                                bool stalled, uint32_t owed, bool in_dns,
                                absl::Duration stall_timeout,
                                const ChannelSecurity& security,
                                bool opened);

class DaemonWatch {
 public:
  struct Options {
    // Silence with batches owed this long ends the stream.
    absl::Duration stall_timeout = absl::Seconds(20);
    // Nothing of a batch in progress this long ends the stream, if another
    // daemon takes requests; zero disables.
    absl::Duration progress_timeout = absl::Seconds(5);
    // No daemon taking requests this long fails the loader.
    absl::Duration unavailable_timeout = absl::Seconds(30);
  };

  // The unavailable clock runs from `unavailable_since` (no daemon is up
  // yet).
  DaemonWatch(Options options, absl::Time unavailable_since);

  // Numbers a new daemon.
  int Add();
  // A stream to `daemon` opens at `now`: it has said nothing yet, and
  // nothing was cancelled.
  void Connecting(int daemon, absl::Time now);
  // `daemon` sent something at `now`.
  void OnMessage(int daemon, absl::Time now) {
    daemons_[daemon].last_message = now;
  }
  // `daemon`'s reader thread, as a link of `bytes_per_second` (> 0), took
  // `bytes` at `now`: returns when the link is free again (the reader waits
  // until then). That time is not the daemon's silence.
  absl::Time Pace(int daemon, absl::Time now, uint64_t bytes,
                  uint64_t bytes_per_second);

  // What the supervisor knows of one daemon's stream at a tick.
  struct Facts {
    // Up, with a stream open.
    bool streaming = false;
    // Batches it owes (RequestScheduler::outstanding).
    uint32_t owed = 0;
    // Daemons other than this one that take requests.
    int others_accepting = 0;
    // The batch being received, if any: (epoch, index), bytes in, of.
    bool receiving = false;
    uint64_t epoch = 0, batch_index = 0;
    uint64_t received = 0, total = 0;
  };
  // Whether `daemon`'s stream (to `endpoint`) is to be cancelled at `now`:
  // silent for `stall_timeout` with batches owed, or the batch in progress
  // silent for `progress_timeout` while another daemon takes requests.
  // Each stream is cancelled once; the reason is kept for JudgeEnd.
  bool ShouldCancel(int daemon, absl::string_view endpoint, absl::Time now,
                    const Facts& facts);
  bool stalled(int daemon) const { return daemons_[daemon].stalled; }

  // JudgeStreamEnd for `daemon`'s stream, counting a stall this watch
  // caused; when it was the progress deadline, the error says so.
  StreamEndVerdict JudgeEnd(int daemon, absl::string_view endpoint,
                            const grpc::Status& status,
                            const absl::Status& protocol_error, uint32_t owed,
                            bool in_dns, const ChannelSecurity& security,
                            bool opened) const;

  // The unavailable clock: starts at `now` if `accepting` (daemons taking
  // requests) is 0 and it does not run; stops when a daemon recovers.
  void NoteAccepting(int accepting, absl::Time now);
  void Recovered() { unavailable_since_ = absl::InfiniteFuture(); }
  // Whether the clock ran past `unavailable_timeout` at `now`.
  bool Unavailable(absl::Time now) const;

  // Streams cancelled for the progress deadline (LoaderStats).
  uint64_t progress_cancels() const { return progress_cancels_; }

 private:
  struct Daemon {
    absl::Time last_message;
    // When its paced link is free again.
    absl::Time link_free = absl::InfinitePast();
    // We cancelled its stream for silence.
    bool stalled = false;
    // Why, when it was the progress deadline (the stall timeout's message
    // otherwise).
    absl::Status stall_error;
  };

  const Options options_;
  std::vector<Daemon> daemons_;  // by number
  // Since when no daemon took requests (InfiniteFuture while one does).
  absl::Time unavailable_since_;
  uint64_t progress_cancels_ = 0;
};

}  // namespace batchd::client

#endif  // BATCHD_CLIENT_DAEMON_WATCH_H_
