#include "server/stream/admission_table.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace batchd::server {
namespace {

constexpr absl::string_view kSendOpen =
    "; a stream must send `open` with its Plan as its first message";

}  // namespace

AdmissionTable::AdmissionTable(Limits limits) : limits_(limits) {}

size_t AdmissionTable::open(const std::string& identity) const {
  auto it = identities_.find(identity);
  return it == identities_.end() ? 0 : it->second.size();
}

AdmissionTable::Decision AdmissionTable::Admit(Handle stream,
                                               const std::string& identity,
                                               const std::string& connection,
                                               absl::Time now) {
  Decision decision;
  // A refusal after a rule ended a stream gives that stream its place back
  // (possible only when Restore left an identity above its cap).
  const auto refuse = [this, &decision](absl::Status status,
                                        const char* bound) {
    for (const Ended& e : decision.ended) {
      entries_.at(e.stream).state =
          e.planless ? State::kPlanless : State::kPlanned;
      Count(e.stream);
    }
    decision.ended.clear();
    decision.status = std::move(status);
    decision.refused_by = bound;
    return decision;
  };
  const auto waited = [this, now](Handle h) {
    return absl::FormatDuration(absl::Trunc(
        now - entries_.at(h).admitted, absl::Milliseconds(1)));
  };
  // 1. Plan-less streams per connection: the connection's oldest goes.
  if (auto c = connections_.find(connection);
      c != connections_.end() &&
      c->second.planless.size() >= limits_.max_planless_per_connection) {
    const Handle oldest = c->second.planless.begin()->second;
    decision.ended.push_back(EndPlanless(
        oldest, "planless_streams_per_connection",
        absl::StrCat("ended to admit a newer stream: connection ", connection,
                     " (", identity, ") had ",
                     limits_.max_planless_per_connection,
                     " streams without a plan, the most "
                     "--max-planless-streams-per-connection allows, and "
                     "this one, its oldest, sent none in ",
                     waited(oldest), kSendOpen)));
  }
  // 2. Streams per identity: its oldest plan-less stream goes, if any.
  if (auto i = identities_.find(identity);
      i != identities_.end() &&
      i->second.size() >= limits_.max_streams_per_identity) {
    const Group& group = i->second;
    const std::string held =
        absl::StrCat("identity ", identity, " has ", group.size(), " of its ",
                     limits_.max_streams_per_identity,
                     " streams (--max-streams-per-identity)");
    if (group.planless.empty()) {
      return refuse(absl::ResourceExhaustedError(absl::StrCat(
                        held,
                        "; close one of its streams, retry later or on "
                        "another daemon, or raise "
                        "--max-streams-per-identity")),
                    "streams_per_identity");
    }
    const Handle oldest = group.planless.begin()->second;
    decision.ended.push_back(EndPlanless(
        oldest, "streams_per_identity",
        absl::StrCat("ended to admit a newer stream: ", held,
                     ", and this one, its oldest without a plan, sent none "
                     "in ",
                     waited(oldest), kSendOpen)));
  }
  // 3. Streams over all: the oldest plan-less stream goes, else the newest
  // stream of an identity above its fair share.
  if (open_ >= limits_.max_open_streams) {
    const std::string full =
        absl::StrCat("batchd has ", open_, " streams open (--max-open-streams)");
    if (!planless_.empty()) {
      const Handle oldest = planless_.begin()->second;
      decision.ended.push_back(EndPlanless(
          oldest, "open_streams",
          absl::StrCat("ended to admit a newer stream: ", full,
                       ", and this one, the oldest without a plan (",
                       entries_.at(oldest).identity, "), sent none in ",
                       waited(oldest), kSendOpen)));
    } else {
      const size_t mine = open(identity);
      const size_t identities = identities_.size() + (mine == 0 ? 1 : 0);
      const size_t share = limits_.max_open_streams / identities;
      const std::string* largest = nullptr;
      size_t most = 0;
      for (const auto& [name, group] : identities_) {
        if (group.size() > most) {
          most = group.size();
          largest = &name;
        }
      }
      const std::string shares = absl::StrCat(
          "its fair share (", limits_.max_open_streams, " among ", identities,
          " identities) is ", share);
      if (mine >= share || largest == nullptr || most <= share) {
        return refuse(
            absl::ResourceExhaustedError(absl::StrCat(
                full, ", and identity ", identity, " holds ", mine,
                " of them; ", shares,
                "; close a stream, retry later or on another daemon, or "
                "raise --max-open-streams")),
            "open_streams");
      }
      const Handle newest = identities_.at(*largest).planned.rbegin()->second;
      decision.ended.push_back(Ended{
          newest,
          absl::ResourceExhaustedError(absl::StrCat(
              "ended to admit a stream of another identity: ", full,
              ", identity ", *largest, " holds ", most,
              " of them, more than its fair share of ", share, " (",
              limits_.max_open_streams, " among ", identities,
              " identities), while identity ", identity, " holds ", mine,
              "; retry later or on another daemon")),
          /*planless=*/false, "fair_share"});
      Uncount(newest);
    }
  }
  Entry& entry = entries_[stream];
  entry = Entry{identity, connection, next_seq_++, now, State::kPlanless};
  Count(stream);
  return decision;
}

