#include "client/loader.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "batchd/v1/data.grpc.pb.h"
#include "client/daemon_status.h"
#include "client/daemon_stream.h"
#include "client/diagnosis.h"
#include "client/request_scheduler.h"
#include "client/shared_ring.h"
#include "common/chunk_codec.h"
#include "common/local_address.h"
#include "common/malloc_tuning.h"

namespace batchd::client {

using ::batchd::v1::BatchHeader;
using ::batchd::v1::PlanOpened;
using ::batchd::v1::RequestRejected;
using ::batchd::v1::StreamRequest;
using ::batchd::v1::StreamResponse;

namespace internal {
namespace {

// How long the destructor waits for a clean end of the streams after
// half-closing them before cancelling.
constexpr absl::Duration kCloseGrace = absl::Seconds(2);
// How long a diagnosis waits for a daemon's status.
constexpr absl::Duration kStatusTimeout = absl::Seconds(2);
// The supervisor's period: stall, hedge, reconnect and deadline checks.
constexpr absl::Duration kSupervisorTick = absl::Milliseconds(20);
// A step that spent longer than this in Next() waited for its batch; less
// is the cost of the call itself.
constexpr absl::Duration kWaitedStep = absl::Milliseconds(1);
// auto_prefetch looks at the steps this often, and needs this many in the
// interval to judge.
constexpr absl::Duration kPrefetchLookInterval = absl::Seconds(1);
constexpr uint64_t kPrefetchLookMinSteps = 4;
// A chunk is at most 4 MiB (the protocol); discarded copies are read into a
// scratch buffer of this size at most.
constexpr size_t kMaxChunkBytes = size_t{4} << 20;

absl::Status FromGrpc(const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

std::string BatchName(uint64_t epoch, uint64_t index) {
  return absl::StrCat("batch ", index, " of epoch ", epoch);
}

// Whether a stream that ended with `code` may be tried again: the daemon
// went away or dropped the connection. Other codes are the daemon's verdict
// on the plan or the client (INVALID_ARGUMENT, RESOURCE_EXHAUSTED, ...).
// The window to ask each daemon for: `prefetch`, or with auto_prefetch as
// many slots as its memory cap holds (batches of batch_size x size x size x
// 3 bytes, the most a plan's batch can be), which the ring may grow into.
uint32_t AskedWindow(const LoaderOptions& options) {
  if (!options.auto_prefetch) return options.prefetch;
  const batchd::v1::Pipeline& pipeline = options.plan.pipeline();
  const uint64_t size = pipeline.has_eval() ? pipeline.eval().size()
                                            : pipeline.train().size();
  const uint64_t batch_bytes =
      std::max<uint64_t>(1, uint64_t{options.plan.batch_size()} * size * size * 3);
  const uint64_t slots = options.auto_prefetch_max_bytes / batch_bytes;
  return static_cast<uint32_t>(std::clamp<uint64_t>(
      slots, std::max<uint32_t>(1, options.prefetch), 1024));
}

bool IsRetryable(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::CANCELLED:
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
    case grpc::StatusCode::ABORTED:
    case grpc::StatusCode::INTERNAL:
    case grpc::StatusCode::UNKNOWN:
      return true;
    default:
      return false;
  }
}

// How long the shared-memory side channel may take to answer.
constexpr absl::Duration kAttachTimeout = absl::Seconds(5);

// The ring: `window` slots in use at first, and the most auto_prefetch may
// grow it to.
struct RingSize {
  uint64_t window = 0;
  uint64_t most = 0;
};
RingSize SizeRing(const LoaderOptions& options, const PlanOpened& opened,
                  uint64_t daemons) {
  // With one daemon more slots than its window would never fill; with
  // several the window is the client's choice.
  const uint64_t granted = uint64_t{opened.window()} * daemons;
  RingSize ring;
  ring.window = std::min<uint64_t>(
      options.prefetch > 0 ? options.prefetch : granted, granted);
  ring.most = ring.window;
  if (options.auto_prefetch && opened.max_batch_bytes() > 0) {
    ring.most = std::max<uint64_t>(
        ring.window,
        std::min<uint64_t>(
            options.auto_prefetch_max_bytes / opened.max_batch_bytes(),
            granted));
  }
  return ring;
}

// Same shape, sizes and counts: the daemons serve the same plan.
bool SamePlan(const PlanOpened& a, const PlanOpened& b) {
  return a.batches_per_epoch() == b.batches_per_epoch() &&
         a.samples_per_epoch() == b.samples_per_epoch() &&
         a.max_batch_bytes() == b.max_batch_bytes() &&
         std::equal(a.shape().begin(), a.shape().end(), b.shape().begin(),
                    b.shape().end());
}

}  // namespace

// Everything a Loader and its Batches share: the daemons and their streams,
// the request scheduler, the supervisor thread and the ring. Owned jointly
// (shared_ptr) by the Loader and the Batches it returned, so a Batch may
// outlive its Loader; Shutdown() (called by ~Loader) stops the streams and
// joins every thread.
//
// Slot life cycle:
//   kFree --RequestMore--> kRequested --header--> kReceiving --last chunk--> kReady --Next--> kLeased
//                          kRequested --rejected--> kFailed --Next--> kFree
//   kReceiving --its daemon lost--> kRequested (bytes start over)
//   kLeased --Batch released--> kFree
// A kRequested slot whose batch is no longer wanted (StartEpoch moved on) is
// freed at once (copies still on their way are discarded as they arrive); a
// kReceiving one is `orphaned` and freed when its batch completes, unless
// a later request asks for the same batch and adopts it. Slots holding
// batches the new range wants (the next epoch's, read ahead) are kept.
class LoaderCore : public StreamSink {
 public:
  explicit LoaderCore(LoaderOptions options)
      : options_(std::move(options)),
        created_(absl::Now()),
        scheduler_(RequestScheduler::Options{
            /*hedge_factor=*/options_.hedge_factor}),
        jitter_(static_cast<uint32_t>(absl::ToUnixNanos(created_))) {}
  ~LoaderCore() override { Shutdown(); }

  absl::Status Open();
  void Shutdown();
  void Cancel();

  const PlanOpened& opened() const { return opened_; }
  uint32_t window() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return active_slots_;
  }

  absl::Status StartEpoch(uint64_t epoch, uint64_t first_batch);
  // Next() with stall accounting around NextImpl().
  absl::StatusOr<Batch> Next(std::shared_ptr<LoaderCore> self);
  LoaderState state() const;
  Loader::Stats stats() const;
  void RecordCopy(absl::Duration duration);
  Diagnosis Diagnose();
  std::string epoch_diagnosis() const;
  void ReleaseSlot(int slot);

  // StreamSink, on each daemon's reader thread.
  absl::Status OnResponse(int daemon, StreamResponse& response) override;
  absl::StatusOr<uint8_t*> ChunkDestination(
      int daemon, const common::ChunkInfo& info) override;
  absl::Status OnChunk(int daemon, const common::ChunkInfo& info,
                       absl::Duration copy) override;
  void OnStreamEnd(int daemon, const grpc::Status& status,
                   const absl::Status& protocol_error) override;

 private:
  // kInactive: beyond the ring's current size (auto_prefetch may grow it).
  enum class SlotState {
    kInactive, kFree, kRequested, kReceiving, kReady, kFailed, kLeased
  };
  using Key = RequestScheduler::Key;

  struct Slot {
    // The slot's memory on the bytes path: set, under mu_, before the slot
    // is first granted to a bytes stream; constant then. While kReceiving
    // its bytes belong to the receiving daemon's reader thread; while
    // kLeased to the Batch.
    std::unique_ptr<HostBuffer> buffer;
    // The rest is protected by mu_.
    // Over shared memory: the ring of the stream it was last granted to,
    // and where in it this slot's bytes are; bound anew at every grant
    // (ScheduleLocked), so a slot is never reused in a stream that ended
    // while the daemon may still write it.
    std::shared_ptr<SharedRing> ring;
    uint8_t* shared = nullptr;
    uint8_t* data() const { return shared != nullptr ? shared : buffer->data(); }
    SlotState state = SlotState::kFree;
    Key key{0, 0};
    // kReceiving, or kRequested from a shared-memory stream (which owns
    // the slot's bytes until it answers): no longer wanted; freed when
    // the batch completes unless asked for again.
    bool orphaned = false;
    int daemon = -1;        // kReceiving/kReady: who sent its bytes
    BatchHeader header;     // kReceiving/kReady
    absl::Duration copy;    // copying this batch's chunks so far
    absl::Status error;     // kFailed: the rejection
  };

  enum class DaemonState { kConnecting, kUp, kDown, kFailed, kRemoved };

  // What one daemon's reader thread is receiving: a batch's bytes into a
  // slot, or a losing copy read past into `scratch`.
  struct Receipt {
    bool active = false;
    Key key{0, 0};
    int slot = -1;  // -1: discarding
    uint64_t total = 0;
    uint64_t received = 0;
  };

