// DaemonSet: the daemons one Loader streams from, and the ring their batches
// land in. A thin composition: it owns the gRPC side (a channel and one
// DaemonStream per daemon), the ring, and a supervisor thread, and applies
// the rules of pure bookkeeping classes, each unit-tested on its own:
//   DaemonRoster      the daemons and their connections: endpoints, DNS
//                     re-resolution, reconnect backoff, "every daemon failed"
//   DaemonWatch       supervision: stalls, the progress deadline, how a
//                     stream's end counts, the unavailable clock
//   RequestScheduler  which daemon is asked for which batch; hedging
//   BatchReceipts     receiving: each stream's batch in progress, the
//                     protocol's rules for headers and chunks
//   PrefetchGrowth    auto_prefetch's rule for growing the ring
// It is every stream's StreamSink: headers and chunks go into the SlotRing's
// slots (daemon_set_sink.cc). The supervisor (daemon_set_supervisor.cc)
// reconnects lost daemons, cancels silent or frozen streams, hedges, looks
// the DNS name up again every `resolve_interval`, sends TrainerReports and
// grows the ring.
//
// The consumer side (client/loader.cc) asks it for the window's batches
// (StartEpoch, TakeNext, Release) and reads the trainer's step times back
// through a TrainerClock.
//
// Thread-safety: every public method may be called from any thread; one
// mutex guards the bookkeeping, the streams and the ring. Shutdown() stops
// the streams and joins every thread; it must not run on a reader thread.
#ifndef BATCHD_CLIENT_DAEMON_SET_H_
#define BATCHD_CLIENT_DAEMON_SET_H_

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "batchd/v1/data.pb.h"
#include "client/batch_receipts.h"
#include "client/daemon_roster.h"
#include "client/daemon_stream.h"
#include "client/daemon_watch.h"
#include "client/loader_options.h"
#include "client/loader_stats.h"
#include "client/prefetch_growth.h"
#include "client/request_scheduler.h"
#include "client/shared_ring.h"
#include "client/slot_ring.h"

namespace batchd::client {

// The trainer's step times, as the consumer measures them; read by the
// supervisor (without DaemonSet's lock) for TrainerReports and
// auto_prefetch.
class TrainerClock {
 public:
  struct Reading {
    // Inside Next() and between Next() calls, counting the call or the
    // compute in progress at `now`.
    absl::Duration waited;
    absl::Duration compute;
    // Steps once the pipeline is full (each epoch's first left out), those
    // that waited, and their wait; completed calls only.
    uint64_t steady_steps = 0;
    uint64_t waited_steps = 0;
    absl::Duration steady_waited;
  };
  virtual ~TrainerClock() = default;
  virtual Reading Read(absl::Time now) const = 0;
};

// ---- The set's rules, as pure functions (daemon_set_test.cc) ----

// The window to ask each daemon for: `prefetch`, or with auto_prefetch as
// many slots as `auto_prefetch_max_bytes` holds of the plan's largest
// batches (batch_size x size x size x 3 bytes), between `prefetch` and 1024.
uint32_t AskedWindow(const LoaderOptions& options);

class DaemonSet : public StreamSink {
 public:
  // `clock` must outlive this object.
  DaemonSet(LoaderOptions options, const TrainerClock* clock);
  ~DaemonSet() override;
  DaemonSet(const DaemonSet&) = delete;
  DaemonSet& operator=(const DaemonSet&) = delete;

  // Connects to every daemon, waits for the first to open the plan, builds
  // the ring and starts the supervisor. Blocks up to `connect_timeout`.
  // Errors as Loader::Create.
  absl::Status Start() ABSL_LOCKS_EXCLUDED(mu_);
  // Half-closes the streams when nothing is owed (cancels them otherwise)
  // and joins every thread. Idempotent.
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);
  // Makes the error sticky CANCELLED and cancels every stream.
  void Cancel() ABSL_LOCKS_EXCLUDED(mu_);

  // The first daemon's answer to the plan. REQUIRES: Start() returned OK.
  const batchd::v1::PlanOpened& opened() const { return opened_; }
  // The plan, as the loader was created with it.
  const batchd::v1::Plan& plan() const { return options_.plan; }
  // Slots in use.
  uint32_t window() const ABSL_LOCKS_EXCLUDED(mu_);
  // (epoch, next batch) of the consumer.
  std::pair<uint64_t, uint64_t> position() const ABSL_LOCKS_EXCLUDED(mu_);

