// The figures a Loader keeps about itself and its daemons (Loader::stats()),
// as plain structs: the diagnosis (client/diagnosis.h), the CLI and the
// Python binding read them without depending on the Loader.
#ifndef BATCHD_CLIENT_LOADER_STATS_H_
#define BATCHD_CLIENT_LOADER_STATS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace batchd::client {

// One daemon as the client sees it; in LoaderStats.
struct DaemonStats {
  std::string endpoint;
  // "connecting", "up", "draining", "down", "failed" (not retried: it broke
  // the protocol or refused the plan) or "removed" (gone from DNS).
  std::string state;
  uint64_t requested = 0;  // batch requests sent, hedges included
  uint64_t served = 0;     // batches whose bytes it delivered
  uint64_t lost = 0;       // requests lost when it went down
  uint64_t hedges = 0;     // hedge requests it received
  uint64_t discarded = 0;  // losing copies it sent whole anyway
  uint64_t cancelled = 0;  // losing copies withdrawn before their bytes
  // Smoothed time from request to last chunk; zero until known.
  absl::Duration latency;
  // Why it last went down; OK if it never did.
  absl::Status last_error;
  // How its current stream carries pixels: "shared-memory", "unix" or
  // "tcp".
  std::string transport;
};

// Where one step's time went.
struct LoaderStepTimes {
  // Inside the Next() call that returned the batch.
  absl::Duration waited;
  // From the previous Next() returning to this one being called: the
  // trainer's own work.
  absl::Duration compute;
  // Copying this batch's bytes into its ring buffer (receive thread), plus
  // any copy reported with RecordCopy().
  absl::Duration copy;
};

// A Loader's totals since Create() (Loader::stats()); Since() turns two
// snapshots into an interval.
struct LoaderStats {
  // Steps: Next() calls that returned a batch; their images and pixel
  // bytes.
  uint64_t batches = 0;
  uint64_t images = 0;
  uint64_t bytes = 0;
  // Time spent inside Next() (waiting for input), all calls.
  absl::Duration waited;
  // The part of `waited` spent in the first Next() of each epoch (after
  // StartEpoch() or Restore()), while the pipeline fills.
  absl::Duration startup_waited;
  // Time between a Next() returning and the next call (the trainer's
  // compute), all calls.
  absl::Duration compute;
  // Time the receive thread spent copying batch bytes into ring buffers,
  // plus copies reported with RecordCopy() (e.g. host to device).
  absl::Duration copy;
  // Pixel bytes received from the daemon, including batches no longer
  // wanted after a StartEpoch().
  uint64_t received_bytes = 0;
  // Time since Create() (for an interval: its length).
  absl::Duration wall;
  // Batches asked again after the daemon holding them was lost, and
  // hedge requests sent (totals, differenced by Since()).
  uint64_t rerequested = 0;
  uint64_t hedged = 0;
  // Streams dropped because a batch on them received nothing for
  // LoaderOptions::batch_progress_timeout (total, differenced by Since()).
  uint64_t progress_cancels = 0;
  // TrainerReports sent to the daemons, and those a daemon refused
  // (totals, differenced by Since()).
  uint64_t reports_sent = 0;
  uint64_t reports_rejected = 0;
  // Ring slots in use now (not differenced), and how often auto_prefetch
  // grew the ring (differenced).
  uint32_t prefetch = 0;
  uint64_t prefetch_grows = 0;
  // How pixels arrive now (not differenced): "shared-memory" (the
  // daemon writes them into the ring), or bytes over "unix" or "tcp";
  // empty before the first daemon answered. `transport_note` says why
  // shared memory is not in use, when it is not.
  std::string transport;
  std::string transport_note;
  // Per daemon, now (not differenced by Since()).
  std::vector<DaemonStats> daemons;
  // The last step (not differenced by Since()).
  LoaderStepTimes last_step;

  // `*this` minus `earlier`: the figures of the interval between them.
  LoaderStats Since(const LoaderStats& earlier) const;
  // Shares of wall time, 0..1 (0 when wall is 0).
  double waited_fraction() const;
  // Waited share once the pipeline is full: `waited` and `wall` without
  // `startup_waited`. The diagnosis uses this, so that a short interval
  // is not called input-bound for its first batch alone.
  double steady_waited_fraction() const;
  double compute_fraction() const;
  double copy_fraction() const;
  // Rates over wall time, per second.
  double batches_per_second() const;
  double images_per_second() const;
  double bytes_per_second() const;
  double received_bytes_per_second() const;
};

}  // namespace batchd::client

#endif  // BATCHD_CLIENT_LOADER_STATS_H_
