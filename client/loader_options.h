// LoaderOptions: everything a Loader (client/loader.h) is told, with the
// defaults every binding reads.
#ifndef BATCHD_CLIENT_LOADER_OPTIONS_H_
#define BATCHD_CLIENT_LOADER_OPTIONS_H_

#include <cstdint>
#include <functional>
#include <limits>
#include <string>

#include "absl/time/time.h"
#include "batchd/v1/data.pb.h"
#include "client/buffer.h"
#include "client/channel_security.h"
#include "client/endpoints.h"

namespace batchd::client {

struct LoaderOptions {
  // The daemons: "host:port" or "unix:/path", a comma-separated list of
  // them, or one "dns:///name:port" standing for every address the name
  // resolves to (client/endpoints.h). All must serve the same dataset.
  std::string endpoint;
  // What to stream; validated by the daemon.
  batchd::v1::Plan plan;
  // Same-host shared memory (docs/design-choices.md): with one endpoint
  // that is a unix: socket or a loopback address, offer the daemon the
  // ring as a sealed memfd, so that its workers decode straight into the
  // slots and only headers cross the stream. When the daemon declines or
  // the side channel fails, the loader streams bytes and logs one line
  // saying why; Stats::transport says which is in use. false: bytes always.
  bool shared_memory = true;
  // TLS and the bearer token, for every daemon (client/channel_security.h).
  // The default is plaintext with $BATCHD_TOKEN, if set.
  SecurityOptions security;
  // Requested window: how many batches may be outstanding, and so the number
  // of ring slots. With one daemon it is capped at the daemon's grant; 0
  // takes the daemon's default (times the number of daemons at start).
  uint32_t prefetch = 4;
  // Grow the ring beyond `prefetch` while the trainer's waits are bursty
  // and the daemons keep up on average: once a second, by half (at least
  // one slot), when the trainer waited more than 5 % of the time but at
  // most half of its steps waited at all. Never beyond
  // `auto_prefetch_max_bytes` of slots nor the daemons' granted windows
  // (the plan asks for that many); never shrinks. docs/autoscaling.md.
  bool auto_prefetch = false;
  uint64_t auto_prefetch_max_bytes = uint64_t{1} << 30;
  // Where slots come from; nullptr means 64-byte aligned heap memory. Not
  // owned; must outlive the Loader and every Batch it returned.
  BufferAllocator* allocator = nullptr;
  // Create() waits this long for the first daemon to open the plan. A
  // daemon that refuses the stream with RESOURCE_EXHAUSTED (it is full, or
  // this caller holds its share of it) is asked again after the reconnect
  // backoff below until then; Create() then fails with its message.
  absl::Duration connect_timeout = absl::Seconds(10);
  // Called on the consumer thread when Next() reaches the end of an epoch,
  // with the epoch's one-line diagnosis (client/diagnosis.h), e.g.
  // "epoch 0: input-bound: waited 43 % of wall time; ...". nullptr reports
  // nothing; epoch_diagnosis() has the line either way.
  std::function<void(const std::string& line)> report;
  // Once every remaining batch of the epoch has been requested, free slots
  // ask for the first batches of the next epoch, so that StartEpoch(epoch +
  // 1) finds them built or on their way and the trainer does not wait for
  // the pipeline to fill at every epoch. A batch is a pure function of
  // (plan, epoch, index), so they are the batches it will get; a StartEpoch
  // elsewhere drops them. The cost: up to `window` batches built for
  // nothing after the last epoch, unless `last_epoch` says which it is.
  bool next_epoch_prefetch = true;
  // The last epoch this trainer will start, when it knows: nothing of a
  // later epoch is read ahead, so the daemons build nothing for nothing at
  // the end of the run and their counts are the run's. The default (and
  // anything beyond 2^32-1) sets no limit.
  uint64_t last_epoch = std::numeric_limits<uint64_t>::max();
  // Test and diagnostic knob: paces each receiving thread to at most this
  // many pixel bytes per second, as a slow network link would; 0 (the
  // default) does not pace. Used to rehearse the network-bound diagnosis.
  uint64_t max_receive_bytes_per_second = 0;
  // How often the trainer's wait and compute times go to each daemon
  // (batchd.v1.TrainerReport), which sizes its workers by them under
  // --workers auto and shows them in its status; 0 sends none.
  absl::Duration report_interval = absl::Seconds(1);

  // ---- Many daemons (docs/design-choices.md, "Many daemons") ----
  // How often a "dns:///" name is looked up again. A new address gets
  // requests after the next lookup; one that disappeared is drained (its
  // outstanding batches finish, it gets no new ones).
  absl::Duration resolve_interval = absl::Seconds(10);
  // Looks names up; nullptr uses the system resolver. Tests inject
  // addresses here.
  Resolver resolver;
  // A daemon with batches outstanding that sends nothing for this long is
  // marked down and its batches are asked of the others. Longer than any
  // healthy batch takes (a 4096-image batch on one worker: ~5 s here).
  absl::Duration stall_timeout = absl::Seconds(20);
  // The per-batch progress deadline. A batch whose bytes have started to
  // arrive (its header came) and that then receives nothing for this long
  // means its daemon froze mid-batch, and everything behind it on that
  // stream waits too (a stream carries one batch at a time): the stream is
  // cancelled, its batches are asked of the other daemons at once (the
  // frozen daemon's late bytes have no stream left to land on), and it is
  // reconnected after the backoff. A batch asked for but not started,
  // whose daemon has sent nothing for this long, is also asked of a second
  // daemon (a hedge: the first header wins). Only with another daemon up to
  // ask; a single daemon is left to `stall_timeout`. Longer than a 4 MiB
  // chunk takes on the slowest link expected (5 s: ~0.8 MB/s); 0 disables.
  absl::Duration batch_progress_timeout = absl::Seconds(5);
  // When no daemon has been up for this long, Next() fails with UNAVAILABLE
  // naming each daemon and its last error. Long enough for a daemon's
  // restart; short enough that a trainer does not hang silently.
  absl::Duration unavailable_timeout = absl::Seconds(30);
  // Hedging: a batch outstanding longer than this multiple of the recent
  // median latency is asked of a second daemon too; the first answer wins.
  // 0 disables; there is never hedging with a single daemon up.
  double hedge_factor = 3.0;
  // Reconnecting to a down daemon, or one that refused the stream with
  // RESOURCE_EXHAUSTED: exponential backoff from `min` to `max`, with
  // +-20 % jitter so that many clients do not retry in step.
  absl::Duration reconnect_backoff_min = absl::Milliseconds(100);
  absl::Duration reconnect_backoff_max = absl::Seconds(5);
};

}  // namespace batchd::client

#endif  // BATCHD_CLIENT_LOADER_OPTIONS_H_
