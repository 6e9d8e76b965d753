#include "server/pipeline/shared_batches.h"

#include <cstring>
#include <utility>

namespace batchd::server {

SharedBatches::SharedBatches(Pipeline* pipeline, SharedBatchesOptions options)
    : pipeline_(pipeline), alone_(pipeline), options_(options) {}

namespace {

// `batch` with its pixels copied into a client's shared-memory slot.
// REQUIRES: the slot holds them (it is sized for the plan's largest batch).
std::shared_ptr<const BuiltBatch> CopyToSlot(const BuiltBatch& batch,
                                             const BatchDestination& slot) {
  auto copy = std::make_shared<BuiltBatch>();
  // Every header field; only the pixels move to the slot.
  static_cast<BatchMetadata&>(*copy) = batch;
  std::memcpy(slot.data, batch.pixels.data(), batch.pixels.size());
  copy->pixels = BatchBuffer(slot.data, batch.pixels.size(), slot.owner);
  return copy;
}

}  // namespace

void SharedBatches::StreamOpened(const ResolvedPlan& plan) {
  absl::MutexLock lock(&mu_);
  ++open_streams_[plan.fingerprint];
}

void SharedBatches::StreamClosed(const ResolvedPlan& plan) {
  absl::MutexLock lock(&mu_);
  auto it = open_streams_.find(plan.fingerprint);
  if (it != open_streams_.end() && --it->second <= 0) open_streams_.erase(it);
}

absl::Status SharedBatches::Get(std::shared_ptr<const ResolvedPlan> plan,
                                uint64_t epoch, uint64_t batch_index,
                                BatchCancellation cancelled, Done done,
                                BatchDestination slot) {
  Key key{plan->fingerprint, epoch, plan->ShardFor(epoch).start_position,
          batch_index};
  if (slot.data != nullptr) {
    done = [done = std::move(done),
            slot](std::shared_ptr<const BuiltBatch> batch) {
      if (batch != nullptr && !batch->pixels.external()) {
        batch = CopyToSlot(*batch, slot);
      }
      done(std::move(batch));
    };
  }
  std::shared_ptr<const BuiltBatch> retained;
  bool alone = false;
  {
    absl::MutexLock lock(&mu_);
    auto streams = open_streams_.find(plan->fingerprint);
    alone = streams == open_streams_.end() || streams->second < 2;
  }
  if (alone) {
    // A plan with one stream: its own build, straight into its slot.
    const std::string fingerprint = plan->fingerprint;
    absl::Status started =
        alone_.Get(std::move(plan), epoch, batch_index, std::move(cancelled),
                   std::move(done), std::move(slot));
    if (started.ok()) {
      absl::MutexLock lock(&mu_);
      ++CountsLocked(fingerprint).built;
    }
    return started;
  }
  {
    absl::MutexLock lock(&mu_);
    SharingCounts& counts = CountsLocked(plan->fingerprint);
    auto [it, inserted] = entries_.try_emplace(key);
    Entry& entry = it->second;
    if (!inserted && entry.batch != nullptr) {
      ++counts.retained;
      lru_.splice(lru_.end(), lru_, entry.lru);  // most recently used
      retained = entry.batch;
    } else if (!inserted) {
      ++counts.attached;
      entry.waiters.push_back(Waiter{std::move(cancelled), std::move(done)});
      return absl::OkStatus();
    } else {
      entry.plan = std::move(plan);
      entry.waiters.push_back(Waiter{std::move(cancelled), std::move(done)});
      if (absl::Status started = StartBuildLocked(key, entry); !started.ok()) {
        entries_.erase(it);
        return started;
      }
      ++counts.built;
      return absl::OkStatus();
    }
  }
  done(std::move(retained));
  return absl::OkStatus();
}

absl::Status SharedBatches::StartBuildLocked(const Key& key, Entry& entry) {
  // The pipeline calls back on a pool thread, never inside BuildBatch, so
  // holding mu_ here cannot deadlock with OnBuilt.
  return pipeline_->BuildBatch(
      entry.plan, std::get<1>(key), std::get<3>(key),
      entry.waiters.front().cancelled,
      [this, key](std::unique_ptr<BuiltBatch> batch) {
        OnBuilt(key, std::move(batch));
      });
}

void SharedBatches::OnBuilt(const Key& key, std::unique_ptr<BuiltBatch> batch) {
  std::vector<Waiter> answered;
  std::shared_ptr<const BuiltBatch> built;
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(key);
    Entry& entry = it->second;
    if (batch == nullptr) {
      // The build's own requester withdrew. Answer every waiter that did
      // too; the others get a build of their own.
      std::vector<Waiter> live;
      for (Waiter& w : entry.waiters) {
        (w.cancelled.cancelled() ? answered : live).push_back(std::move(w));
      }
      entry.waiters = std::move(live);
      if (!entry.waiters.empty() && !StartBuildLocked(key, entry).ok()) {
        // No memory for it now: answered as withdrawn, which the clients
        // request again.
        for (Waiter& w : entry.waiters) answered.push_back(std::move(w));
        entry.waiters.clear();
      }
      if (entry.waiters.empty()) entries_.erase(it);
    } else {
      built = std::move(batch);
      answered = std::move(entry.waiters);
      entry.waiters.clear();
      if (built->pixels.size() <= options_.retention_bytes) {
        entry.batch = built;
        entry.plan.reset();
        entry.lru = lru_.insert(lru_.end(), key);
        retained_bytes_ += built->pixels.size();
        EvictLocked();
      } else {
        entries_.erase(it);
      }
    }
  }
  for (Waiter& w : answered) w.done(built);
}

