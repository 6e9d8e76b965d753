// DaemonSet, part 1: starting and stopping, and what the loader reports.
// The consumer's window and the requests that go out are in
// daemon_set_window.cc, the supervisor in daemon_set_supervisor.cc, the
// responses that come back in daemon_set_sink.cc.
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
// Before the first daemon opens the plan (Start), a refused daemon is tried
// again at least this often: it may be starting.
constexpr absl::Duration kStartRetryInterval = absl::Milliseconds(250);

DaemonRoster::Options RosterOptions(const LoaderOptions& options,
                                    absl::Time created) {
  DaemonRoster::Options roster;
  roster.reconnect_backoff_min = options.reconnect_backoff_min;
  roster.reconnect_backoff_max = options.reconnect_backoff_max;
  roster.jitter_seed = static_cast<uint32_t>(absl::ToUnixNanos(created));
  return roster;
}

DaemonWatch::Options WatchOptions(const LoaderOptions& options) {
  DaemonWatch::Options watch;
  watch.stall_timeout = options.stall_timeout;
  watch.progress_timeout = options.batch_progress_timeout;
  watch.unavailable_timeout = options.unavailable_timeout;
  return watch;
}

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
      roster_(RosterOptions(options_, created_)),
      // No daemon is up yet: the unavailable clock runs from the start.
      watch_(WatchOptions(options_), /*unavailable_since=*/created_),
      scheduler_(SchedulerOptions(options_)),
      ring_(allocator_, RingOptions(options_)) {}

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
  // that comes up a little after the trainer is found at once. A daemon
  // that refused the stream with RESOURCE_EXHAUSTED (full, or this caller
  // holds its share) is up: it waits out its backoff, jittered and capped
  // (DaemonRoster), so that refused clients do not retry in step.
  std::vector<absl::Time> tried(daemons_.size(), start);
  const auto refused = [this](int id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return roster_.last_error(id).code() ==
           absl::StatusCode::kResourceExhausted;
  };
  auto decided = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return opened_received_ || !error_.ok() ||
           roster_.CountIn(DaemonState::kFailed) > 0;
  };
  std::vector<std::shared_ptr<DaemonStream>> finished;
  for (;;) {
    auto retry_at = [&tried, &refused, this](int id)
                        ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      if (refused(id)) return roster_.retry_at(id);
      return std::min(roster_.retry_at(id), tried[id] + kStartRetryInterval);
    };
    absl::Time wake = deadline;
    for (int id = 0; id < roster_.size(); ++id) {
      if (roster_.state(id) == DaemonState::kDown && roster_.in_dns(id)) {
        wake = std::min(wake, retry_at(id));
      }
    }
    // Also wakes when a daemon goes down, to schedule its retry.
    const int down = roster_.CountIn(DaemonState::kDown);
    auto changed = [this, &decided,
                    down]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return decided() || roster_.CountIn(DaemonState::kDown) > down;
    };
    mu_.AwaitWithDeadline(absl::Condition(&changed), wake);
    if (decided()) break;
    const absl::Time now = absl::Now();
    if (now >= deadline) break;
    for (int id = 0; id < roster_.size(); ++id) {
      Daemon& d = daemons_[id];
      if (roster_.state(id) != DaemonState::kDown || !roster_.in_dns(id) ||
          now < retry_at(id)) {
        continue;
      }
      // The ended stream's reader thread is joined outside mu_.
      if (d.stream != nullptr) finished.push_back(std::move(d.stream));
      // A channel that failed to connect waits out gRPC's own backoff
      // (seconds) before it tries again, and fails calls at once
      // meanwhile: a fresh connection is tried now. (A refusal came over
      // a working connection: it is kept.)
      if (!refused(id)) {
        d.channel = NewBatchdChannel(roster_.endpoint(id), security_,
                                     /*fresh_connection=*/true);
      }
      ConnectLocked(id);
      tried[id] = now;
    }
    if (!finished.empty()) {
      mu_.Unlock();
      finished.clear();
      mu_.Lock();
    }
  }
  if (opened_received_) {
    // Failed attempts before a daemon was up do not count against it.
    for (int id = 0; id < roster_.size(); ++id) {
      if (roster_.state(id) == DaemonState::kUp) MarkRecoveredLocked(id);
    }
  }
  if (opened_received_) return absl::OkStatus();
  if (!error_.ok()) return error_;
  return NotOpenedError();
}

