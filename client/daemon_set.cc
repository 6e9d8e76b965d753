// DaemonSet, part 1: starting and stopping, the supervisor, and the
// requests that go out. The responses that come back are in
// daemon_set_sink.cc.
#include "client/daemon_set.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/local_address.h"

namespace batchd::client {

using ::batchd::v1::StreamRequest;

namespace {

// How long Shutdown() waits for a clean end of the streams after
// half-closing them before cancelling.
constexpr absl::Duration kCloseGrace = absl::Seconds(2);
// The supervisor's period: stall, hedge, reconnect and deadline checks.
constexpr absl::Duration kSupervisorTick = absl::Milliseconds(20);
// Before the first daemon opens the plan (Start), a refused daemon is tried
// again at least this often: it may be starting.
constexpr absl::Duration kStartRetryInterval = absl::Milliseconds(250);
// auto_prefetch looks at the steps this often, and needs this many in the
// interval to judge.
constexpr absl::Duration kPrefetchLookInterval = absl::Seconds(1);
constexpr uint64_t kPrefetchLookMinSteps = 4;

RequestScheduler::Options SchedulerOptions(const LoaderOptions& options) {
  RequestScheduler::Options scheduler;
  scheduler.hedge_factor = options.hedge_factor;
  scheduler.progress_timeout = options.batch_progress_timeout;
  return scheduler;
}

SlotRing::Options RingOptions(const LoaderOptions& options) {
  SlotRing::Options ring;
  ring.next_epoch_prefetch = options.next_epoch_prefetch;
  ring.last_epoch = options.last_epoch;
  return ring;
}

}  // namespace

uint32_t AskedWindow(const LoaderOptions& options) {
  if (!options.auto_prefetch) return options.prefetch;
  const batchd::v1::Pipeline& pipeline = options.plan.pipeline();
  const uint64_t size = pipeline.has_eval() ? pipeline.eval().size()
                                            : pipeline.train().size();
  const uint64_t batch_bytes = std::max<uint64_t>(
      1, uint64_t{options.plan.batch_size()} * size * size * 3);
  const uint64_t slots = options.auto_prefetch_max_bytes / batch_bytes;
  return static_cast<uint32_t>(std::clamp<uint64_t>(
      slots, std::max<uint32_t>(1, options.prefetch), 1024));
}

DaemonSet::DaemonSet(LoaderOptions options, const TrainerClock* clock)
    : options_(std::move(options)),
      clock_(clock),
      created_(absl::Now()),
      owned_allocator_(options_.allocator == nullptr ? NewHeapAllocator()
                                                     : nullptr),
      allocator_(options_.allocator != nullptr ? options_.allocator
                                               : owned_allocator_.get()),
      scheduler_(SchedulerOptions(options_)),
      ring_(allocator_, RingOptions(options_)),
      jitter_(static_cast<uint32_t>(absl::ToUnixNanos(created_))) {}

DaemonSet::~DaemonSet() { Shutdown(); }

// ---- Start and stop ----

absl::Status DaemonSet::Start() {
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
    absl::Status first = AwaitFirstOpened();
    if (!first.ok()) return first;
  }
  const auto protocol_error = [this](absl::string_view what) {
    return absl::InternalError(absl::StrCat(
        "protocol error from batchd at ", options_.endpoint, ": ", what));
  };
  if (opened_.window() == 0) return protocol_error("the granted window is 0");
  const uint64_t max_batch_bytes = opened_.max_batch_bytes();
  if (max_batch_bytes == 0) return protocol_error("max_batch_bytes is 0");
  if (max_batch_bytes > std::numeric_limits<size_t>::max()) {
    return protocol_error(absl::StrCat("max_batch_bytes ", max_batch_bytes,
                                       " does not fit in memory"));
  }
  const RingSize size =
      SizeRing(options_.prefetch, options_.auto_prefetch,
               options_.auto_prefetch_max_bytes, opened_,
               std::max<size_t>(1, addresses.size()));
  absl::MutexLock lock(&mu_);
  // Nothing has been requested yet, so no reader thread touches a slot.
  // Over shared memory the slots' bytes are the attached ring's.
  absl::Status built = ring_.Build(max_batch_bytes,
                                   EpochBatchesOf(options_.plan, opened_),
                                   size.window, size.most,
                                   /*shared=*/daemons_[0].ring != nullptr);
  if (!built.ok()) return built;
  supervisor_ = std::thread([this] { SupervisorLoop(); });
  return absl::OkStatus();
}

