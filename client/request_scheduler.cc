#include "client/request_scheduler.h"

#include <algorithm>
#include <limits>

namespace batchd::client {

namespace {
// gRPC's UNAVAILABLE: a daemon that drains rejects new requests with it.
constexpr int kUnavailableCode = 14;
// gRPC's CANCELLED: the answer to a CancelBatches that withdrew the copy.
constexpr int kCancelledCode = 1;
}  // namespace

RequestScheduler::RequestScheduler(Options options)
    : options_(std::move(options)) {}

int RequestScheduler::AddDaemon() {
  daemons_.emplace_back();
  return static_cast<int>(daemons_.size()) - 1;
}

void RequestScheduler::DaemonUp(int daemon, uint32_t window) {
  Daemon& d = daemons_[daemon];
  d.up = true;
  d.draining = false;
  d.window = window;
  d.outstanding = 0;
}

std::vector<RequestScheduler::Key> RequestScheduler::DaemonDown(int daemon) {
  Daemon& d = daemons_[daemon];
  d.up = false;
  d.draining = false;
  d.outstanding = 0;
  // Its stream is gone, and with it the copies those cancels were for.
  for (auto it = cancels_.begin(); it != cancels_.end();) {
    it = it->first.first == daemon ? cancels_.erase(it) : std::next(it);
  }
  std::vector<Key> reset;
  for (auto it = entries_.begin(); it != entries_.end();) {
    Entry& entry = it->second;
    auto copy = std::find_if(entry.copies.begin(), entry.copies.end(),
                             [daemon](const Copy& c) { return c.daemon == daemon; });
    if (copy == entry.copies.end()) {
      ++it;
      continue;
    }
    entry.copies.erase(copy);
    ++d.counters.lost;
    if (entry.claimed_by == daemon) {
      entry.claimed_by = -1;
      reset.push_back(it->first);
    }
    // Nobody can answer it any more: Schedule() asks another daemon.
    if (entry.wanted && entry.claimed_by < 0 && !HasClaimableCopy(entry)) {
      ++rerequested_;
      entry.hedged = false;
    }
    auto next = std::next(it);
    EraseIfIdle(it);
    it = next;
  }
  return reset;
}

void RequestScheduler::DaemonDraining(int daemon) {
  daemons_[daemon].draining = true;
}

bool RequestScheduler::IsUp(int daemon) const { return daemons_[daemon].up; }

bool RequestScheduler::Accepting(int daemon) const {
  return daemons_[daemon].up && !daemons_[daemon].draining;
}

int RequestScheduler::accepting_daemons() const {
  int n = 0;
  for (size_t i = 0; i < daemons_.size(); ++i) {
    if (Accepting(static_cast<int>(i))) ++n;
  }
  return n;
}

uint32_t RequestScheduler::outstanding(int daemon) const {
  return daemons_[daemon].outstanding;
}

void RequestScheduler::Want(const Key& key) { entries_[key].wanted = true; }

void RequestScheduler::Unwant(const Key& key) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return;
  it->second.wanted = false;
  // The slot is gone: a copy being received is read past from now on.
  it->second.claimed_by = -1;
  CancelCopies(key, it->second, /*keep=*/-1);
  EraseIfIdle(it);
}

bool RequestScheduler::HasClaimableCopy(const Entry& entry) {
  return std::any_of(entry.copies.begin(), entry.copies.end(),
                     [](const Copy& c) { return !c.headered && !c.cancelling; });
}

void RequestScheduler::CancelCopies(const Key& key, Entry& entry, int keep) {
  for (Copy& c : entry.copies) {
    if (c.daemon == keep || c.headered || c.cancelling) continue;
    c.cancelling = true;
    cancels_[{c.daemon, key.first}].push_back(key.second);
  }
}

std::vector<RequestScheduler::Request> RequestScheduler::TakeCancels() {
  std::vector<Request> requests;
  for (auto& [where, indices] : cancels_) {
    std::sort(indices.begin(), indices.end());
    requests.push_back(Request{where.first, where.second, std::move(indices)});
  }
  cancels_.clear();
  return requests;
}