AdmissionTable::Ended AdmissionTable::EndPlanless(Handle stream,
                                                  const char* bound,
                                                  std::string why) {
  Uncount(stream);
  return Ended{stream, absl::ResourceExhaustedError(std::move(why)),
               /*planless=*/true, bound};
}

void AdmissionTable::Count(Handle stream) {
  Entry& e = entries_.at(stream);
  if (e.state == State::kPlanless) {
    planless_.emplace(e.seq, stream);
    identities_[e.identity].planless.emplace(e.seq, stream);
    connections_[e.connection].planless.emplace(e.seq, stream);
  } else {
    identities_[e.identity].planned.emplace(e.seq, stream);
  }
  ++open_;
}

void AdmissionTable::Uncount(Handle stream) {
  Entry& e = entries_.at(stream);
  if (e.state == State::kEnding) return;
  auto forget = [&e](absl::flat_hash_map<std::string, Group>& groups,
                     const std::string& key) {
    auto it = groups.find(key);
    if (it == groups.end()) return;
    it->second.planless.erase(e.seq);
    it->second.planned.erase(e.seq);
    if (it->second.size() == 0) groups.erase(it);
  };
  planless_.erase(e.seq);
  forget(identities_, e.identity);
  forget(connections_, e.connection);
  e.state = State::kEnding;
  --open_;
}

void AdmissionTable::PlanArrived(Handle stream) {
  auto it = entries_.find(stream);
  if (it == entries_.end() || it->second.state != State::kPlanless) return;
  Uncount(stream);
  it->second.state = State::kPlanned;
  Count(stream);
}

void AdmissionTable::Restore(Handle stream) {
  auto it = entries_.find(stream);
  if (it == entries_.end() || it->second.state != State::kEnding) return;
  it->second.state = State::kPlanned;
  Count(stream);
}

void AdmissionTable::Remove(Handle stream) {
  auto it = entries_.find(stream);
  if (it == entries_.end()) return;
  Uncount(stream);
  entries_.erase(it);
}

std::vector<AdmissionTable::Handle> AdmissionTable::Overdue(absl::Time now) {
  std::vector<Handle> overdue;
  // In admission order, so the first one not yet due ends the scan.
  while (!planless_.empty()) {
    const Handle oldest = planless_.begin()->second;
    if (entries_.at(oldest).admitted + limits_.open_timeout > now) break;
    Uncount(oldest);
    overdue.push_back(oldest);
  }
  return overdue;
}

}  // namespace batchd::server