absl::Status DaemonSet::AwaitFirstOpened() {
  // Until the first `opened`, a daemon's verdict, a sticky error or the
  // deadline. A refused or lost connection is no verdict: the daemon may
  // be starting, so it is tried again until `connect_timeout` (the
  // supervisor does that later; it does not run yet).
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + options_.connect_timeout;
  // When each daemon was last tried. Before the first `opened` it is tried
  // at least every kStartRetryInterval, whatever its backoff: a daemon
  // that comes up a little after the trainer is found at once.
  std::vector<absl::Time> tried(daemons_.size(), start);
  auto decided = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (opened_received_ || !error_.ok()) return true;
    for (const Daemon& d : daemons_) {
      if (d.state == DaemonState::kFailed) return true;
    }
    return false;
  };
  std::vector<std::shared_ptr<DaemonStream>> finished;
  for (;;) {
    auto retry_at = [&tried, this](size_t i)
                        ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return std::min(daemons_[i].retry_at, tried[i] + kStartRetryInterval);
    };
    absl::Time wake = deadline;
    for (size_t i = 0; i < daemons_.size(); ++i) {
      if (daemons_[i].state == DaemonState::kDown && daemons_[i].in_dns) {
        wake = std::min(wake, retry_at(i));
      }
    }
    // Also wakes when a daemon goes down, to schedule its retry.
    size_t down = 0;
    for (const Daemon& d : daemons_) down += d.state == DaemonState::kDown;
    auto changed = [this, &decided,
                    down]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      size_t now_down = 0;
      for (const Daemon& d : daemons_) {
        now_down += d.state == DaemonState::kDown;
      }
      return decided() || now_down > down;
    };
    mu_.AwaitWithDeadline(absl::Condition(&changed), wake);
    if (decided()) break;
    const absl::Time now = absl::Now();
    if (now >= deadline) break;
    for (size_t i = 0; i < daemons_.size(); ++i) {
      Daemon& d = daemons_[i];
      if (d.state != DaemonState::kDown || !d.in_dns || now < retry_at(i)) {
        continue;
      }
      // The ended stream's reader thread is joined outside mu_.
      if (d.stream != nullptr) finished.push_back(std::move(d.stream));
      // A channel that failed to connect waits out gRPC's own backoff
      // (seconds) before it tries again, and fails calls at once
      // meanwhile: a fresh connection is tried now.
      d.channel = NewBatchdChannel(d.endpoint, security_,
                                   /*fresh_connection=*/true);
      ConnectLocked(static_cast<int>(i));
      tried[i] = now;
    }
    if (!finished.empty()) {
      mu_.Unlock();
      finished.clear();
      mu_.Lock();
    }
  }
  if (opened_received_) {
    // Failed attempts before a daemon was up do not count against it.
    for (size_t i = 0; i < daemons_.size(); ++i) {
      if (daemons_[i].state == DaemonState::kUp) {
        MarkRecoveredLocked(static_cast<int>(i));
      }
    }
  }
  if (opened_received_) return absl::OkStatus();
  if (!error_.ok()) return error_;
  // A daemon's verdict on the plan says most; then a lost connection.
  for (const Daemon& d : daemons_) {
    if (d.state == DaemonState::kFailed) return d.last_error;
  }
  std::vector<std::string> why;
  bool connected = false;
  for (const Daemon& d : daemons_) {
    if (d.channel->GetState(false) == GRPC_CHANNEL_READY) connected = true;
    why.push_back(d.last_error.ok()
                      ? d.endpoint
                      : absl::StrCat(d.endpoint, " (", d.last_error.message(),
                                     ")"));
  }
  if (connected) {
    return absl::DeadlineExceededError(absl::StrCat(
        "batchd at ", absl::StrJoin(why, ", "),
        " did not answer the plan within ",
        absl::FormatDuration(options_.connect_timeout)));
  }
  return absl::UnavailableError(absl::StrCat(
      "could not connect to batchd at ", absl::StrJoin(why, ", "), " within ",
      absl::FormatDuration(options_.connect_timeout)));
}

int DaemonSet::AddDaemonLocked(const std::string& endpoint) {
  const int id = scheduler_.AddDaemon();
  Daemon d;
  d.endpoint = endpoint;
  d.channel = NewBatchdChannel(endpoint, security_);
  daemons_.push_back(std::move(d));
  return id;
}