  struct Daemon {
    std::string endpoint;
    std::shared_ptr<grpc::Channel> channel;
    std::shared_ptr<DaemonStream> stream;  // null while down
    DaemonState state = DaemonState::kConnecting;
    absl::Status last_error;
    // Stream failures since it last delivered a batch (or was up with
    // nothing asked of it): the reconnect backoff grows with them, and
    // while they are not 0 a reconnect does not count as recovery.
    int failures = 0;
    absl::Time retry_at = absl::InfinitePast();
    absl::Time last_message;  // for the stall check
    bool stalled = false;     // we cancelled it for silence
    bool in_dns = true;       // false: drain, then remove
    bool opened = false;      // this stream has answered the plan
    Receipt receipt;
    std::vector<uint8_t> scratch;
    // The shared-memory ring attached to its current stream; null on the
    // bytes path.
    std::shared_ptr<SharedRing> ring;
    absl::Time link_free = absl::InfinitePast();  // paced link
    // Its batches the trainer took since the last TrainerReport.
    uint64_t consumed_since_report = 0;
  };

  absl::StatusOr<Batch> NextImpl(std::shared_ptr<LoaderCore> self);
  // A daemon's admin status, or nullopt when none answers within
  // kStatusTimeout. Blocks; call without holding a lock.
  std::optional<batchd::v1::ServerStatus> FetchStatus();
  void MarkEpochStart() ABSL_LOCKS_EXCLUDED(mu_);
  void Pace(int daemon, uint64_t bytes) ABSL_LOCKS_EXCLUDED(mu_);
  void SupervisorLoop();
  // Looks the DNS name up again and adds or drains daemons to match.
  void Resolve() ABSL_LOCKS_EXCLUDED(mu_);
  int AddDaemonLocked(const std::string& endpoint)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ConnectLocked(int daemon) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Attaches a shared-memory ring for a stream whose `opened` carries an
  // invitation; blocks on the side channel, so it runs without mu_.
  // nullptr, and `why` set, when the stream is to carry bytes.
  std::shared_ptr<SharedRing> AttachRing(const PlanOpened& opened,
                                         absl::Status* why)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status HandleOpened(int daemon, const PlanOpened& opened,
                            std::shared_ptr<SharedRing> ring,
                            const absl::Status& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records the transport in use and, once per reason, logs why shared
  // memory is not.
  void NoteTransportLocked(const absl::Status& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status HandleHeader(int daemon, BatchHeader& header)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status HandleRejected(int daemon, const RequestRejected& rejected)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The receipt of `daemon` is complete.
  void FinishReceiptLocked(int daemon) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `daemon` works again: its failures are forgiven and the unavailable
  // clock stops.
  void MarkRecoveredLocked(int daemon) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Starts the unavailable clock at `now` unless it runs or some daemon
  // takes requests; MarkRecoveredLocked stops it.
  void StartUnavailableClockLocked(absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FreeLocked(int slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int FindLocked(const Key& key) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The batch `ahead` places after the next one Next() returns: in the
  // current epoch, then, with next_epoch_prefetch and before last_epoch,
  // in the next; nullopt beyond both.
  std::optional<Key> AheadLocked(uint64_t ahead) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sets the sticky error once no daemon can serve any more.
  void CheckAllFailedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string DaemonSummaryLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reserves free slots for the next batches (AheadLocked) and lets the
  // scheduler assign them; then sends. Sends without holding mu_.
  void RequestMore() ABSL_LOCKS_EXCLUDED(mu_);
  // Takes the scheduler's decisions under mu_, to be sent with Send().
  struct Outgoing {
    std::shared_ptr<DaemonStream> stream;
    StreamRequest request;
  };
  std::vector<Outgoing> ScheduleLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // With auto_prefetch, how many slots to add now (see LoaderOptions); 0
  // most of the time.
  size_t PrefetchGrowthLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Allocates `count` more slots' buffers (without mu_) and puts them in
  // use.
  void GrowRing(size_t count) ABSL_LOCKS_EXCLUDED(mu_);
  // The TrainerReports due at `now`, one per daemon streaming, if the
  // report interval has passed.
  std::vector<Outgoing> ReportsLocked(absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static void Send(std::vector<Outgoing> outgoing);
  absl::Status ProtocolError(int daemon, absl::string_view what) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return absl::InternalError(absl::StrCat("protocol error from batchd at ",
                                            daemons_[daemon].endpoint, ": ",
                                            what));
  }

  // Constant after construction.
  const LoaderOptions options_;
  const absl::Time created_;
  EndpointSpec spec_;  // constant after Open() starts
  // Whether streams offer shared memory: one endpoint, on this host, and
  // LoaderOptions::shared_memory. Constant after Open() starts.
  bool offer_shared_memory_ = false;
  ChannelSecurity security_;  // constant after Open() starts
  // Constant after Open() returns OK.
  std::unique_ptr<BufferAllocator> owned_allocator_;
  PlanOpened opened_;  // written once, before opened_received_ is set
  // Size fixed in Open(): the most slots the ring may grow to; the first
  // active_slots_ are in use, the rest kInactive. Fields as documented.
  std::vector<Slot> slots_;
  BufferAllocator* allocator_ = nullptr;  // constant after Open()
  std::thread supervisor_;

  mutable absl::Mutex mu_;
  RequestScheduler scheduler_ ABSL_GUARDED_BY(mu_);
  std::vector<Daemon> daemons_ ABSL_GUARDED_BY(mu_);  // by scheduler id
  std::minstd_rand jitter_ ABSL_GUARDED_BY(mu_);
  absl::Time next_resolve_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  // Since when no daemon has been up (InfiniteFuture while one is).
  absl::Time all_down_since_ ABSL_GUARDED_BY(mu_);
  bool opened_received_ ABSL_GUARDED_BY(mu_) = false;
  bool ring_ready_ ABSL_GUARDED_BY(mu_) = false;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  // Wakes the supervisor early (a daemon went down or a slot came free).
  bool kick_ ABSL_GUARDED_BY(mu_) = false;
  // Cancel() was called: Next() returns CANCELLED from then on.
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  // Sticky: the loader cannot go on. Once set, nothing is requested.
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  // Slots by batch, for every slot not kFree or kLeased.
  absl::flat_hash_map<Key, int> pending_ ABSL_GUARDED_BY(mu_);
  bool epoch_started_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_batch_ ABSL_GUARDED_BY(mu_) = 0;
  Loader::Stats stats_ ABSL_GUARDED_BY(mu_);
  // When the last Next() returned; the gap to the next call is compute.
  std::optional<absl::Time> last_return_ ABSL_GUARDED_BY(mu_);
  // When the Next() in progress was called; nullopt outside Next().
  std::optional<absl::Time> inside_next_since_ ABSL_GUARDED_BY(mu_);
  // Wait and compute up to the last TrainerReport, counting the Next() or
  // the compute in progress then, and when the next is due.
  absl::Duration reported_wait_ ABSL_GUARDED_BY(mu_);
  absl::Duration reported_compute_ ABSL_GUARDED_BY(mu_);
  absl::Time next_report_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  size_t active_slots_ ABSL_GUARDED_BY(mu_) = 0;
  // Slots of a shared-memory ring: the ring's largest size, fixed by the
  // first `opened`; 0 before.
  uint32_t ring_slots_ ABSL_GUARDED_BY(mu_) = 0;
  // The last reason logged for streaming bytes instead of shared memory.
  std::string logged_transport_note_ ABSL_GUARDED_BY(mu_);
  // Steps that returned a batch after waiting (> kWaitedStep), epochs'
  // first batches left out; and the figures at the last auto_prefetch look.
  uint64_t waited_steps_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t steady_steps_ ABSL_GUARDED_BY(mu_) = 0;
  struct PrefetchLook {
    absl::Time at = absl::InfinitePast();
    uint64_t steps = 0, waited_steps = 0;
    absl::Duration waited;
  };
  PrefetchLook prefetch_look_ ABSL_GUARDED_BY(mu_);
  // No batch returned since StartEpoch() yet.
  bool first_of_epoch_ ABSL_GUARDED_BY(mu_) = false;
  // The current epoch's start, for its diagnosis.
  Loader::Stats epoch_start_stats_ ABSL_GUARDED_BY(mu_);
  std::optional<batchd::v1::ServerStatus> epoch_start_status_
      ABSL_GUARDED_BY(mu_);
  // Whether the current epoch's end has been reported, and the last line.
  bool epoch_reported_ ABSL_GUARDED_BY(mu_) = false;
  std::string epoch_diagnosis_ ABSL_GUARDED_BY(mu_);
};

absl::Status LoaderCore::Open() {
  absl::StatusOr<EndpointSpec> spec = ParseEndpoints(options_.endpoint);
  if (!spec.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("LoaderOptions.endpoint: ", spec.status().message()));
  }
  spec_ = *std::move(spec);
  absl::StatusOr<ChannelSecurity> security =
      ChannelSecurity::Load(options_.security);
  if (!security.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LoaderOptions.security: ", security.status().message()));
  }
  security_ = *std::move(security);
  BufferAllocator* allocator = options_.allocator;
  if (allocator == nullptr) {
    owned_allocator_ = NewHeapAllocator();
    allocator = owned_allocator_.get();
  }
  // Before any stream starts: their reader threads attach rings with it.
  allocator_ = allocator;
  offer_shared_memory_ = options_.shared_memory && !spec_.uses_dns() &&
                         spec_.addresses.size() == 1 &&
                         common::IsLocalAddress(spec_.addresses[0]);
  std::vector<std::string> addresses = spec_.addresses;
  if (spec_.uses_dns()) {
    const Resolver& resolve =
        options_.resolver ? options_.resolver : Resolver(ResolveWithSystem);
    absl::StatusOr<std::vector<std::string>> resolved =
        resolve(spec_.dns_host, spec_.dns_port);
    if (!resolved.ok()) return resolved.status();
    addresses = *std::move(resolved);
  }
  {
    absl::MutexLock lock(&mu_);
    all_down_since_ = created_;
    for (const std::string& address : addresses) {
      ConnectLocked(AddDaemonLocked(address));
    }
    if (spec_.uses_dns()) next_resolve_ = created_ + options_.resolve_interval;
  }

  // Wait for the first `opened`, or for every daemon to fail, or the
  // deadline.
  {
    absl::MutexLock lock(&mu_);
    auto answered = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      if (opened_received_ || !error_.ok()) return true;
      for (const Daemon& d : daemons_) {
        if (d.state == DaemonState::kConnecting) return false;
      }
      return true;
    };
    mu_.AwaitWithTimeout(absl::Condition(&answered), options_.connect_timeout);
    if (!opened_received_) {
      if (!error_.ok()) return error_;
      // A daemon's verdict on the plan says most; then a lost connection.
      for (const Daemon& d : daemons_) {
        if (d.state == DaemonState::kFailed) return d.last_error;
      }
      std::vector<std::string> why;
      bool connected = false;
      for (const Daemon& d : daemons_) {
        const grpc_connectivity_state state = d.channel->GetState(false);
        if (state == GRPC_CHANNEL_READY) connected = true;
        why.push_back(d.last_error.ok()
                          ? d.endpoint
                          : absl::StrCat(d.endpoint, " (",
                                         d.last_error.message(), ")"));
      }
      if (connected) {
        return absl::DeadlineExceededError(absl::StrCat(
            "batchd at ", absl::StrJoin(why, ", "),
            " did not answer the plan within ",
            absl::FormatDuration(options_.connect_timeout)));
      }
      return absl::UnavailableError(absl::StrCat(
          "could not connect to batchd at ", absl::StrJoin(why, ", "),
          " within ", absl::FormatDuration(options_.connect_timeout)));
    }
  }
  if (opened_.window() == 0) return absl::InternalError(absl::StrCat(
      "protocol error from batchd at ", options_.endpoint,
      ": the granted window is 0"));
  const uint64_t max_batch_bytes = opened_.max_batch_bytes();
  if (max_batch_bytes == 0) {
    return absl::InternalError(absl::StrCat("protocol error from batchd at ",
                                            options_.endpoint,
                                            ": max_batch_bytes is 0"));
  }
  if (max_batch_bytes > std::numeric_limits<size_t>::max()) {
    return absl::InternalError(absl::StrCat(
        "protocol error from batchd at ", options_.endpoint,
        ": max_batch_bytes ", max_batch_bytes, " does not fit in memory"));
  }
  const RingSize ring =
      SizeRing(options_, opened_, std::max<size_t>(1, addresses.size()));
  const uint64_t window = ring.window;
  bool shared = false;
  {
    absl::MutexLock lock(&mu_);
    shared = daemons_[0].ring != nullptr;
  }

  // The reader threads touch slots only for requested batches, and nothing
  // has been requested yet, so the ring can be built without holding mu_.
  // Over shared memory the slots' bytes are the attached ring's.
  std::vector<Slot> slots(ring.most);
  for (size_t i = window; i < slots.size(); ++i) {
    slots[i].state = SlotState::kInactive;
  }
  for (size_t i = 0; i < (shared ? 0 : window); ++i) {
    Slot& slot = slots[i];
    absl::StatusOr<std::unique_ptr<HostBuffer>> buffer =
        allocator->Allocate(static_cast<size_t>(max_batch_bytes));
    if (!buffer.ok()) return buffer.status();
    if (*buffer == nullptr || (*buffer)->size() < max_batch_bytes) {
      return absl::InternalError(absl::StrCat(
          "allocator '", allocator->name(), "' returned a buffer smaller than ",
          max_batch_bytes, " bytes"));
    }
    slot.buffer = *std::move(buffer);
  }
  absl::MutexLock lock(&mu_);
  slots_ = std::move(slots);
  active_slots_ = window;
  ring_ready_ = true;
  supervisor_ = std::thread([this] { SupervisorLoop(); });
  return absl::OkStatus();
}

int LoaderCore::AddDaemonLocked(const std::string& endpoint) {
  const int id = scheduler_.AddDaemon();
  Daemon d;
  d.endpoint = endpoint;
  d.channel = NewBatchdChannel(endpoint, security_);
  daemons_.push_back(std::move(d));
  return id;
}

void LoaderCore::ConnectLocked(int id) {
  Daemon& d = daemons_[id];
  StreamRequest open;
  *open.mutable_open()->mutable_plan() = options_.plan;
  open.mutable_open()->set_window(AskedWindow(options_));
  open.mutable_open()->set_offer_shared_memory(offer_shared_memory_);
  d.state = DaemonState::kConnecting;
  d.opened = false;
  d.stalled = false;
  d.receipt = Receipt{};
  d.last_message = absl::Now();
  d.stream = std::make_shared<DaemonStream>(id, d.channel, std::move(open),
                                            this);
}

void LoaderCore::Shutdown() {
  std::vector<std::shared_ptr<DaemonStream>> streams;
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_) return;
    shutdown_ = true;
    for (Daemon& d : daemons_) {
      if (d.stream != nullptr) streams.push_back(d.stream);
    }
  }
  if (supervisor_.joinable()) supervisor_.join();
  // A clean end where nothing is owed: half-close, and each daemon finishes
  // its stream with OK.
  bool clean = true;
  {
    absl::MutexLock lock(&mu_);
    for (const Slot& slot : slots_) {
      if (slot.state == SlotState::kRequested ||
          slot.state == SlotState::kReceiving) {
        clean = false;
      }
    }
    for (size_t i = 0; i < daemons_.size(); ++i) {
      if (scheduler_.outstanding(static_cast<int>(i)) > 0) clean = false;
    }
  }
  if (clean) {
    for (const auto& stream : streams) stream->WritesDone();
    const absl::Time deadline = absl::Now() + kCloseGrace;
    for (const auto& stream : streams) {
      while (!stream->done() && absl::Now() < deadline) {
        absl::SleepFor(absl::Milliseconds(2));
      }
    }
  }
  for (const auto& stream : streams) stream->Cancel();
  {
    absl::MutexLock lock(&mu_);
    for (Daemon& d : daemons_) d.stream.reset();
  }
  streams.clear();  // joins the reader threads
}

void LoaderCore::Cancel() {
  std::vector<std::shared_ptr<DaemonStream>> streams;
  {
    absl::MutexLock lock(&mu_);
    if (cancelled_) return;
    cancelled_ = true;
    // Sticky, so StartEpoch() refuses too and the streams' ends (CANCELLED
    // by us, below) are not reported as lost daemons.
    if (error_.ok()) error_ = absl::CancelledError("the loader was cancelled");
    for (Daemon& d : daemons_) {
      if (d.stream != nullptr) streams.push_back(d.stream);
    }
  }
  // Thread-safe; wakes each reader's Read() so the reader threads end. They
  // are joined by Shutdown(), in the destructor.
  for (const auto& stream : streams) stream->Cancel();
}

// ---- The supervisor: reconnects, DNS, stalls, hedges, the deadline ----

void LoaderCore::SupervisorLoop() {
  for (;;) {
    std::vector<std::shared_ptr<DaemonStream>> finished;
    std::vector<Outgoing> outgoing;
    bool resolve = false;
    size_t grow = 0;
    {
      absl::MutexLock lock(&mu_);
      auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return shutdown_ || kick_;
      };
      mu_.AwaitWithTimeout(absl::Condition(&woken), kSupervisorTick);
      if (shutdown_) return;
      kick_ = false;
      const absl::Time now = absl::Now();
      for (size_t i = 0; i < daemons_.size(); ++i) {
        Daemon& d = daemons_[i];
        const int id = static_cast<int>(i);
        if (d.stream != nullptr && d.stream->done()) {
          finished.push_back(std::move(d.stream));
          d.stream.reset();
        }
        if (!error_.ok()) continue;
        if (d.state == DaemonState::kDown && d.stream == nullptr &&
            d.in_dns && now >= d.retry_at) {
          ConnectLocked(id);
        }
        // Silence with batches owed: give them to the others.
        if (d.state == DaemonState::kUp && d.stream != nullptr &&
            !d.stalled && scheduler_.outstanding(id) > 0 &&
            now - d.last_message > options_.stall_timeout) {
          d.stalled = true;
          d.stream->Cancel();
        }
        // Gone from DNS and nothing owed: close its stream.
        if (!d.in_dns && d.state == DaemonState::kUp && d.stream != nullptr &&
            scheduler_.outstanding(id) == 0) {
          d.stream->WritesDone();
        }
      }
      if (error_.ok() && !cancelled_ && all_down_since_ != absl::InfiniteFuture() &&
          now - all_down_since_ > options_.unavailable_timeout) {
        error_ = absl::UnavailableError(absl::StrCat(
            "no batchd daemon was up and delivering for ",
            absl::FormatDuration(options_.unavailable_timeout), ": ",
            DaemonSummaryLocked()));
      }
      if (error_.ok()) outgoing = ScheduleLocked();
      for (Outgoing& report : ReportsLocked(now)) {
        outgoing.push_back(std::move(report));
      }
      // After scheduling: a reconnected daemon given no work (the ring is
      // full) has nothing to prove; one given work proves itself by
      // delivering (FinishReceiptLocked).
      for (size_t i = 0; i < daemons_.size(); ++i) {
        const int id = static_cast<int>(i);
        if (daemons_[i].state == DaemonState::kUp && daemons_[i].failures > 0 &&
            scheduler_.Accepting(id) && scheduler_.outstanding(id) == 0) {
          MarkRecoveredLocked(id);
        }
      }
      StartUnavailableClockLocked(now);
      grow = PrefetchGrowthLocked(now);
      resolve = spec_.uses_dns() && now >= next_resolve_;
      if (resolve) next_resolve_ = now + options_.resolve_interval;
    }
    Send(std::move(outgoing));
    finished.clear();  // joins finished reader threads, outside mu_
    if (grow > 0) GrowRing(grow);
    if (resolve) Resolve();
  }
}