void RequestScheduler::DropCopy(int daemon, const Key& key) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return;
  std::vector<Copy>& copies = it->second.copies;
  auto copy = std::find_if(copies.begin(), copies.end(),
                           [daemon](const Copy& c) { return c.daemon == daemon; });
  if (copy == copies.end()) return;
  copies.erase(copy);
  Daemon& d = daemons_[daemon];
  if (d.outstanding > 0) --d.outstanding;
  EraseIfIdle(it);
}

void RequestScheduler::EraseIfIdle(std::map<Key, Entry>::iterator it) {
  if (!it->second.wanted && it->second.copies.empty()) entries_.erase(it);
}

int RequestScheduler::PickDaemon(const Entry& entry) const {
  // Daemons without a latency yet are assumed as fast as the fastest known,
  // so that a new daemon gets work at once.
  absl::Duration fastest = absl::InfiniteDuration();
  for (const Daemon& d : daemons_) {
    if (d.up && d.counters.latency_ewma > absl::ZeroDuration()) {
      fastest = std::min(fastest, d.counters.latency_ewma);
    }
  }
  if (fastest == absl::InfiniteDuration()) fastest = absl::Milliseconds(1);
  int best = -1;
  double best_cost = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < daemons_.size(); ++i) {
    const Daemon& d = daemons_[i];
    if (!d.up || d.draining || d.outstanding >= d.window) continue;
    const bool holds = std::any_of(
        entry.copies.begin(), entry.copies.end(),
        [i](const Copy& c) { return c.daemon == static_cast<int>(i); });
    if (holds) continue;
    const absl::Duration latency = d.counters.latency_ewma > absl::ZeroDuration()
                                       ? d.counters.latency_ewma
                                       : fastest;
    const double cost =
        (d.outstanding + 1) * absl::ToDoubleSeconds(latency);
    if (cost < best_cost) {
      best_cost = cost;
      best = static_cast<int>(i);
    }
  }
  return best;
}

std::vector<RequestScheduler::Request> RequestScheduler::Schedule(
    absl::Time now) {
  // (daemon, epoch) -> indices; std::map keeps indices ascending per key.
  std::map<std::pair<int, uint64_t>, std::vector<uint64_t>> batches;
  auto send = [&](const Key& key, Entry& entry, int daemon) {
    entry.copies.push_back(Copy{daemon, now, false});
    Daemon& d = daemons_[daemon];
    ++d.outstanding;
    ++d.counters.requested;
    batches[{daemon, key.first}].push_back(key.second);
  };
  // New assignments, lowest (epoch, index) first: the consumer needs those
  // soonest.
  for (auto& [key, entry] : entries_) {
    if (!entry.wanted || entry.claimed_by >= 0 || HasClaimableCopy(entry)) {
      continue;
    }
    const int daemon = PickDaemon(entry);
    if (daemon < 0) break;  // no spare window anywhere
    send(key, entry, daemon);
  }
  // Hedges: slow against the recent median, or no progress at all.
  const absl::Duration median = median_latency();
  const bool by_latency = options_.hedge_factor > 0 &&
                          latencies_.size() >= options_.min_latency_samples;
  const bool by_progress = options_.progress_timeout > absl::ZeroDuration();
  if ((by_latency || by_progress) && accepting_daemons() >= 2) {
    const absl::Duration after =
        std::max(options_.min_hedge_delay, median * options_.hedge_factor);
    for (auto& [key, entry] : entries_) {
      if (!entry.wanted || entry.claimed_by >= 0 || entry.hedged ||
          entry.copies.empty()) {
        continue;
      }
      absl::Time first = entry.copies.front().sent;
      for (const Copy& c : entry.copies) first = std::min(first, c.sent);
      const bool slow = by_latency && now - first >= after;
      if (!slow && !(by_progress && NoProgress(entry, now))) continue;
      const int daemon = PickDaemon(entry);
      if (daemon < 0) continue;
      entry.hedged = true;
      ++hedged_;
      ++daemons_[daemon].counters.hedges;
      send(key, entry, daemon);
    }
  }
  std::vector<Request> requests;
  for (auto& [where, indices] : batches) {
    requests.push_back(Request{where.first, where.second, std::move(indices)});
  }
  return requests;
}