absl::Status DaemonSet::NotOpenedError() const {
  // A daemon's verdict on the plan says most; then a lost connection.
  for (int id = 0; id < roster_.size(); ++id) {
    if (roster_.state(id) == DaemonState::kFailed) {
      return roster_.last_error(id);
    }
  }
  // A daemon that kept refusing the stream for want of room: its message
  // says which limit and whose.
  for (int id = 0; id < roster_.size(); ++id) {
    const absl::Status& error = roster_.last_error(id);
    if (error.code() == absl::StatusCode::kResourceExhausted) {
      return absl::ResourceExhaustedError(absl::StrCat(
          error.message(), " (asked again with backoff for ",
          absl::FormatDuration(options_.connect_timeout),
          ", LoaderOptions.connect_timeout)"));
    }
  }
  std::vector<std::string> why;
  bool connected = false;
  for (int id = 0; id < roster_.size(); ++id) {
    if (daemons_[id].channel->GetState(false) == GRPC_CHANNEL_READY) {
      connected = true;
    }
    const std::string& endpoint = roster_.endpoint(id);
    const absl::Status& error = roster_.last_error(id);
    why.push_back(error.ok() ? endpoint
                             : absl::StrCat(endpoint, " (", error.message(),
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
  roster_.Add(endpoint);
  watch_.Add();
  receipts_.Add();
  Daemon d;
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
  roster_.Connecting(id);
  d.opened = false;
  watch_.Connecting(id, absl::Now());
  receipts_.Reset(id);
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

// ---- Health of the set ----

void DaemonSet::StartUnavailableClockLocked(absl::Time now) {
  watch_.NoteAccepting(scheduler_.accepting_daemons(), now);
}

void DaemonSet::MarkRecoveredLocked(int daemon) {
  roster_.Recovered(daemon);
  watch_.Recovered();
}

// ---- What the loader reports ----

std::shared_ptr<grpc::Channel> DaemonSet::BusiestChannel() const {
  absl::MutexLock lock(&mu_);
  std::shared_ptr<grpc::Channel> channel;
  uint64_t best = 0;
  for (size_t i = 0; i < daemons_.size(); ++i) {
    const uint64_t served = scheduler_.counters(static_cast<int>(i)).served;
    if (roster_.state(static_cast<int>(i)) == DaemonState::kUp &&
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
  stats.received_bytes += receipts_.received_bytes();
  stats.copy += receipts_.copy();
  stats.reports_sent = reports_sent_;
  stats.reports_rejected = reports_rejected_;
  stats.prefetch = static_cast<uint32_t>(ring_.active());
  stats.prefetch_grows = prefetch_grows_;
  stats.transport = transport_;
  stats.transport_note = transport_note_;
  stats.rerequested = scheduler_.rerequested();
  stats.hedged = scheduler_.hedged();
  stats.progress_cancels = watch_.progress_cancels();
  for (size_t i = 0; i < daemons_.size(); ++i) {
    const Daemon& d = daemons_[i];
    const int id = static_cast<int>(i);
    const RequestScheduler::DaemonCounters& c = scheduler_.counters(id);
    DaemonStats out;
    const std::string& endpoint = roster_.endpoint(id);
    out.endpoint = endpoint;
    out.state = roster_.StateName(id, scheduler_.Accepting(id));
    out.requested = c.requested;
    out.served = c.served;
    out.lost = c.lost;
    out.hedges = c.hedges;
    out.discarded = c.discarded;
    out.cancelled = c.cancelled;
    out.latency = c.latency_ewma;
    out.last_error = roster_.last_error(id);
    out.transport = d.ring != nullptr ? "shared-memory"
                    : absl::StartsWith(endpoint, "unix:") ? "unix"
                                                          : "tcp";
    stats.daemons.push_back(std::move(out));
  }
}

}  // namespace batchd::client