void DaemonSet::ConnectLocked(int id) {
  Daemon& d = daemons_[id];
  StreamRequest open;
  *open.mutable_open()->mutable_plan() = options_.plan;
  open.mutable_open()->set_window(AskedWindow(options_));
  open.mutable_open()->set_offer_shared_memory(offer_shared_memory_);
  d.state = DaemonState::kConnecting;
  d.opened = false;
  d.stalled = false;
  d.stall_error = absl::OkStatus();
  d.receipt = Receipt{};
  d.last_message = absl::Now();
  d.stream =
      std::make_shared<DaemonStream>(id, d.channel, std::move(open), this);
}

void DaemonSet::Shutdown() {
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
    if (ring_.AnyInFlight()) clean = false;
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

void DaemonSet::Cancel() {
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
  // are joined by Shutdown().
  for (const auto& stream : streams) stream->Cancel();
}

// ---- The consumer's window ----

uint32_t DaemonSet::window() const {
  absl::MutexLock lock(&mu_);
  return static_cast<uint32_t>(ring_.active());
}

std::pair<uint64_t, uint64_t> DaemonSet::position() const {
  absl::MutexLock lock(&mu_);
  return {ring_.epoch(), ring_.next_batch()};
}

absl::Status DaemonSet::StartEpoch(uint64_t epoch, uint64_t first_batch) {
  {
    absl::MutexLock lock(&mu_);
    if (epoch > std::numeric_limits<uint32_t>::max()) {
      return absl::InvalidArgumentError(
          absl::StrCat("epoch ", epoch, " is beyond 2^32-1"));
    }
    if (const uint64_t batches = ring_.batches_in(epoch);
        first_batch > batches) {
      return absl::InvalidArgumentError(absl::StrCat(
          "first batch ", first_batch, " is beyond epoch ", epoch, "'s ",
          batches, " batches"));
    }
    if (!error_.ok()) return error_;
    for (const Key& key : ring_.Retarget(epoch, first_batch)) {
      scheduler_.Unwant(key);
    }
  }
  RequestMore();
  return absl::OkStatus();
}

absl::StatusOr<SlotRing::Lease> DaemonSet::TakeNext() {
  for (;;) {
    RequestMore();
    absl::MutexLock lock(&mu_);
    // Before any ready batch: a cancelled loader hands out nothing more.
    if (cancelled_) return absl::CancelledError("the loader was cancelled");
    if (!ring_.started()) {
      return absl::FailedPreconditionError(
          "Next() before StartEpoch() or Restore()");
    }
    if (const uint64_t batches = ring_.batches_in(ring_.epoch());
        ring_.next_batch() >= batches) {
      return absl::OutOfRangeError(absl::StrCat("end of epoch ", ring_.epoch(),
                                                ": all ", batches,
                                                " batches returned"));
    }
    const Key key{ring_.epoch(), ring_.next_batch()};
    auto resolved = [this, &key]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      const int index = ring_.Find(key);
      return index < 0 || ring_.state(index) == SlotRing::State::kReady ||
             ring_.state(index) == SlotRing::State::kFailed || !error_.ok() ||
             shutdown_ || cancelled_;
    };
    mu_.Await(absl::Condition(&resolved));
    if (cancelled_) return absl::CancelledError("the loader was cancelled");
    const int index = ring_.Find(key);
    if (index >= 0 && ring_.state(index) == SlotRing::State::kReady) {
      SlotRing::Lease lease = ring_.TakeReady(index);
      if (lease.daemon >= 0) ++daemons_[lease.daemon].consumed_since_report;
      return lease;
    }
    // The position stays; the next call asks for this batch again.
    if (index >= 0 && ring_.state(index) == SlotRing::State::kFailed) {
      return ring_.TakeFailed(index);
    }
    if (!error_.ok()) return error_;
    if (shutdown_) return absl::CancelledError("the loader is shutting down");
    // Not requested yet: request it, unless every slot is leased.
    if (ring_.AnyFree()) continue;
    if (ring_.AllLeased()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "all ", ring_.active(),
          " ring slots are held by unreleased Batch objects; release one "
          "before calling Next()"));
    }
    // Slots are busy with orphaned batches; wait for one to free up.
    auto slot_freed = [this, &key]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return ring_.Find(key) >= 0 || !error_.ok() || shutdown_ ||
             cancelled_ || ring_.AnyFree();
    };
    mu_.Await(absl::Condition(&slot_freed));
  }
}

void DaemonSet::Release(int slot) {
  {
    absl::MutexLock lock(&mu_);
    if (!ring_.Release(slot)) return;
  }
  RequestMore();
}