void LoaderCore::Resolve() {
  const Resolver& resolve =
      options_.resolver ? options_.resolver : Resolver(ResolveWithSystem);
  absl::StatusOr<std::vector<std::string>> resolved =
      resolve(spec_.dns_host, spec_.dns_port);
  if (!resolved.ok()) return;  // keep what we have; try next period
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < daemons_.size(); ++i) {
    Daemon& d = daemons_[i];
    const bool listed = std::find(resolved->begin(), resolved->end(),
                                  d.endpoint) != resolved->end();
    if (listed && !d.in_dns) {
      d.in_dns = true;
      if (d.state == DaemonState::kRemoved) {
        d.state = DaemonState::kDown;
        d.retry_at = absl::Now();
      }
    } else if (!listed && d.in_dns) {
      d.in_dns = false;
      scheduler_.DaemonDraining(static_cast<int>(i));
    }
  }
  for (const std::string& address : *resolved) {
    const bool known = std::any_of(
        daemons_.begin(), daemons_.end(),
        [&address](const Daemon& d) { return d.endpoint == address; });
    if (!known && error_.ok()) ConnectLocked(AddDaemonLocked(address));
  }
}

size_t LoaderCore::PrefetchGrowthLocked(absl::Time now) {
  if (!options_.auto_prefetch || !ring_ready_ ||
      active_slots_ == slots_.size()) {
    return 0;
  }
  PrefetchLook& look = prefetch_look_;
  const PrefetchLook current{now, steady_steps_, waited_steps_,
                             stats_.waited - stats_.startup_waited};
  if (look.at == absl::InfinitePast()) {
    look = current;
    return 0;
  }
  if (now - look.at < kPrefetchLookInterval) return 0;
  const uint64_t steps = current.steps - look.steps;
  if (steps < kPrefetchLookMinSteps) return 0;  // too few to judge; wait
  const uint64_t waited_steps = current.waited_steps - look.waited_steps;
  const double waited_share =
      absl::FDivDuration(current.waited - look.waited, now - look.at);
  look = current;
  // Waits that matter, but on few steps: the daemons keep up on average,
  // so only the bursts hurt, and depth hides bursts.
  if (waited_share <= 0.05 || 2 * waited_steps > steps) return 0;
  return std::min(slots_.size() - active_slots_,
                  std::max<size_t>(1, active_slots_ / 2));
}

