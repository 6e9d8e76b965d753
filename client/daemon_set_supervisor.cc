// DaemonSet, part 3: the supervisor thread. Every tick it reconnects lost
// daemons, cancels silent or frozen streams (DaemonWatch), lets the
// scheduler assign and hedge, sends TrainerReports, grows the ring under
// auto_prefetch, and looks the DNS name up again when due (DaemonRoster).
#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/daemon_set.h"
#include "client/daemon_status.h"
#include "common/daemon_verdict.h"

namespace batchd::client {
namespace {

// The supervisor's period: stall, hedge, reconnect and deadline checks.
constexpr absl::Duration kSupervisorTick = absl::Milliseconds(20);
// When batches stop, the daemons are asked why (their status names a
// failing or slow object store); at most this many, each for at most
// kWhyStalledTimeout, so the error comes at most a few seconds later.
constexpr int kMaxDaemonsAsked = 4;
constexpr absl::Duration kWhyStalledTimeout = absl::Seconds(1);

// What the daemons' statuses say about their object stores, e.g. "the
// object store for dataset \"d\" is slow (...) (daemon localhost:1
// reports it)"; empty when none names one or none answers.
std::string WhyStalled(
    const std::vector<std::pair<std::string, std::shared_ptr<grpc::Channel>>>&
        daemons) {
  std::string out;
  for (const auto& [endpoint, channel] : daemons) {
    absl::StatusOr<batchd::v1::ServerStatus> status =
        FetchServerStatus(channel, kWhyStalledTimeout);
    if (!status.ok()) continue;
    for (const batchd::v1::StoreFaultStatus& fault :
         status->object_store().recent_faults()) {
      absl::StrAppend(&out, out.empty() ? "" : "; ",
                      common::StoreFaultLine(fault), " (daemon ", endpoint,
                      " reports it)");
    }
  }
  return out;
}

}  // namespace

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
    // Set when batches stopped for unavailable_timeout: the daemons to ask
    // why, outside mu_, before the error is set.
    bool stalled = false;
    std::string stalled_summary;
    std::vector<std::pair<std::string, std::shared_ptr<grpc::Channel>>> ask;
    bool resolve = false;
    size_t grow = 0;
    {
      absl::MutexLock lock(&mu_);
      if (shutdown_) return;
      for (int id = 0; id < roster_.size(); ++id) {
        SuperviseLocked(id, now, finished);
      }
      if (error_.ok() && !cancelled_ && watch_.Unavailable(now)) {
        stalled = true;
        stalled_summary = roster_.Summary();
        for (int id = 0; id < roster_.size() &&
                         static_cast<int>(ask.size()) < kMaxDaemonsAsked;
             ++id) {
          if (daemons_[id].channel != nullptr) {
            ask.emplace_back(roster_.endpoint(id), daemons_[id].channel);
          }
        }
      }
      if (error_.ok()) outgoing = ScheduleLocked();
      for (Outgoing& report : ReportsLocked(now, trainer)) {
        outgoing.push_back(std::move(report));
      }
      // After scheduling: a reconnected daemon given no work (the ring is
      // full) has nothing to prove; one given work proves itself by
      // delivering (FinishReceiptLocked).
      for (int id = 0; id < roster_.size(); ++id) {
        if (roster_.state(id) == DaemonState::kUp &&
            roster_.failures(id) > 0 && scheduler_.Accepting(id) &&
            scheduler_.outstanding(id) == 0) {
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
    if (stalled) {
      // A daemon that is up but waits on its object store is not "down":
      // the error names the store when a daemon says so.
      const std::string store = WhyStalled(ask);
      absl::MutexLock lock(&mu_);
      if (error_.ok() && !cancelled_) {
        error_ = absl::UnavailableError(
            store.empty()
                ? absl::StrCat("no batchd daemon was up and delivering for ",
                               absl::FormatDuration(
                                   options_.unavailable_timeout),
                               ": ", stalled_summary)
                : absl::StrCat("no batch for ",
                               absl::FormatDuration(
                                   options_.unavailable_timeout),
                               ": ", store, "; daemons: ", stalled_summary));
      }
    }
    if (grow > 0) GrowRing(grow);
    if (resolve) Resolve();
  }
}

void DaemonSet::SuperviseLocked(
    int id, absl::Time now,
    std::vector<std::shared_ptr<DaemonStream>>& finished) {
  Daemon& d = daemons_[id];
  if (d.stream != nullptr && d.stream->done()) {
    finished.push_back(std::move(d.stream));
    d.stream.reset();
  }
  if (!error_.ok()) return;
  if (d.stream == nullptr && roster_.DueForRetry(id, now)) ConnectLocked(id);
  const bool up = roster_.state(id) == DaemonState::kUp && d.stream != nullptr;
  // Silence with batches owed, or a batch frozen mid-send: the stream goes
  // and its batches go to the others.
  DaemonWatch::Facts facts;
  facts.streaming = up;
  facts.owed = scheduler_.outstanding(id);
  facts.others_accepting =
      scheduler_.accepting_daemons() - (scheduler_.Accepting(id) ? 1 : 0);
  const BatchReceipts::Receipt& receipt = receipts_.receipt(id);
  facts.receiving = receipt.active;
  facts.epoch = receipt.key.first;
  facts.batch_index = receipt.key.second;
  facts.received = receipt.received;
  facts.total = receipt.total;
  if (watch_.ShouldCancel(id, roster_.endpoint(id), now, facts)) {
    d.stream->Cancel();
  }
  // Gone from DNS and nothing owed: close its stream.
  if (!roster_.in_dns(id) && up && scheduler_.outstanding(id) == 0) {
    d.stream->WritesDone();
  }
}

void DaemonSet::Resolve() {
  const Resolver& resolve =
      options_.resolver ? options_.resolver : Resolver(ResolveWithSystem);
  absl::StatusOr<std::vector<std::string>> resolved =
      resolve(spec_.dns_host, spec_.dns_port);
  if (!resolved.ok()) return;  // keep what we have; try next period
  absl::MutexLock lock(&mu_);
  const DaemonRoster::Reconciled changes =
      roster_.Reconcile(*resolved, absl::Now());
  for (int id : changes.draining) scheduler_.DaemonDraining(id);
  if (!error_.ok()) return;
  for (const std::string& address : changes.added) {
    ConnectLocked(AddDaemonLocked(address));
  }
}

size_t DaemonSet::PrefetchGrowthLocked(absl::Time now,
                                       const TrainerClock::Reading& trainer) {
  if (!options_.auto_prefetch || !ring_.built()) return 0;
  return growth_.Look(now,
                      {trainer.steady_steps, trainer.waited_steps,
                       trainer.steady_waited},
                      ring_.active(), ring_.capacity());
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
  for (int id = 0; id < roster_.size(); ++id) {
    Daemon& d = daemons_[id];
    const uint64_t consumed = d.consumed_since_report;
    d.consumed_since_report = 0;
    if (roster_.state(id) != DaemonState::kUp || !d.opened ||
        d.stream == nullptr) {
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

void DaemonSet::CheckAllFailedLocked() {
  if (!error_.ok()) return;
  // A DNS name may bring new daemons; a fixed list cannot.
  error_ = roster_.AllFailedError(/*may_grow=*/spec_.uses_dns());
}

}  // namespace batchd::client
