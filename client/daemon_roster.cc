#include "client/daemon_roster.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace batchd::client {

absl::Duration ReconnectBackoff(int failures, absl::Duration min,
                                absl::Duration max) {
  absl::Duration backoff = min;
  for (int i = 1; i < failures && backoff < max; ++i) backoff *= 2;
  return std::min(backoff, max);
}

DaemonRoster::DaemonRoster(Options options)
    : options_(options), jitter_(options.jitter_seed) {}

int DaemonRoster::Add(std::string endpoint) {
  Daemon d;
  d.endpoint = std::move(endpoint);
  daemons_.push_back(std::move(d));
  return size() - 1;
}

bool DaemonRoster::Knows(const std::string& endpoint) const {
  return std::any_of(
      daemons_.begin(), daemons_.end(),
      [&endpoint](const Daemon& d) { return d.endpoint == endpoint; });
}

const std::string& DaemonRoster::endpoint(int daemon) const {
  return daemons_[daemon].endpoint;
}
DaemonRoster::State DaemonRoster::state(int daemon) const {
  return daemons_[daemon].state;
}
bool DaemonRoster::in_dns(int daemon) const { return daemons_[daemon].in_dns; }
const absl::Status& DaemonRoster::last_error(int daemon) const {
  return daemons_[daemon].last_error;
}
int DaemonRoster::failures(int daemon) const {
  return daemons_[daemon].failures;
}
absl::Time DaemonRoster::retry_at(int daemon) const {
  return daemons_[daemon].retry_at;
}

int DaemonRoster::CountIn(State state) const {
  return static_cast<int>(
      std::count_if(daemons_.begin(), daemons_.end(),
                    [state](const Daemon& d) { return d.state == state; }));
}

void DaemonRoster::Connecting(int daemon) {
  daemons_[daemon].state = State::kConnecting;
}

bool DaemonRoster::Up(int daemon) {
  Daemon& d = daemons_[daemon];
  d.state = State::kUp;
  if (d.failures > 0) return false;
  Recovered(daemon);
  return true;
}

void DaemonRoster::Recovered(int daemon) {
  Daemon& d = daemons_[daemon];
  d.failures = 0;
  d.last_error = absl::OkStatus();
}

void DaemonRoster::Stopped(int daemon) {
  daemons_[daemon].state = State::kDown;
}

void DaemonRoster::Ended(int daemon, Next next, absl::Status error,
                         absl::Time now) {
  Daemon& d = daemons_[daemon];
  d.last_error = std::move(error);
  switch (next) {
    case Next::kRemove:
      d.state = State::kRemoved;
      break;
    case Next::kReconnect: {
      d.state = State::kDown;
      ++d.failures;
      const absl::Duration backoff =
          ReconnectBackoff(d.failures, options_.reconnect_backoff_min,
                           options_.reconnect_backoff_max);
      // +-20 %, so that many clients do not retry in step.
      std::uniform_real_distribution<double> spread(0.8, 1.2);
      d.retry_at = now + backoff * spread(jitter_);
      break;
    }
    case Next::kFail:
      d.state = State::kFailed;
      break;
  }
}

bool DaemonRoster::DueForRetry(int daemon, absl::Time now) const {
  const Daemon& d = daemons_[daemon];
  return d.state == State::kDown && d.in_dns && now >= d.retry_at;
}

DaemonRoster::Reconciled DaemonRoster::Reconcile(
    const std::vector<std::string>& listed, absl::Time now) {
  Reconciled changes;
  for (int i = 0; i < size(); ++i) {
    Daemon& d = daemons_[i];
    const bool is_listed =
        std::find(listed.begin(), listed.end(), d.endpoint) != listed.end();
    if (is_listed && !d.in_dns) {
      d.in_dns = true;
      if (d.state == State::kRemoved) {
        d.state = State::kDown;
        d.retry_at = now;
      }
    } else if (!is_listed && d.in_dns) {
      d.in_dns = false;
      changes.draining.push_back(i);
    }
  }
  for (const std::string& address : listed) {
    if (!Knows(address) &&
        std::find(changes.added.begin(), changes.added.end(), address) ==
            changes.added.end()) {
      changes.added.push_back(address);
    }
  }
  return changes;
}

std::string DaemonRoster::Summary() const {
  std::vector<std::string> parts;
  for (const Daemon& d : daemons_) {
    parts.push_back(d.last_error.ok()
                        ? absl::StrCat(d.endpoint, " (never answered)")
                        : absl::StrCat(d.endpoint, " (",
                                       d.last_error.message(), ")"));
  }
  return absl::StrJoin(parts, "; ");
}

absl::Status DaemonRoster::AllFailedError(bool may_grow) const {
  const Daemon* last = nullptr;
  for (const Daemon& d : daemons_) {
    if (d.state != State::kFailed) return absl::OkStatus();
    last = &d;
  }
  if (last == nullptr || may_grow) return absl::OkStatus();
  if (daemons_.size() == 1) return last->last_error;
  return absl::Status(
      last->last_error.code(),
      absl::StrCat("every batchd daemon failed: ", Summary()));
}

const char* DaemonRoster::StateName(int daemon, bool accepting) const {
  switch (daemons_[daemon].state) {
    case State::kConnecting: return "connecting";
    case State::kUp: return accepting ? "up" : "draining";
    case State::kDown: return "down";
    case State::kFailed: return "failed";
    case State::kRemoved: return "removed";
  }
  return "unknown";
}

}  // namespace batchd::client