void LoaderCore::GrowRing(size_t count) {
  const uint64_t bytes = opened_.max_batch_bytes();
  bool shared = false;
  {
    absl::MutexLock lock(&mu_);
    shared = daemons_[0].ring != nullptr;
  }
  if (shared) {
    // The attached ring already has every slot the ring may grow to.
    {
      absl::MutexLock lock(&mu_);
      for (size_t i = 0; i < count && active_slots_ < slots_.size(); ++i) {
        slots_[active_slots_++].state = SlotState::kFree;
      }
      ++stats_.prefetch_grows;
    }
    RequestMore();
    return;
  }
  std::vector<std::unique_ptr<HostBuffer>> buffers;
  for (size_t i = 0; i < count; ++i) {
    absl::StatusOr<std::unique_ptr<HostBuffer>> buffer =
        allocator_->Allocate(static_cast<size_t>(bytes));
    // Out of (pinned) memory is not an error for the run: the ring keeps
    // the slots it has.
    if (!buffer.ok() || *buffer == nullptr || (*buffer)->size() < bytes) break;
    buffers.push_back(*std::move(buffer));
  }
  {
    absl::MutexLock lock(&mu_);
    for (std::unique_ptr<HostBuffer>& buffer : buffers) {
      if (active_slots_ == slots_.size()) break;
      Slot& slot = slots_[active_slots_++];
      slot.buffer = std::move(buffer);
      slot.state = SlotState::kFree;
    }
    if (!buffers.empty()) ++stats_.prefetch_grows;
  }
  RequestMore();
}

std::vector<LoaderCore::Outgoing> LoaderCore::ReportsLocked(absl::Time now) {
  std::vector<Outgoing> reports;
  if (options_.report_interval <= absl::ZeroDuration() || !ring_ready_ ||
      now < next_report_) {
    return reports;
  }
  next_report_ = now + options_.report_interval;
  // Counting the call or the compute in progress, so that a trainer stuck
  // in Next() reports its wait now, not when the batch finally comes.
  absl::Duration wait = stats_.waited;
  absl::Duration compute = stats_.compute;
  if (inside_next_since_.has_value()) {
    wait += now - *inside_next_since_;
  } else if (last_return_.has_value()) {
    compute += now - *last_return_;
  }
  const absl::Duration new_wait = wait - reported_wait_;
  const absl::Duration new_compute = compute - reported_compute_;
  reported_wait_ = wait;
  reported_compute_ = compute;
  for (Daemon& d : daemons_) {
    const uint64_t consumed = d.consumed_since_report;
    d.consumed_since_report = 0;
    if (d.state != DaemonState::kUp || !d.opened || d.stream == nullptr) {
      continue;
    }
    Outgoing out;
    out.stream = d.stream;
    batchd::v1::TrainerReport* report = out.request.mutable_report();
    report->set_wait_seconds(absl::ToDoubleSeconds(new_wait));
    report->set_compute_seconds(absl::ToDoubleSeconds(new_compute));
    report->set_batches(consumed);
    reports.push_back(std::move(out));
    ++stats_.reports_sent;
  }
  return reports;
}

std::vector<LoaderCore::Outgoing> LoaderCore::ScheduleLocked() {
  std::vector<Outgoing> outgoing;
  if (!ring_ready_ || shutdown_ || !error_.ok()) return outgoing;
  // Cancels first: on one stream, a cancel never overtakes a later request
  // for the same batch.
  for (RequestScheduler::Request& r : scheduler_.TakeCancels()) {
    Outgoing out;
    out.stream = daemons_[r.daemon].stream;
    if (out.stream == nullptr) continue;
    batchd::v1::CancelBatches* cancel = out.request.mutable_cancel();
    cancel->set_epoch(r.epoch);
    for (uint64_t index : r.indices) cancel->add_batch_indices(index);
    outgoing.push_back(std::move(out));
  }
  for (RequestScheduler::Request& r : scheduler_.Schedule(absl::Now())) {
    Daemon& d = daemons_[r.daemon];
    Outgoing out;
    out.stream = d.stream;
    if (out.stream == nullptr) continue;  // DaemonDown() follows at once
    batchd::v1::BatchRequest* request = out.request.mutable_request();
    request->set_epoch(r.epoch);
    for (uint64_t index : r.indices) {
      // Every wanted batch has a slot (RequestMore reserves it first).
      const int slot_index = FindLocked(Key{r.epoch, index});
      if (slot_index < 0) continue;
      request->add_batch_indices(index);
      Slot& slot = slots_[slot_index];
      if (d.ring != nullptr) {
        // Granted to this stream until its header or rejection arrives.
        slot.ring = d.ring;
        slot.shared = d.ring->slot(static_cast<uint32_t>(slot_index));
        request->add_slots(static_cast<uint32_t>(slot_index));
        continue;
      }
      slot.ring.reset();
      slot.shared = nullptr;
      if (slot.buffer == nullptr) {
        // This slot has only lived in shared memory so far, and its daemon
        // now streams bytes.
        absl::StatusOr<std::unique_ptr<HostBuffer>> buffer =
            allocator_->Allocate(static_cast<size_t>(opened_.max_batch_bytes()));
        if (!buffer.ok()) {
          error_ = buffer.status();
          return {};
        }
        slot.buffer = *std::move(buffer);
      }
    }
    if (request->batch_indices_size() > 0) outgoing.push_back(std::move(out));
  }
  return outgoing;
}