void DaemonSet::RequestMore() {
  std::vector<Outgoing> outgoing;
  {
    absl::MutexLock lock(&mu_);
    if (!ring_.started() || !ring_.built() || shutdown_ || !error_.ok()) {
      return;
    }
    for (const Key& key : ring_.Reserve()) scheduler_.Want(key);
    outgoing = ScheduleLocked();
  }
  Send(std::move(outgoing));
}

std::vector<DaemonSet::Outgoing> DaemonSet::ScheduleLocked() {
  std::vector<Outgoing> outgoing;
  if (!ring_.built() || shutdown_ || !error_.ok()) return outgoing;
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
      const int slot = ring_.Find(Key{r.epoch, index});
      if (slot < 0) continue;
      request->add_batch_indices(index);
      absl::Status granted = ring_.Grant(slot, d.ring);
      if (!granted.ok()) {
        error_ = granted;
        return {};
      }
      if (d.ring != nullptr) request->add_slots(static_cast<uint32_t>(slot));
    }
    if (request->batch_indices_size() > 0) outgoing.push_back(std::move(out));
  }
  return outgoing;
}

void DaemonSet::Send(std::vector<Outgoing> outgoing) {
  // A failed write means that stream has ended; its reader thread reports
  // why, and the scheduler moves the batches elsewhere.
  for (Outgoing& out : outgoing) out.stream->Send(out.request);
}

// ---- The supervisor: reconnects, DNS, stalls, hedges, the deadline ----

void DaemonSet::SupervisorLoop() {
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return shutdown_ || kick_;
      };
      mu_.AwaitWithTimeout(absl::Condition(&woken), kSupervisorTick);
      if (shutdown_) return;
      kick_ = false;
    }
    const absl::Time now = absl::Now();
    const TrainerClock::Reading trainer = clock_->Read(now);
    std::vector<std::shared_ptr<DaemonStream>> finished;
    std::vector<Outgoing> outgoing;
    bool resolve = false;
    size_t grow = 0;
    {
      absl::MutexLock lock(&mu_);
      if (shutdown_) return;
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
        // A batch frozen mid-send: nothing else comes on its stream until
        // it ends, so the stream goes and its batches go to the others.
        if (d.state == DaemonState::kUp && d.stream != nullptr &&
            !d.stalled && d.receipt.active && ProgressOverdueLocked(id, now)) {
          d.stalled = true;
          d.stall_error = absl::UnavailableError(absl::StrCat(
              "batchd at ", d.endpoint, " sent nothing of batch ",
              d.receipt.key.second, " of epoch ", d.receipt.key.first,
              " for ", absl::FormatDuration(options_.batch_progress_timeout),
              " (", d.receipt.received, " of ", d.receipt.total,
              " bytes received); asked the other daemons"));
          ++progress_cancels_;
          d.stream->Cancel();
        }
        // Gone from DNS and nothing owed: close its stream.
        if (!d.in_dns && d.state == DaemonState::kUp && d.stream != nullptr &&
            scheduler_.outstanding(id) == 0) {
          d.stream->WritesDone();
        }
      }
      if (error_.ok() && !cancelled_ &&
          all_down_since_ != absl::InfiniteFuture() &&
          now - all_down_since_ > options_.unavailable_timeout) {
        error_ = absl::UnavailableError(absl::StrCat(
            "no batchd daemon was up and delivering for ",
            absl::FormatDuration(options_.unavailable_timeout), ": ",
            DaemonSummaryLocked()));
      }
      if (error_.ok()) outgoing = ScheduleLocked();
      for (Outgoing& report : ReportsLocked(now, trainer)) {
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
      grow = PrefetchGrowthLocked(now, trainer);
      resolve = spec_.uses_dns() && now >= next_resolve_;
      if (resolve) next_resolve_ = now + options_.resolve_interval;
    }
    Send(std::move(outgoing));
    finished.clear();  // joins finished reader threads, outside mu_
    if (grow > 0) GrowRing(grow);
    if (resolve) Resolve();
  }
}

bool DaemonSet::ProgressOverdueLocked(int daemon, absl::Time now) const {
  const absl::Duration timeout = options_.batch_progress_timeout;
  if (timeout <= absl::ZeroDuration()) return false;
  // Only where another daemon can take the batch: a single daemon is left
  // to the stall timeout.
  const int others =
      scheduler_.accepting_daemons() - (scheduler_.Accepting(daemon) ? 1 : 0);
  if (others < 1) return false;
  const Daemon& d = daemons_[daemon];
  // Time the reader thread spent pacing itself is not the daemon's.
  return now - std::max(d.last_message, d.link_free) > timeout;
}