  // Moves the window to (`epoch`, `first_batch`) and asks for it.
  // INVALID_ARGUMENT for a position outside the plan; the sticky error.
  absl::Status StartEpoch(uint64_t epoch, uint64_t first_batch)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Blocks until the batch at the consumer's position is ready, then
  // leases its slot and advances. Errors as Loader::Next.
  absl::StatusOr<SlotRing::Lease> TakeNext() ABSL_LOCKS_EXCLUDED(mu_);
  // A leased slot comes back; its place is asked for at once.
  void Release(int slot) ABSL_LOCKS_EXCLUDED(mu_);

  // Adds the receiving side's figures to `stats`: received bytes and copy
  // time, reports, ring size and growth, transport, per-daemon view.
  void AddStats(LoaderStats& stats) const ABSL_LOCKS_EXCLUDED(mu_);
  // The channel of the daemon that served the most batches (the one that
  // speaks for the run in a diagnosis); null when there is none.
  std::shared_ptr<grpc::Channel> BusiestChannel() const
      ABSL_LOCKS_EXCLUDED(mu_);

  // StreamSink, on each daemon's reader thread (daemon_set_sink.cc).
  absl::Status OnResponse(int daemon,
                          batchd::v1::StreamResponse& response) override;
  absl::StatusOr<uint8_t*> ChunkDestination(
      int daemon, const common::ChunkInfo& info) override;
  absl::Status OnChunk(int daemon, const common::ChunkInfo& info,
                       absl::Duration copy) override;
  void OnStreamEnd(int daemon, const grpc::Status& status,
                   const absl::Status& protocol_error) override;

 private:
  using Key = RequestScheduler::Key;
  using DaemonState = DaemonRoster::State;

  // The gRPC side of one daemon; its bookkeeping is in the roster, the
  // watch, the scheduler and the receipts under the same number.
  struct Daemon {
    std::shared_ptr<grpc::Channel> channel;
    std::shared_ptr<DaemonStream> stream;  // null while down
    bool opened = false;  // this stream has answered the plan
    // The shared-memory ring attached to its current stream; null on the
    // bytes path.
    std::shared_ptr<SharedRing> ring;
    // Its batches the trainer took since the last TrainerReport.
    uint64_t consumed_since_report = 0;
  };

  // A request to write on a stream once mu_ is released.
  struct Outgoing {
    std::shared_ptr<DaemonStream> stream;
    batchd::v1::StreamRequest request;
  };