void LoaderCore::Send(std::vector<Outgoing> outgoing) {
  // A failed write means that stream has ended; its reader thread reports
  // why, and the scheduler moves the batches elsewhere.
  for (Outgoing& out : outgoing) out.stream->Send(out.request);
}

std::string LoaderCore::DaemonSummaryLocked() const {
  std::vector<std::string> parts;
  for (const Daemon& d : daemons_) {
    parts.push_back(d.last_error.ok()
                        ? absl::StrCat(d.endpoint, " (never answered)")
                        : absl::StrCat(d.endpoint, " (", d.last_error.message(),
                                       ")"));
  }
  return absl::StrJoin(parts, "; ");
}

void LoaderCore::CheckAllFailedLocked() {
  if (!error_.ok()) return;
  int failed = 0;
  const Daemon* last = nullptr;
  for (const Daemon& d : daemons_) {
    if (d.state == DaemonState::kFailed) {
      ++failed;
      last = &d;
    }
  }
  if (failed == 0 || failed < static_cast<int>(daemons_.size())) return;
  // A DNS name may bring new daemons; a fixed list cannot.
  if (spec_.uses_dns()) return;
  if (daemons_.size() == 1) {
    error_ = last->last_error;
  } else {
    error_ = absl::Status(last->last_error.code(),
                          absl::StrCat("every batchd daemon failed: ",
                                       DaemonSummaryLocked()));
  }
}

// ---- Stream events, on the daemons' reader threads ----

absl::Status LoaderCore::OnResponse(int daemon, StreamResponse& response) {
  std::shared_ptr<SharedRing> ring;
  absl::Status why_bytes;
  if (response.kind_case() == StreamResponse::kOpened) {
    ring = AttachRing(response.opened(), &why_bytes);
  }
  absl::MutexLock lock(&mu_);
  daemons_[daemon].last_message = absl::Now();
  switch (response.kind_case()) {
    case StreamResponse::kOpened:
      return HandleOpened(daemon, response.opened(), std::move(ring),
                          why_bytes);
    case StreamResponse::kHeader:
      return HandleHeader(daemon, *response.mutable_header());
    case StreamResponse::kChunk:
      break;  // decoded by the stream; never reaches here
    case StreamResponse::kRejected:
      return HandleRejected(daemon, response.rejected());
    case StreamResponse::kReportRejected:
      // Only the daemon's view of this trainer suffers; batches go on.
      ++stats_.reports_rejected;
      return absl::OkStatus();
    case StreamResponse::KIND_NOT_SET:
      break;
  }
  return ProtocolError(daemon, "an empty or unknown response message");
}

std::shared_ptr<SharedRing> LoaderCore::AttachRing(const PlanOpened& opened,
                                                   absl::Status* why) {
  if (!offer_shared_memory_) {
    *why = absl::FailedPreconditionError(
        !options_.shared_memory
            ? "LoaderOptions.shared_memory is off"
            : spec_.addresses.size() != 1
                  ? "shared memory needs a single daemon endpoint"
                  : "the endpoint is not a unix: or loopback address");
    return nullptr;
  }
  const batchd::v1::SharedMemoryInvite& invite = opened.shared_memory();
  if (!opened.has_shared_memory()) {
    *why = absl::FailedPreconditionError(
        "the daemon does not offer shared memory (an older batchd)");
    return nullptr;
  }
  if (!invite.declined().empty()) {
    *why = absl::FailedPreconditionError(
        absl::StrCat("the daemon declined: ", invite.declined()));
    return nullptr;
  }
  uint32_t slots = 0;
  {
    absl::MutexLock lock(&mu_);
    if (ring_slots_ == 0) {
      ring_slots_ = static_cast<uint32_t>(
          std::max<uint64_t>(1, SizeRing(options_, opened, 1).most));
    }
    slots = ring_slots_;
  }
  absl::StatusOr<std::shared_ptr<SharedRing>> ring =
      AttachSharedRing(invite, slots, allocator_, kAttachTimeout);
  if (!ring.ok()) {
    *why = ring.status();
    return nullptr;
  }
  return *std::move(ring);
}

void LoaderCore::NoteTransportLocked(const absl::Status& why) {
  bool shared = false;
  for (const Daemon& d : daemons_) shared |= d.ring != nullptr;
  if (shared) {
    stats_.transport = "shared-memory";
    stats_.transport_note.clear();
    return;
  }
  stats_.transport =
      absl::StartsWith(daemons_[0].endpoint, "unix:") ? "unix" : "tcp";
  stats_.transport_note = std::string(why.message());
  // Said once per reason; switching it off on purpose needs no line.
  if (options_.shared_memory && !why.ok() &&
      stats_.transport_note != logged_transport_note_) {
    logged_transport_note_ = stats_.transport_note;
    std::fprintf(stderr,
                 "batchd: shared memory off for %s: %s; batches come as "
                 "bytes\n",
                 options_.endpoint.c_str(), logged_transport_note_.c_str());
  }
}

absl::Status LoaderCore::HandleOpened(int daemon, const PlanOpened& opened,
                                      std::shared_ptr<SharedRing> ring,
                                      const absl::Status& why) {
  Daemon& d = daemons_[daemon];
  if (d.opened) return ProtocolError(daemon, "a second `opened` message");
  d.ring = std::move(ring);
  NoteTransportLocked(why);
  if (opened.window() == 0) {
    return ProtocolError(daemon, "the granted window is 0");
  }
  if (!opened_received_) {
    opened_ = opened;
    opened_received_ = true;
  } else if (!SamePlan(opened_, opened)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "batchd at ", d.endpoint, " answers the plan with ",
        opened.batches_per_epoch(), " batches of ", opened.max_batch_bytes(),
        " bytes per epoch, the first daemon with ", opened_.batches_per_epoch(),
        " of ", opened_.max_batch_bytes(),
        ": the daemons do not serve the same dataset"));
  }
  d.opened = true;
  d.state = DaemonState::kUp;
  // Reports count only this stream's batches.
  d.consumed_since_report = 0;
  scheduler_.DaemonUp(daemon, opened.window());
  if (!d.in_dns) scheduler_.DaemonDraining(daemon);
  // A daemon that failed before counts as back only once it delivers a
  // batch, or is up with nothing asked of it (MarkRecoveredLocked): one
  // that accepts every stream and then fails it must not keep the loader
  // waiting forever, nor reconnecting without backoff.
  if (d.failures == 0) MarkRecoveredLocked(daemon);
  kick_ = true;  // the supervisor hands it work
  return absl::OkStatus();
}

absl::Status LoaderCore::HandleHeader(int daemon, BatchHeader& header) {
  const Key key{header.epoch(), header.batch_index()};
  Daemon& d = daemons_[daemon];
  if (!d.opened) return ProtocolError(daemon, "a header before `opened`");
  if (d.receipt.active) {
    return ProtocolError(daemon, absl::StrCat(
        "header of ", BatchName(key.first, key.second), " while ",
        BatchName(d.receipt.key.first, d.receipt.key.second),
        " is incomplete"));
  }
  if (!scheduler_.HasRequest(daemon, key)) {
    return ProtocolError(daemon, absl::StrCat("header of ",
                                              BatchName(key.first, key.second),
                                              ", which is not awaited"));
  }
  if (header.total_bytes() > opened_.max_batch_bytes()) {
    return ProtocolError(daemon, absl::StrCat(
        BatchName(key.first, key.second), " has ", header.total_bytes(),
        " bytes, more than max_batch_bytes ", opened_.max_batch_bytes()));
  }
  const bool in_shared_memory = header.in_shared_memory();
  if (in_shared_memory != (d.ring != nullptr)) {
    return ProtocolError(
        daemon, absl::StrCat(BatchName(key.first, key.second),
                             in_shared_memory
                                 ? " is in shared memory, which this stream "
                                   "has not attached"
                                 : " comes as bytes on a stream with shared "
                                   "memory attached"));
  }
  if (header.shape_size() > 0) {
    uint64_t elements = 1;
    for (uint64_t dim : header.shape()) {
      if (dim != 0 && elements > std::numeric_limits<uint64_t>::max() / dim) {
        return ProtocolError(daemon, "shape overflows");
      }
      elements *= dim;
    }
    if (elements != header.total_bytes()) {
      return ProtocolError(daemon, absl::StrCat(
          BatchName(key.first, key.second), " has shape with ", elements,
          " elements but ", header.total_bytes(), " bytes"));
    }
  }
  Receipt& receipt = d.receipt;
  receipt = Receipt{};
  receipt.active = true;
  receipt.key = key;
  receipt.total = header.total_bytes();
  const int index = FindLocked(key);
  const RequestScheduler::Claim claim = scheduler_.OnHeader(daemon, key);
  // The losing copies elsewhere are withdrawn at once.
  if (scheduler_.has_cancels()) kick_ = true;
  if (claim == RequestScheduler::Claim::kAccept && index >= 0 &&
      slots_[index].state == SlotState::kRequested) {
    Slot& slot = slots_[index];
    slot.state = SlotState::kReceiving;
    slot.header = std::move(header);
    slot.copy = absl::ZeroDuration();
    slot.daemon = daemon;
    receipt.slot = index;
  }
  if (in_shared_memory) {
    // The daemon's workers wrote the pixels into the granted slot; the
    // header completes the batch.
    receipt.received = receipt.total;
    stats_.received_bytes += receipt.total;
  }
  if (receipt.received == receipt.total) FinishReceiptLocked(daemon);
  return absl::OkStatus();
}

