#include "server/storage/shard_demand.h"

#include <time.h>

#include <algorithm>
#include <numeric>
#include <utility>

namespace batchd::server {
namespace {

absl::Duration ThreadCpuTime() {
  timespec now;
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now) != 0) {
    return absl::ZeroDuration();
  }
  return absl::DurationFromTimespec(now);
}

}  // namespace

ShardForecast::ShardForecast(
    std::vector<Read> reads,
    std::optional<absl::flat_hash_map<uint32_t, uint32_t>> first_known)
    : first_known_(std::move(first_known)), reads_(reads.size()) {
  // By shard, then distance: each shard's uses become one ascending run.
  std::sort(reads.begin(), reads.end(), [](const Read& a, const Read& b) {
    return a.shard != b.shard ? a.shard < b.shard : a.distance < b.distance;
  });
  Uses* uses = nullptr;
  uint32_t shard = 0;
  for (const Read& read : reads) {
    if (uses == nullptr || read.shard != shard) {
      shard = read.shard;
      uses = &uses_[shard];
    }
    const uint64_t before =
        uses->cumulative_bytes.empty() ? 0 : uses->cumulative_bytes.back();
    uses->distance.push_back(read.distance);
    uses->cumulative_bytes.push_back(before + read.bytes);
    depth_ = std::max<uint64_t>(depth_, read.distance);
  }
  std::vector<std::pair<uint32_t, uint32_t>> by_use;  // (next use, shard)
  by_use.reserve(uses_.size());
  for (const auto& [s, u] : uses_) by_use.emplace_back(u.distance.front(), s);
  std::sort(by_use.begin(), by_use.end());
  by_use_.reserve(by_use.size());
  for (const auto& [use, s] : by_use) by_use_.push_back(s);
}

uint64_t ShardForecast::NextUse(uint32_t shard) const {
  auto it = uses_.find(shard);
  return it == uses_.end() ? kNever : it->second.distance.front();
}

uint64_t ShardForecast::NextKnownUse(uint32_t shard) const {
  if (!first_known_.has_value()) return NextUse(shard);
  auto it = first_known_->find(shard);
  return it == first_known_->end() ? kNever : it->second;
}

ShardReads ShardForecast::ReadsBefore(uint32_t shard, uint64_t before) const {
  auto it = uses_.find(shard);
  if (it == uses_.end()) return {};
  const Uses& uses = it->second;
  const size_t count =
      before > std::numeric_limits<uint32_t>::max()
          ? uses.distance.size()
          : static_cast<size_t>(
                std::lower_bound(uses.distance.begin(), uses.distance.end(),
                                 static_cast<uint32_t>(before)) -
                uses.distance.begin());
  if (count == 0) return {};
  return {count, uses.cumulative_bytes[count - 1]};
}

ShardReads ShardForecast::ReadsBetween(uint32_t shard, uint64_t from,
                                       uint64_t before) const {
  const ShardReads all = ReadsBefore(shard, before);
  const ShardReads earlier = ReadsBefore(shard, from);
  return {all.count - earlier.count, all.bytes - earlier.bytes};
}

uint64_t ShardForecast::HoldHorizonFrom(
    uint64_t from, uint64_t capacity,
    const std::function<uint64_t(uint32_t)>& shard_bytes) const {
  if (from == 0) return HoldHorizon(capacity, shard_bytes);
  // (first read at or after `from`, shard), soonest first.
  std::vector<std::pair<uint32_t, uint32_t>> by_use;
  by_use.reserve(uses_.size());
  for (const auto& [shard, uses] : uses_) {
    auto first = std::lower_bound(
        uses.distance.begin(), uses.distance.end(),
        static_cast<uint32_t>(std::min<uint64_t>(
            from, std::numeric_limits<uint32_t>::max())));
    if (first != uses.distance.end()) by_use.emplace_back(*first, shard);
  }
  std::sort(by_use.begin(), by_use.end());
  uint64_t held = 0;
  for (const auto& [distance, shard] : by_use) {
    held += shard_bytes(shard);
    if (held > capacity) return distance;
  }
  return kNever;
}

uint64_t ShardForecast::HoldHorizon(
    uint64_t capacity,
    const std::function<uint64_t(uint32_t)>& shard_bytes) const {
  absl::MutexLock lock(&memo_mu_);
  if (memo_set_ && memo_capacity_ == capacity) return memo_horizon_;
  uint64_t horizon = kNever;
  uint64_t held = 0;
  for (uint32_t shard : by_use_) {
    held += shard_bytes(shard);
    if (held > capacity) {
      horizon = NextUse(shard);
      break;
    }
  }
  memo_set_ = true;
  memo_capacity_ = capacity;
  memo_horizon_ = horizon;
  return horizon;
}

ShardFetch ChooseFetch(uint64_t shard_bytes, ShardReads reads,
                       const FetchCosts& costs) {
  const uint64_t chunk = std::max<uint64_t>(costs.chunk_bytes, 1);
  const uint64_t chunks = std::max<uint64_t>((shard_bytes + chunk - 1) / chunk,
                                             1);
  const uint64_t whole = shard_bytes + chunks * costs.request_bytes;
  const uint64_t ranges = reads.bytes + reads.count * costs.request_bytes;
  return ranges < whole ? ShardFetch::kRanges : ShardFetch::kWhole;
}

std::vector<size_t> EvictionOrder(
    absl::Span<const EvictionCandidate> candidates) {
  std::vector<size_t> order(candidates.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const EvictionCandidate& x = candidates[a];
    const EvictionCandidate& y = candidates[b];
    if (x.next_use != y.next_use) return x.next_use > y.next_use;
    return x.idle_rank > y.idle_rank;
  });
  return order;
}