void DaemonSet::Resolve() {
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

size_t DaemonSet::PrefetchGrowthLocked(absl::Time now,
                                       const TrainerClock::Reading& trainer) {
  if (!options_.auto_prefetch || !ring_.built() ||
      ring_.active() == ring_.capacity()) {
    return 0;
  }
  PrefetchLook& look = prefetch_look_;
  const PrefetchLook current{now, trainer.steady_steps, trainer.waited_steps,
                             trainer.steady_waited};
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
  return std::min(ring_.capacity() - ring_.active(),
                  std::max<size_t>(1, ring_.active() / 2));
}

void DaemonSet::GrowRing(size_t count) {
  const uint64_t bytes = opened_.max_batch_bytes();
  bool shared = false;
  {
    absl::MutexLock lock(&mu_);
    shared = daemons_[0].ring != nullptr;
    if (shared) {
      // The attached ring already has every slot the ring may grow to.
      ring_.GrowShared(count);
      ++prefetch_grows_;
    }
  }
  if (!shared) {
    std::vector<std::unique_ptr<HostBuffer>> buffers;
    for (size_t i = 0; i < count; ++i) {
      absl::StatusOr<std::unique_ptr<HostBuffer>> buffer =
          allocator_->Allocate(static_cast<size_t>(bytes));
      // Out of (pinned) memory is not an error for the run: the ring keeps
      // the slots it has.
      if (!buffer.ok() || *buffer == nullptr || (*buffer)->size() < bytes) {
        break;
      }
      buffers.push_back(*std::move(buffer));
    }
    absl::MutexLock lock(&mu_);
    const bool any = !buffers.empty();
    ring_.Grow(std::move(buffers));
    if (any) ++prefetch_grows_;
  }
  RequestMore();
}

std::vector<DaemonSet::Outgoing> DaemonSet::ReportsLocked(
    absl::Time now, const TrainerClock::Reading& trainer) {
  std::vector<Outgoing> reports;
  if (options_.report_interval <= absl::ZeroDuration() || !ring_.built() ||
      now < next_report_) {
    return reports;
  }
  next_report_ = now + options_.report_interval;
  // The reading counts the call or the compute in progress, so that a
  // trainer stuck in Next() reports its wait now, not when the batch comes.
  const absl::Duration new_wait = trainer.waited - reported_wait_;
  const absl::Duration new_compute = trainer.compute - reported_compute_;
  reported_wait_ = trainer.waited;
  reported_compute_ = trainer.compute;
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
    ++reports_sent_;
  }
  return reports;
}

// ---- Health of the set ----

void DaemonSet::StartUnavailableClockLocked(absl::Time now) {
  // No daemon takes requests (each is down, draining, failed or gone): a
  // daemon that drains but never ends its stream must not hold Next()
  // forever either.
  if (scheduler_.accepting_daemons() == 0 &&
      all_down_since_ == absl::InfiniteFuture()) {
    all_down_since_ = now;
  }
}

void DaemonSet::MarkRecoveredLocked(int daemon) {
  Daemon& d = daemons_[daemon];
  d.failures = 0;
  d.last_error = absl::OkStatus();
  all_down_since_ = absl::InfiniteFuture();
}

std::string DaemonSet::DaemonSummaryLocked() const {
  std::vector<std::string> parts;
  for (const Daemon& d : daemons_) {
    parts.push_back(d.last_error.ok()
                        ? absl::StrCat(d.endpoint, " (never answered)")
                        : absl::StrCat(d.endpoint, " (",
                                       d.last_error.message(), ")"));
  }
  return absl::StrJoin(parts, "; ");
}

void DaemonSet::CheckAllFailedLocked() {
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

// ---- What the loader reports ----

std::shared_ptr<grpc::Channel> DaemonSet::BusiestChannel() const {
  absl::MutexLock lock(&mu_);
  std::shared_ptr<grpc::Channel> channel;
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
  return channel;
}

void DaemonSet::AddStats(LoaderStats& stats) const {
  absl::MutexLock lock(&mu_);
  stats.received_bytes += received_bytes_;
  stats.copy += copy_;
  stats.reports_sent = reports_sent_;
  stats.reports_rejected = reports_rejected_;
  stats.prefetch = static_cast<uint32_t>(ring_.active());
  stats.prefetch_grows = prefetch_grows_;
  stats.transport = transport_;
  stats.transport_note = transport_note_;
  stats.rerequested = scheduler_.rerequested();
  stats.hedged = scheduler_.hedged();
  stats.progress_cancels = progress_cancels_;
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
}

}  // namespace batchd::client