absl::StatusOr<uint8_t*> LoaderCore::ChunkDestination(
    int daemon, const common::ChunkInfo& chunk) {
  const Key key{chunk.epoch, chunk.batch_index};
  absl::MutexLock lock(&mu_);
  Daemon& d = daemons_[daemon];
  d.last_message = absl::Now();
  Receipt& receipt = d.receipt;
  if (!receipt.active || receipt.key != key) {
    return ProtocolError(daemon, absl::StrCat(
        "chunk of ", BatchName(key.first, key.second),
        ", which is not the batch being received"));
  }
  if (chunk.offset != receipt.received) {
    return ProtocolError(daemon, absl::StrCat(
        "chunk of ", BatchName(key.first, key.second), " at offset ",
        chunk.offset, "; expected offset ", receipt.received));
  }
  if (chunk.length > receipt.total - receipt.received) {
    return ProtocolError(daemon, absl::StrCat(
        "chunk of ", BatchName(key.first, key.second), " at offset ",
        chunk.offset, " with ", chunk.length, " bytes overflows the batch's ",
        receipt.total, " bytes"));
  }
  if (receipt.slot < 0) {
    // A losing copy: read past it.
    if (chunk.length > kMaxChunkBytes) {
      return ProtocolError(daemon, absl::StrCat("a chunk of ", chunk.length,
                                                " bytes, over the 4 MiB limit"));
    }
    if (d.scratch.size() < chunk.length) d.scratch.resize(chunk.length);
    return d.scratch.data();
  }
  // The slot's bytes belong to this reader thread while it is kReceiving.
  return slots_[receipt.slot].data() + receipt.received;
}

absl::Status LoaderCore::OnChunk(int daemon, const common::ChunkInfo& chunk,
                                 absl::Duration copy) {
  {
    absl::MutexLock lock(&mu_);
    Daemon& d = daemons_[daemon];
    Receipt& receipt = d.receipt;
    receipt.received += chunk.length;
    stats_.received_bytes += chunk.length;
    if (receipt.slot >= 0) {
      Slot& slot = slots_[receipt.slot];
      slot.copy += copy;
      stats_.copy += copy;
    }
    if (receipt.received == receipt.total) FinishReceiptLocked(daemon);
  }
  if (chunk.length > 0) Pace(daemon, chunk.length);
  return absl::OkStatus();
}

void LoaderCore::StartUnavailableClockLocked(absl::Time now) {
  // No daemon takes requests (each is down, draining, failed or gone): a
  // daemon that drains but never ends its stream must not hold Next()
  // forever either.
  if (scheduler_.accepting_daemons() == 0 &&
      all_down_since_ == absl::InfiniteFuture()) {
    all_down_since_ = now;
  }
}

void LoaderCore::MarkRecoveredLocked(int daemon) {
  Daemon& d = daemons_[daemon];
  d.failures = 0;
  d.last_error = absl::OkStatus();
  all_down_since_ = absl::InfiniteFuture();
}

void LoaderCore::FinishReceiptLocked(int daemon) {
  Receipt& receipt = daemons_[daemon].receipt;
  scheduler_.OnComplete(daemon, receipt.key, absl::Now());
  MarkRecoveredLocked(daemon);
  if (receipt.slot >= 0) {
    Slot& slot = slots_[receipt.slot];
    if (slot.orphaned) {
      FreeLocked(receipt.slot);
    } else {
      slot.state = SlotState::kReady;
    }
  }
  receipt = Receipt{};
  kick_ = true;  // a window place came free
}

absl::Status LoaderCore::HandleRejected(int daemon,
                                        const RequestRejected& rejected) {
  const Key key{rejected.epoch(), rejected.batch_index()};
  Daemon& d = daemons_[daemon];
  if (!scheduler_.HasRequest(daemon, key) ||
      (d.receipt.active && d.receipt.key == key)) {
    return ProtocolError(daemon, absl::StrCat(
        "rejection of ", BatchName(key.first, key.second),
        ", which is not awaited"));
  }
  const RequestScheduler::RejectionOutcome outcome =
      scheduler_.OnRejected(daemon, key, rejected.code());
  kick_ = true;
  if (outcome != RequestScheduler::RejectionOutcome::kFail) return absl::OkStatus();
  const int index = FindLocked(key);
  if (index < 0 || slots_[index].state != SlotState::kRequested) {
    return absl::OkStatus();
  }
  if (slots_[index].orphaned) {
    // Nobody waits for it; its slot is ours again.
    scheduler_.Unwant(key);
    FreeLocked(index);
    return absl::OkStatus();
  }
  absl::StatusCode code = static_cast<absl::StatusCode>(rejected.code());
  if (rejected.code() <= 0 || rejected.code() > 16) {
    code = absl::StatusCode::kUnknown;
  }
  Slot& slot = slots_[index];
  slot.error = absl::Status(
      code, absl::StrCat("batchd rejected ", BatchName(key.first, key.second),
                         ": ", rejected.message()));
  slot.state = SlotState::kFailed;
  return absl::OkStatus();
}

void LoaderCore::OnStreamEnd(int daemon, const grpc::Status& status,
                             const absl::Status& protocol_error) {
  absl::MutexLock lock(&mu_);
  Daemon& d = daemons_[daemon];
  const uint32_t owed = scheduler_.outstanding(daemon);
  for (const Key& key : scheduler_.DaemonDown(daemon)) {
    // Its bytes start over, from whichever daemon answers next.
    const int index = FindLocked(key);
    if (index < 0 || slots_[index].state != SlotState::kReceiving) continue;
    if (slots_[index].orphaned) {
      FreeLocked(index);
    } else {
      slots_[index].state = SlotState::kRequested;
      slots_[index].header.Clear();
    }
  }
  if (d.ring != nullptr) {
    // Unwanted batches it was to write: their slots are free, and will be
    // bound to fresh memory when next granted (its workers may still
    // write the old ring for a while).
    for (size_t i = 0; i < slots_.size(); ++i) {
      Slot& slot = slots_[i];
      if (slot.state == SlotState::kRequested && slot.orphaned &&
          slot.ring == d.ring) {
        scheduler_.Unwant(slot.key);
        FreeLocked(static_cast<int>(i));
      }
    }
    d.ring.reset();
  }
  d.receipt = Receipt{};
  kick_ = true;
  if (shutdown_ || cancelled_) {
    d.state = DaemonState::kDown;
    return;
  }
  const std::string where = absl::StrCat("batchd at ", d.endpoint);
  bool retry = true;
  if (!protocol_error.ok()) {
    // A daemon that breaks the protocol (or serves another dataset) is not
    // asked again.
    d.last_error = protocol_error;
    retry = false;
  } else if (d.stalled) {
    d.last_error = absl::UnavailableError(absl::StrCat(
        where, " sent nothing for ",
        absl::FormatDuration(options_.stall_timeout), " with ", owed,
        " batches outstanding"));
  } else if (status.ok()) {
    if (owed > 0) {
      d.last_error = absl::UnavailableError(absl::StrCat(
          where, " ended the stream with ", owed,
          " requested batches not delivered"));
      retry = false;
    } else {
      d.last_error = absl::UnavailableError(absl::StrCat(where, " ended the stream"));
    }
  } else if (IsRetryable(status.error_code())) {
    d.last_error = absl::UnavailableError(absl::StrCat(
        "lost the stream to ", where, ": ",
        WithConnectionHint(status.error_message(), security_)));
  } else {
    // The daemon's own verdict; its message says what to fix.
    d.last_error = FromGrpc(status);
    retry = false;
  }
  if (!d.in_dns && status.ok() && owed == 0) {
    d.state = DaemonState::kRemoved;
  } else if (retry) {
    d.state = DaemonState::kDown;
    ++d.failures;
    absl::Duration backoff = options_.reconnect_backoff_min;
    for (int i = 1; i < d.failures && backoff < options_.reconnect_backoff_max; ++i) {
      backoff *= 2;
    }
    backoff = std::min(backoff, options_.reconnect_backoff_max);
    std::uniform_real_distribution<double> spread(0.8, 1.2);
    d.retry_at = absl::Now() + backoff * spread(jitter_);
  } else {
    d.state = DaemonState::kFailed;
  }
  StartUnavailableClockLocked(absl::Now());
  CheckAllFailedLocked();
}