bool RequestScheduler::NoProgress(const Entry& entry, absl::Time now) const {
  for (const Copy& c : entry.copies) {
    const absl::Time since =
        std::max(c.sent, daemons_[c.daemon].last_progress);
    if (now - since < options_.progress_timeout) return false;
  }
  return true;
}

void RequestScheduler::OnProgress(int daemon, absl::Time now) {
  Daemon& d = daemons_[daemon];
  d.last_progress = std::max(d.last_progress, now);
}

RequestScheduler::Claim RequestScheduler::OnHeader(int daemon,
                                                   const Key& key) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return Claim::kDiscard;
  Entry& entry = it->second;
  for (Copy& c : entry.copies) {
    if (c.daemon == daemon) c.headered = true;
  }
  if (!entry.wanted || entry.claimed_by >= 0) {
    ++daemons_[daemon].counters.discarded;
    return Claim::kDiscard;
  }
  entry.claimed_by = daemon;
  CancelCopies(key, entry, /*keep=*/daemon);
  return Claim::kAccept;
}

void RequestScheduler::OnComplete(int daemon, const Key& key, absl::Time now) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return;
  Entry& entry = it->second;
  if (entry.claimed_by == daemon) {
    for (const Copy& c : entry.copies) {
      if (c.daemon != daemon) continue;
      const absl::Duration latency = now - c.sent;
      latencies_.push_back(latency);
      while (latencies_.size() > options_.latency_window) latencies_.pop_front();
      DaemonCounters& counters = daemons_[daemon].counters;
      counters.latency_ewma =
          counters.latency_ewma == absl::ZeroDuration()
              ? latency
              : counters.latency_ewma * 0.8 + latency * 0.2;
      ++counters.served;
    }
    entry.claimed_by = -1;
    entry.wanted = false;  // done: the slot has it
  }
  DropCopy(daemon, key);
}

RequestScheduler::RejectionOutcome RequestScheduler::OnRejected(
    int daemon, const Key& key, int code) {
  auto it = entries_.find(key);
  const bool wanted = it != entries_.end() && it->second.wanted;
  if (code == kCancelledCode) {
    // The withdrawn copy: if the claiming copy was lost meanwhile, the
    // batch has no claimable copy left and Schedule() asks again.
    ++daemons_[daemon].counters.cancelled;
    DropCopy(daemon, key);
    return RejectionOutcome::kIgnore;
  }
  if (code == kUnavailableCode) {
    // A draining daemon: it takes nothing new, and the batch goes elsewhere.
    DaemonDraining(daemon);
    if (wanted && it->second.claimed_by == daemon) it->second.claimed_by = -1;
    DropCopy(daemon, key);
    return wanted ? RejectionOutcome::kRetryElsewhere : RejectionOutcome::kIgnore;
  }
  if (!wanted) {
    DropCopy(daemon, key);
    return RejectionOutcome::kIgnore;
  }
  // The same request is bad on every daemon: the consumer hears of it, and
  // the batch is no longer wanted (Next() asks again).
  it->second.wanted = false;
  it->second.claimed_by = -1;
  DropCopy(daemon, key);
  return RejectionOutcome::kFail;
}

bool RequestScheduler::HasRequest(int daemon, const Key& key) const {
  auto it = entries_.find(key);
  if (it == entries_.end()) return false;
  return std::any_of(it->second.copies.begin(), it->second.copies.end(),
                     [daemon](const Copy& c) { return c.daemon == daemon; });
}

const RequestScheduler::DaemonCounters& RequestScheduler::counters(
    int daemon) const {
  return daemons_[daemon].counters;
}

absl::Duration RequestScheduler::median_latency() const {
  if (latencies_.empty()) return absl::ZeroDuration();
  std::vector<absl::Duration> sorted(latencies_.begin(), latencies_.end());
  std::nth_element(sorted.begin(), sorted.begin() + sorted.size() / 2,
                   sorted.end());
  return sorted[sorted.size() / 2];
}

size_t RequestScheduler::unassigned() const {
  size_t n = 0;
  for (const auto& [key, entry] : entries_) {
    if (entry.wanted && entry.claimed_by < 0 && !HasClaimableCopy(entry)) ++n;
  }
  return n;
}

}  // namespace batchd::client