  // ---- daemon_set.cc: starting, connecting, the set's health ----
  absl::Status AwaitFirstOpened() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The error when no daemon opened the plan within connect_timeout.
  absl::Status NotOpenedError() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Numbers a daemon at `endpoint` in every part of the set; not connected.
  int AddDaemonLocked(const std::string& endpoint)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Opens a new stream to `daemon` (the old one, if any, must have ended).
  void ConnectLocked(int daemon) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `daemon` works again: its failures are forgiven and the unavailable
  // clock stops.
  void MarkRecoveredLocked(int daemon) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Starts the unavailable clock at `now` unless it runs or some daemon
  // takes requests.
  void StartUnavailableClockLocked(absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // ---- daemon_set_window.cc: the requests that go out ----
  // Reserves slots for the window's batches, lets the scheduler assign
  // them, and sends without holding mu_.
  void RequestMore() ABSL_LOCKS_EXCLUDED(mu_);
  // The cancels and requests due now; grants their slots.
  std::vector<Outgoing> ScheduleLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static void Send(std::vector<Outgoing> outgoing);

  // ---- daemon_set_supervisor.cc: the supervisor thread ----
  void SupervisorLoop() ABSL_LOCKS_EXCLUDED(mu_);
  // One tick's checks of `daemon` at `now`: ends its finished stream into
  // `finished`, reconnects it, cancels it if silent or frozen, closes it
  // once drained.
  void SuperviseLocked(int daemon, absl::Time now,
                       std::vector<std::shared_ptr<DaemonStream>>& finished)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Looks the DNS name up again and adds or drains daemons to match.
  void Resolve() ABSL_LOCKS_EXCLUDED(mu_);
  // With auto_prefetch, how many slots to add now; 0 most of the time.
  size_t PrefetchGrowthLocked(absl::Time now,
                              const TrainerClock::Reading& trainer)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Puts `count` more slots in use (allocating without mu_), then asks.
  void GrowRing(size_t count) ABSL_LOCKS_EXCLUDED(mu_);
  // The TrainerReports due at `now`, one per daemon streaming.
  std::vector<Outgoing> ReportsLocked(absl::Time now,
                                      const TrainerClock::Reading& trainer)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sets the sticky error once no daemon can serve any more.
  void CheckAllFailedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // ---- daemon_set_sink.cc: one stream's responses ----
  // Attaches a shared-memory ring for a stream whose `opened` carries an
  // invitation; blocks on the side channel, so it runs without mu_.
  // nullptr, and `why` set, when the stream is to carry bytes.
  std::shared_ptr<SharedRing> AttachRing(const batchd::v1::PlanOpened& opened,
                                         absl::Status* why)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status HandleOpened(int daemon, const batchd::v1::PlanOpened& opened,
                            std::shared_ptr<SharedRing> ring,
                            const absl::Status& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records the transport in use and, once per reason, logs why shared
  // memory is not.
  void NoteTransportLocked(const absl::Status& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status HandleHeader(int daemon, batchd::v1::BatchHeader& header)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status HandleRejected(int daemon,
                              const batchd::v1::RequestRejected& rejected)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The receipt of `daemon` is complete.
  void FinishReceiptLocked(int daemon) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Holds the reader thread back as a link of max_receive_bytes_per_second.
  void Pace(int daemon, uint64_t bytes) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status ProtocolError(int daemon, absl::string_view what) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const LoaderOptions options_;
  const TrainerClock* const clock_;
  const absl::Time created_;
  EndpointSpec spec_;  // constant after Start() begins
  // Whether streams offer shared memory: one endpoint, on this host, and
  // LoaderOptions::shared_memory. Constant after Start() begins.
  bool offer_shared_memory_ = false;
  ChannelSecurity security_;  // constant after Start() begins
  const std::unique_ptr<BufferAllocator> owned_allocator_;  // may be null
  BufferAllocator* const allocator_;
  batchd::v1::PlanOpened opened_;  // written once, before opened_received_
  std::thread supervisor_;

  mutable absl::Mutex mu_;
  // One number per daemon, the same in each of these.
  DaemonRoster roster_ ABSL_GUARDED_BY(mu_);
  DaemonWatch watch_ ABSL_GUARDED_BY(mu_);
  RequestScheduler scheduler_ ABSL_GUARDED_BY(mu_);
  BatchReceipts receipts_ ABSL_GUARDED_BY(mu_);
  std::vector<Daemon> daemons_ ABSL_GUARDED_BY(mu_);
  SlotRing ring_ ABSL_GUARDED_BY(mu_);
  PrefetchGrowth growth_ ABSL_GUARDED_BY(mu_);
  absl::Time next_resolve_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  bool opened_received_ ABSL_GUARDED_BY(mu_) = false;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  // Wakes the supervisor early (a daemon went down or a slot came free).
  bool kick_ ABSL_GUARDED_BY(mu_) = false;
  // Cancel() was called: TakeNext() returns CANCELLED from then on.
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  // Sticky: the loader cannot go on. Once set, nothing is requested.
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  // Slots of a shared-memory ring: the ring's largest size, fixed by the
  // first `opened`; 0 before.
  uint32_t ring_slots_ ABSL_GUARDED_BY(mu_) = 0;
  // The receiving side's figures (LoaderStats fields of the same names);
  // bytes and copy time are the receipts'.
  uint64_t reports_sent_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t reports_rejected_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t prefetch_grows_ ABSL_GUARDED_BY(mu_) = 0;
  std::string transport_ ABSL_GUARDED_BY(mu_);
  std::string transport_note_ ABSL_GUARDED_BY(mu_);
  // The last reason logged for streaming bytes instead of shared memory.
  std::string logged_transport_note_ ABSL_GUARDED_BY(mu_);
  // Trainer figures at the last TrainerReport, and when the next is due.
  absl::Duration reported_wait_ ABSL_GUARDED_BY(mu_);
  absl::Duration reported_compute_ ABSL_GUARDED_BY(mu_);
  absl::Time next_report_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace batchd::client

#endif  // BATCHD_CLIENT_DAEMON_SET_H_