// ---- The ring and the consumer ----

void LoaderCore::FreeLocked(int index) {
  Slot& slot = slots_[index];
  auto it = pending_.find(slot.key);
  if (it != pending_.end() && it->second == index) pending_.erase(it);
  slot.state = SlotState::kFree;
  slot.orphaned = false;
  slot.header.Clear();
  slot.copy = absl::ZeroDuration();
  slot.error = absl::OkStatus();
}

std::optional<LoaderCore::Key> LoaderCore::AheadLocked(uint64_t ahead) const {
  const uint64_t end = opened_.batches_per_epoch();
  const uint64_t position = next_batch_ + ahead;
  if (position < end) return Key{epoch_, position};
  const uint64_t last_epoch = std::min<uint64_t>(
      options_.last_epoch, std::numeric_limits<uint32_t>::max());
  if (!options_.next_epoch_prefetch || position - end >= end ||
      epoch_ >= last_epoch) {
    return std::nullopt;
  }
  return Key{epoch_ + 1, position - end};
}

int LoaderCore::FindLocked(const Key& key) const {
  auto it = pending_.find(key);
  return it == pending_.end() ? -1 : it->second;
}

void LoaderCore::RequestMore() {
  std::vector<Outgoing> outgoing;
  {
    absl::MutexLock lock(&mu_);
    if (!epoch_started_ || !ring_ready_ || shutdown_ || !error_.ok()) return;
    size_t free_slot = 0;
    for (uint64_t ahead = 0; ahead < active_slots_; ++ahead) {
      const std::optional<Key> wanted = AheadLocked(ahead);
      if (!wanted.has_value()) break;
      const Key& key = *wanted;
      const int existing = FindLocked(key);
      if (existing >= 0) {
        slots_[existing].orphaned = false;  // wanted again
        continue;
      }
      while (free_slot < slots_.size() &&
             slots_[free_slot].state != SlotState::kFree) {
        ++free_slot;
      }
      if (free_slot == slots_.size()) break;
      Slot& slot = slots_[free_slot];
      slot.state = SlotState::kRequested;
      slot.key = key;
      pending_[key] = static_cast<int>(free_slot);
      scheduler_.Want(key);
    }
    outgoing = ScheduleLocked();
  }
  Send(std::move(outgoing));
}

absl::Status LoaderCore::StartEpoch(uint64_t epoch, uint64_t first_batch) {
  {
    absl::MutexLock lock(&mu_);
    if (epoch > std::numeric_limits<uint32_t>::max()) {
      return absl::InvalidArgumentError(
          absl::StrCat("epoch ", epoch, " is beyond 2^32-1"));
    }
    if (first_batch > opened_.batches_per_epoch()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "first batch ", first_batch, " is beyond the epoch's ",
          opened_.batches_per_epoch(), " batches"));
    }
    if (!error_.ok()) return error_;
    epoch_started_ = true;
    first_of_epoch_ = true;
    epoch_ = epoch;
    next_batch_ = first_batch;
    // Batches the new range wants that are already requested or here (read
    // ahead) stay; RequestMore asks for the rest.
    std::vector<bool> wanted(slots_.size(), false);
    for (uint64_t ahead = 0; ahead < active_slots_; ++ahead) {
      const std::optional<Key> key = AheadLocked(ahead);
      if (!key.has_value()) break;
      const int existing = FindLocked(*key);
      if (existing >= 0) wanted[existing] = true;
    }
    for (size_t i = 0; i < slots_.size(); ++i) {
      Slot& slot = slots_[i];
      if (wanted[i]) continue;
      if (slot.state == SlotState::kReceiving ||
          (slot.state == SlotState::kRequested && slot.ring != nullptr)) {
        // Its bytes are being written (by the stream, or by a daemon's
        // workers into shared memory) until its batch arrives.
        slot.orphaned = true;
      } else if (slot.state == SlotState::kRequested ||
                 slot.state == SlotState::kReady ||
                 slot.state == SlotState::kFailed) {
        scheduler_.Unwant(slot.key);
        FreeLocked(static_cast<int>(i));
      }
    }
  }
  RequestMore();
  MarkEpochStart();
  return absl::OkStatus();
}

void LoaderCore::MarkEpochStart() {
  // Fetched after the requests went out, so the daemons start working
  // while we wait for the answer.
  std::optional<batchd::v1::ServerStatus> status = FetchStatus();
  absl::MutexLock lock(&mu_);
  epoch_start_stats_ = stats_;
  epoch_start_stats_.wall = absl::Now() - created_;
  epoch_start_status_ = std::move(status);
  epoch_reported_ = false;
}

std::optional<batchd::v1::ServerStatus> LoaderCore::FetchStatus() {
  // The daemon that served the most batches speaks for the run: with one
  // daemon that is it, with several the diagnosis adds the others' shares.
  std::shared_ptr<grpc::Channel> channel;
  {
    absl::MutexLock lock(&mu_);
    uint64_t best = 0;
    for (size_t i = 0; i < daemons_.size(); ++i) {
      const uint64_t served = scheduler_.counters(static_cast<int>(i)).served;
      if (daemons_[i].state == DaemonState::kUp &&
          (channel == nullptr || served > best)) {
        channel = daemons_[i].channel;
        best = served;
      }
    }
    if (channel == nullptr && !daemons_.empty()) channel = daemons_[0].channel;
  }
  if (channel == nullptr) return std::nullopt;
  absl::StatusOr<batchd::v1::ServerStatus> status =
      FetchServerStatus(channel, kStatusTimeout);
  if (!status.ok()) return std::nullopt;
  return *std::move(status);
}

Diagnosis LoaderCore::Diagnose() {
  // The client's figures first: the status RPC below is neither waiting nor
  // compute, and must not dilute the waited share.
  Loader::Stats interval;
  std::optional<batchd::v1::ServerStatus> start;
  {
    absl::MutexLock lock(&mu_);
    Loader::Stats current = stats_;
    current.wall = absl::Now() - created_;
    interval = current.Since(epoch_start_stats_);
    start = epoch_start_status_;
  }
  interval.daemons = stats().daemons;
  std::optional<batchd::v1::ServerStatus> now = FetchStatus();
  return client::Diagnose(interval, start ? &*start : nullptr,
                          now ? &*now : nullptr);
}

std::string LoaderCore::epoch_diagnosis() const {
  absl::MutexLock lock(&mu_);
  return epoch_diagnosis_;
}

void LoaderCore::RecordCopy(absl::Duration duration) {
  absl::MutexLock lock(&mu_);
  stats_.copy += duration;
  stats_.last_step.copy += duration;
}

void LoaderCore::Pace(int daemon, uint64_t bytes) {
  if (options_.max_receive_bytes_per_second == 0) return;
  absl::MutexLock lock(&mu_);
  absl::Time& link_free = daemons_[daemon].link_free;
  link_free = std::max(link_free, absl::Now()) +
              absl::Seconds(static_cast<double>(bytes) /
                            options_.max_receive_bytes_per_second);
  auto stopped = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return shutdown_ || cancelled_;
  };
  mu_.AwaitWithDeadline(absl::Condition(&stopped), link_free);
}

absl::StatusOr<Batch> LoaderCore::Next(std::shared_ptr<LoaderCore> self) {
  const absl::Time entered = absl::Now();
  {
    absl::MutexLock lock(&mu_);
    if (last_return_.has_value()) stats_.compute += entered - *last_return_;
    inside_next_since_ = entered;
  }
  absl::StatusOr<Batch> batch = NextImpl(std::move(self));
  const absl::Time returned = absl::Now();
  bool report = false;
  uint64_t epoch = 0;
  {
    absl::MutexLock lock(&mu_);
    stats_.waited += returned - entered;
    inside_next_since_.reset();
    if (batch.ok()) {
      stats_.last_step.waited = returned - entered;
      if (first_of_epoch_) stats_.startup_waited += returned - entered;
      if (!first_of_epoch_) {
        ++steady_steps_;
        if (returned - entered > kWaitedStep) ++waited_steps_;
      }
      first_of_epoch_ = false;
      stats_.last_step.compute =
          last_return_.has_value() ? entered - *last_return_
                                   : absl::ZeroDuration();
    }
    last_return_ = returned;
    if (absl::IsOutOfRange(batch.status()) && !epoch_reported_) {
      epoch_reported_ = true;
      report = true;
      epoch = epoch_;
    }
  }
  if (report) {
    const std::string line =
        absl::StrCat("epoch ", epoch, ": ", Diagnose().line);
    {
      absl::MutexLock lock(&mu_);
      epoch_diagnosis_ = line;
    }
    if (options_.report) options_.report(line);
  }
  return batch;
}