ShardDemand::ShardDemand(Locate locate, std::function<absl::Time()> now)
    : locate_(std::move(locate)), now_(std::move(now)) {}

void ShardDemand::Publish(const std::string& reader,
                          const common::ShardSpec& spec,
                          std::shared_ptr<const std::vector<uint64_t>> order,
                          uint64_t next_batch) {
  const absl::Time now = now_();
  absl::MutexLock lock(&mu_);
  auto it = readers_.find(reader);
  if (it != readers_.end()) {
    Reader& known = it->second;
    if (known.order == order && next_batch <= known.next_batch) return;
    arrived_ |= known.order != order;
    known = Reader{spec, std::move(order), next_batch, now};
    moved_ = true;
    return;
  }
  if (readers_.size() >= kMaxReaders) {
    auto oldest = std::min_element(
        readers_.begin(), readers_.end(), [](const auto& a, const auto& b) {
          return a.second.advanced < b.second.advanced;
        });
    readers_.erase(oldest);
  }
  readers_.emplace(reader, Reader{spec, std::move(order), next_batch, now});
  moved_ = true;
  arrived_ = true;
}

void ShardDemand::PublishStart(
    const std::string& reader, const common::ShardSpec& spec,
    std::shared_ptr<const std::vector<uint64_t>> order, uint64_t first_batch) {
  {
    absl::MutexLock lock(&mu_);
    auto it = readers_.find(reader);
    if (it != readers_.end() && it->second.order == order) return;
  }
  // Another thread may publish between the check and this: Publish keeps
  // the furthest position in one order, so the race costs nothing.
  Publish(reader, spec, std::move(order), first_batch);
}

void ShardDemand::Forget(const std::string& reader) {
  absl::MutexLock lock(&mu_);
  moved_ |= readers_.erase(reader) > 0;
}

size_t ShardDemand::readers() const {
  absl::MutexLock lock(&mu_);
  return readers_.size();
}

std::shared_ptr<const ShardForecast> ShardDemand::Forecast() {
  {
    absl::MutexLock lock(&mu_);
    if (forecast_ != nullptr && !arrived_ &&
        (!moved_ || now_() - built_ < kRebuildSpacing * build_cost_)) {
      return forecast_;
    }
  }
  return ForecastNow();
}

std::shared_ptr<const ShardForecast> ShardDemand::LastForecast() {
  {
    absl::MutexLock lock(&mu_);
    if (forecast_ != nullptr) return forecast_;
  }
  return ForecastNow();
}

std::shared_ptr<const ShardForecast> ShardDemand::ForecastNow() {
  std::vector<Reader> readers;
  const absl::Time now = now_();
  {
    absl::MutexLock lock(&mu_);
    for (auto it = readers_.begin(); it != readers_.end();) {
      if (now - it->second.advanced > kReaderIdle) {
        readers_.erase(it++);
      } else {
        readers.push_back((it++)->second);
      }
    }
    moved_ = false;
    arrived_ = false;
    built_ = now;
  }
  // The walk runs without the lock: publications go on meanwhile (and mark
  // the next forecast due). What it costs spaces the next one.
  // What the build costs in CPU, not in wall time: a build preempted on a
  // loaded machine would otherwise space the next ones far apart, and the
  // cache would evict and choose by a stale forecast meanwhile.
  const absl::Duration start = ThreadCpuTime();
  std::vector<ShardForecast::Read> reads;
  absl::flat_hash_map<uint32_t, uint32_t> first_known;
  if (!readers.empty()) {
    const size_t per_reader = std::min(
        kMaxReadsPerReader, std::max<size_t>(kMaxForecastReads / readers.size(),
                                             1));
    reads.reserve(std::min(kMaxForecastReads, per_reader * readers.size()));
    for (const Reader& reader : readers) {
      const uint64_t batches = common::BatchesPerEpoch(reader.spec);
      // The rest of this epoch, then one more: its order is not known here
      // (it depends on the next epoch's number, and computing it would cost
      // a shuffle of the dataset a forecast), so this epoch's order stands
      // in for it: the same reads of each shard, in another order. A next
      // epoch is whole, also after a resume that started this one part-way
      // (standing in with the resumed part alone would count its shards'
      // reads twice and the others' not at all).
      common::ShardSpec next_spec = reader.spec;
      next_spec.start_position = 0;
      const uint64_t next_batches = common::BatchesPerEpoch(next_spec);
      uint32_t distance = 0;
      for (uint64_t step = reader.next_batch;
           step < batches + next_batches && distance < per_reader; ++step) {
        const bool guessed = step >= batches;
        const uint64_t batch = guessed ? step - batches : step;
        for (uint64_t sample : common::BatchIndicesFromOrder(
                 guessed ? next_spec : reader.spec, *reader.order, batch)) {
          if (distance >= per_reader) break;
          // An order with repeats holds sample + repeat * N.
          const SampleLocation where = locate_(
              reader.spec.repeats > 1
                  ? common::SampleOf(sample, reader.spec.num_samples)
                  : sample);
          if (where.shard != SampleLocation::kNoShard) {
            if (step < batches) {
              auto [known, added] = first_known.emplace(where.shard, distance);
              if (!added) known->second = std::min(known->second, distance);
            }
            reads.push_back({where.shard, distance,
                             static_cast<uint32_t>(std::min<uint64_t>(
                                 where.bytes,
                                 std::numeric_limits<uint32_t>::max()))});
          }
          ++distance;
        }
      }
    }
  }
  auto forecast = std::make_shared<const ShardForecast>(
      std::move(reads), std::move(first_known));
  const absl::Duration cost = ThreadCpuTime() - start;
  absl::MutexLock lock(&mu_);
  forecast_ = forecast;
  build_cost_ = cost;
  return forecast;
}

}  // namespace batchd::server