void SharedBatches::EvictLocked() {
  while (retained_bytes_ > options_.retention_bytes && !lru_.empty()) {
    auto it = entries_.find(lru_.front());
    retained_bytes_ -= it->second.batch->pixels.size();
    lru_.pop_front();
    entries_.erase(it);
    ++evictions_;
  }
}

SharingCounts& SharedBatches::CountsLocked(const std::string& fingerprint) {
  auto [it, inserted] = counts_.try_emplace(FingerprintLabel(fingerprint));
  it->second.last_used = ++uses_;
  if (inserted && counts_.size() > kMaxCountedPlans) {
    auto oldest = counts_.begin();
    for (auto c = counts_.begin(); c != counts_.end(); ++c) {
      if (c->second.last_used < oldest->second.last_used) oldest = c;
    }
    other_counts_.built += oldest->second.counts.built;
    other_counts_.attached += oldest->second.counts.attached;
    other_counts_.retained += oldest->second.counts.retained;
    counts_.erase(oldest);
  }
  return it->second.counts;
}

std::map<std::string, SharingCounts> SharedBatches::counts() const {
  absl::MutexLock lock(&mu_);
  std::map<std::string, SharingCounts> out;
  for (const auto& [label, counted] : counts_) out[label] = counted.counts;
  if (other_counts_.built + other_counts_.attached + other_counts_.retained >
      0) {
    out["_other"] = other_counts_;
  }
  return out;
}

void SharedBatches::Fill(batchd::v1::SharedBatchStatus* status) const {
  status->set_enabled(true);
  status->set_retained_bytes(retained_bytes());
  status->set_retention_limit_bytes(options_.retention_bytes);
  status->set_evictions(evictions());
  for (const auto& [label, c] : counts()) {
    batchd::v1::PlanSharing* plan = status->add_plans();
    plan->set_plan(label);
    plan->set_built(c.built);
    plan->set_attached(c.attached);
    plan->set_retained(c.retained);
  }
}

uint64_t SharedBatches::retained_bytes() const {
  absl::MutexLock lock(&mu_);
  return retained_bytes_;
}

uint64_t SharedBatches::evictions() const {
  absl::MutexLock lock(&mu_);
  return evictions_;
}

}  // namespace batchd::server