absl::StatusOr<Batch> LoaderCore::NextImpl(std::shared_ptr<LoaderCore> self) {
  for (;;) {
    RequestMore();
    absl::MutexLock lock(&mu_);
    // Before any ready batch: a cancelled loader hands out nothing more.
    if (cancelled_) return absl::CancelledError("the loader was cancelled");
    if (!epoch_started_) {
      return absl::FailedPreconditionError(
          "Next() before StartEpoch() or Restore()");
    }
    if (next_batch_ >= opened_.batches_per_epoch()) {
      return absl::OutOfRangeError(absl::StrCat(
          "end of epoch ", epoch_, ": all ", opened_.batches_per_epoch(),
          " batches returned"));
    }
    const Key key{epoch_, next_batch_};
    auto resolved = [this, &key]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      const int index = FindLocked(key);
      return index < 0 || slots_[index].state == SlotState::kReady ||
             slots_[index].state == SlotState::kFailed || !error_.ok() ||
             shutdown_ || cancelled_;
    };
    mu_.Await(absl::Condition(&resolved));
    if (cancelled_) return absl::CancelledError("the loader was cancelled");
    const int index = FindLocked(key);
    if (index >= 0 && slots_[index].state == SlotState::kReady) {
      Slot& slot = slots_[index];
      pending_.erase(key);
      slot.state = SlotState::kLeased;
      Batch batch;
      batch.epoch = key.first;
      batch.batch_index = key.second;
      const BatchHeader& header = slot.header;
      batch.sample_indices.assign(header.sample_indices().begin(),
                                  header.sample_indices().end());
      batch.labels.assign(header.labels().begin(), header.labels().end());
      batch.shape.assign(header.shape().begin(), header.shape().end());
      batch.layout = header.layout() == batchd::v1::LAYOUT_UNSPECIFIED
                         ? batchd::v1::LAYOUT_NHWC
                         : header.layout();
      batch.substitutions.assign(header.substitutions().begin(),
                                 header.substitutions().end());
      batch.core_ = std::move(self);
      batch.slot_ = index;
      batch.data_ = slot.data();
      batch.size_ = static_cast<size_t>(header.total_bytes());
      slot.header.Clear();
      ++next_batch_;
      ++stats_.batches;
      stats_.images += batch.sample_indices.size();
      stats_.bytes += batch.size_;
      stats_.last_step.copy = slot.copy;
      slot.copy = absl::ZeroDuration();
      if (slot.daemon >= 0) ++daemons_[slot.daemon].consumed_since_report;
      return batch;
    }
    if (index >= 0 && slots_[index].state == SlotState::kFailed) {
      // The position stays; the next call asks for this batch again.
      absl::Status rejection = slots_[index].error;
      FreeLocked(index);
      return rejection;
    }
    if (!error_.ok()) return error_;
    if (shutdown_) return absl::CancelledError("the loader is shutting down");
    // Not requested yet: request it, unless every slot is leased.
    bool any_free = false;
    for (const Slot& slot : slots_) {
      if (slot.state == SlotState::kFree) any_free = true;
    }
    if (!any_free) {
      bool all_leased = true;
      for (const Slot& slot : slots_) {
        if (slot.state != SlotState::kLeased &&
            slot.state != SlotState::kInactive) {
          all_leased = false;
        }
      }
      if (all_leased) {
        return absl::FailedPreconditionError(absl::StrCat(
            "all ", active_slots_,
            " ring slots are held by unreleased Batch objects; release one "
            "before calling Next()"));
      }
      // Slots are busy with orphaned batches; wait for one to free up.
      auto slot_freed = [this, &key]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        if (FindLocked(key) >= 0 || !error_.ok() || shutdown_ || cancelled_) {
          return true;
        }
        for (const Slot& slot : slots_) {
          if (slot.state == SlotState::kFree) return true;
        }
        return false;
      };
      mu_.Await(absl::Condition(&slot_freed));
    }
  }
}

void LoaderCore::ReleaseSlot(int index) {
  {
    absl::MutexLock lock(&mu_);
    if (index < 0 || static_cast<size_t>(index) >= slots_.size() ||
        slots_[index].state != SlotState::kLeased) {
      return;
    }
    FreeLocked(index);
  }
  RequestMore();
}

LoaderState LoaderCore::state() const {
  absl::MutexLock lock(&mu_);
  return LoaderState{epoch_, next_batch_};
}

Loader::Stats LoaderCore::stats() const {
  absl::MutexLock lock(&mu_);
  Loader::Stats stats = stats_;
  stats.wall = absl::Now() - created_;
  stats.prefetch = static_cast<uint32_t>(active_slots_);
  stats.rerequested = scheduler_.rerequested();
  stats.hedged = scheduler_.hedged();
  for (size_t i = 0; i < daemons_.size(); ++i) {
    const Daemon& d = daemons_[i];
    const int id = static_cast<int>(i);
    const RequestScheduler::DaemonCounters& c = scheduler_.counters(id);
    DaemonStats out;
    out.endpoint = d.endpoint;
    switch (d.state) {
      case DaemonState::kConnecting: out.state = "connecting"; break;
      case DaemonState::kUp:
        out.state = scheduler_.Accepting(id) ? "up" : "draining";
        break;
      case DaemonState::kDown: out.state = "down"; break;
      case DaemonState::kFailed: out.state = "failed"; break;
      case DaemonState::kRemoved: out.state = "removed"; break;
    }
    out.requested = c.requested;
    out.served = c.served;
    out.lost = c.lost;
    out.hedges = c.hedges;
    out.discarded = c.discarded;
    out.cancelled = c.cancelled;
    out.latency = c.latency_ewma;
    out.last_error = d.last_error;
    out.transport = d.ring != nullptr ? "shared-memory"
                    : absl::StartsWith(d.endpoint, "unix:") ? "unix"
                                                            : "tcp";
    stats.daemons.push_back(std::move(out));
  }
  return stats;
}

}  // namespace internal

Batch::Batch(Batch&& other) noexcept { *this = std::move(other); }

Batch& Batch::operator=(Batch&& other) noexcept {
  if (this == &other) return *this;
  Release();
  BatchInfo::operator=(std::move(other));
  shape = std::move(other.shape);
  layout = other.layout;
  core_ = std::move(other.core_);
  slot_ = std::exchange(other.slot_, -1);
  data_ = std::exchange(other.data_, nullptr);
  size_ = std::exchange(other.size_, 0);
  return *this;
}

Batch::~Batch() { Release(); }

void Batch::Release() {
  if (core_ != nullptr) {
    std::shared_ptr<internal::LoaderCore> core = std::move(core_);
    core->ReleaseSlot(slot_);
  }
  slot_ = -1;
  data_ = nullptr;
  size_ = 0;
}

absl::StatusOr<std::unique_ptr<Loader>> Loader::Create(LoaderOptions options) {
  // Receiving 4 MiB messages without this costs ~6x the CPU (see the header).
  common::TuneMallocForLargeBuffers();
  auto core = std::make_shared<internal::LoaderCore>(std::move(options));
  absl::Status status = core->Open();
  if (!status.ok()) {
    core->Shutdown();
    return status;
  }
  return std::unique_ptr<Loader>(new Loader(std::move(core)));
}

Loader::Loader(std::shared_ptr<internal::LoaderCore> core)
    : core_(std::move(core)) {}

Loader::~Loader() { core_->Shutdown(); }

const batchd::v1::PlanOpened& Loader::opened() const { return core_->opened(); }

uint64_t Loader::batches_per_epoch() const {
  return core_->opened().batches_per_epoch();
}

uint32_t Loader::window() const { return core_->window(); }

absl::Status Loader::StartEpoch(uint64_t epoch, uint64_t first_batch) {
  return core_->StartEpoch(epoch, first_batch);
}

absl::StatusOr<Batch> Loader::Next() { return core_->Next(core_); }

LoaderState Loader::state() const { return core_->state(); }

absl::Status Loader::Restore(const LoaderState& state) {
  return StartEpoch(state.epoch, state.next_batch);
}

Loader::Stats Loader::stats() const { return core_->stats(); }

void Loader::Cancel() { core_->Cancel(); }

void Loader::RecordCopy(absl::Duration duration) {
  core_->RecordCopy(duration);
}

Diagnosis Loader::Diagnose() { return core_->Diagnose(); }

std::string Loader::epoch_diagnosis() const {
  return core_->epoch_diagnosis();
}

}  // namespace batchd::client
