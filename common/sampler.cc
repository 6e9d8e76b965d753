#include "common/sampler.h"

#include <algorithm>
#include <atomic>
#include <list>
#include <map>
#include <tuple>
#include <utility>

#include "absl/base/call_once.h"
#include "common/random.h"

namespace batchd::common {
namespace {

// A spec the REQUIRES of sampler.h allow. The functions below return empty
// results for anything else instead of dividing by zero or reading out of
// range; callers validate requests before they get here.
bool IsValid(const ShardSpec& spec) {
  return spec.num_samples > 0 && spec.world_size > 0 &&
         spec.rank < spec.world_size && spec.batch_size > 0 &&
         spec.repeats <= kMaxRepeats &&
         spec.start_position < EpochLength(spec);
}

uint64_t CeilDiv(uint64_t a, uint64_t b) { return a / b + (a % b != 0); }

// torchvision's RASampler keeps floor(N // 256 * 256 / world) samples per
// rank; the world-independent part (a checkpoint's global position must
// mean the same on any world size) is the epoch's length.
constexpr uint64_t kRepeatedEpochMultiple = 256;

}  // namespace

uint64_t EpochLength(const ShardSpec& spec) {
  if (spec.mixture != nullptr) return spec.mixture->samples_per_epoch;
  if (spec.repeats <= 1 || spec.num_samples < kRepeatedEpochMultiple) {
    return spec.num_samples;
  }
  return spec.num_samples / kRepeatedEpochMultiple * kRepeatedEpochMultiple;
}

uint64_t ShardSize(const ShardSpec& spec) {
  if (!IsValid(spec)) return 0;
  return CeilDiv(EpochLength(spec) - spec.start_position, spec.world_size);
}

uint64_t BatchesPerEpoch(const ShardSpec& spec) {
  if (!IsValid(spec)) return 0;
  const uint64_t shard_size = ShardSize(spec);
  return spec.drop_last ? shard_size / spec.batch_size
                        : CeilDiv(shard_size, spec.batch_size);
}

uint64_t GlobalPosition(const ShardSpec& spec, uint64_t next_batch) {
  if (!IsValid(spec)) return 0;
  if (next_batch >= BatchesPerEpoch(spec)) return EpochLength(spec);
  // next_batch * batch_size < ShardSize, so this is below EpochLength and
  // cannot overflow.
  return spec.start_position +
         next_batch * spec.batch_size * uint64_t{spec.world_size};
}

// Fisher-Yates, from the back: for i = N-1 down to 1, swap position i with a
// uniform position in [0, i]. All draws come from one stream,
// SampleRandom(seed, epoch, /*sample_index=*/0, kPermutation), in that order.
std::vector<uint64_t> EpochOrder(uint64_t num_samples, uint64_t seed,
                                 bool shuffle, uint64_t epoch) {
  std::vector<uint64_t> order(num_samples);
  for (uint64_t i = 0; i < num_samples; ++i) order[i] = i;
  if (!shuffle || num_samples < 2) return order;
  common::SampleRandom rng(seed, epoch, /*sample_index=*/0,
                           common::RandomPurpose::kPermutation);
  for (uint64_t i = num_samples - 1; i > 0; --i) {
    const uint64_t j = rng.UniformInt(i + 1);
    std::swap(order[i], order[j]);
  }
  return order;
}

uint32_t EffectiveWindowShards(uint32_t window_shards,
                               const std::vector<uint64_t>& shard_samples) {
  return static_cast<uint32_t>(
      std::min<uint64_t>(window_shards, shard_samples.size()));
}

std::vector<uint64_t> ShardWindowOrder(
    const std::vector<uint64_t>& shard_samples, uint64_t seed,
    uint32_t window_shards, uint64_t epoch) {
  const uint64_t num_shards = shard_samples.size();
  // first[g]: shard g's first sample; first[S]: the number of samples.
  std::vector<uint64_t> first(num_shards + 1, 0);
  for (uint64_t g = 0; g < num_shards; ++g) {
    first[g + 1] = first[g] + shard_samples[g];
  }
  std::vector<uint64_t> order;
  if (window_shards == 0) return order;
  order.reserve(first[num_shards]);
  // 1. The shards' order.
  std::vector<uint64_t> shards(num_shards);
  for (uint64_t g = 0; g < num_shards; ++g) shards[g] = g;
  if (num_shards > 1) {
    common::SampleRandom rng(seed, epoch, /*sample_index=*/0,
                             common::RandomPurpose::kShardPermutation);
    for (uint64_t i = num_shards - 1; i > 0; --i) {
      std::swap(shards[i], shards[rng.UniformInt(i + 1)]);
    }
  }
  // 2. The window: the samples of the open shards not yet emitted, and how
  // many each open shard has left.
  std::vector<uint64_t> buffer;
  std::vector<uint64_t> left(shard_samples);
  uint64_t next_shard = 0;  // in `shards`
  auto open_next = [&] {
    const uint64_t g = shards[next_shard++];
    for (uint64_t i = first[g]; i < first[g + 1]; ++i) buffer.push_back(i);
  };
  const uint32_t window = EffectiveWindowShards(window_shards, shard_samples);
  for (uint32_t k = 0; k < window; ++k) open_next();
  // 3. Emit.
  common::SampleRandom rng(seed, epoch, /*sample_index=*/0,
                           common::RandomPurpose::kShardWindow);
  while (!buffer.empty()) {
    const uint64_t j = rng.UniformInt(buffer.size());
    const uint64_t sample = buffer[j];
    buffer[j] = buffer.back();
    buffer.pop_back();
    order.push_back(sample);
    // The shard holding `sample`: the last g with first[g] <= sample.
    const uint64_t g =
        std::upper_bound(first.begin(), first.end(), sample) - first.begin() -
        1;
    if (--left[g] == 0 && next_shard < num_shards) open_next();
  }
  return order;
}

std::vector<uint64_t> EpochOrderFor(const ShardSpec& spec, uint64_t epoch) {
  if (spec.mixture != nullptr) {
    return MixtureOrder(*spec.mixture, spec.seed, spec.shuffle, epoch);
  }
  std::vector<uint64_t> order =
      spec.shuffle && spec.shuffle_window_shards > 0 &&
              spec.shard_samples != nullptr
          ? ShardWindowOrder(*spec.shard_samples, spec.seed,
                             spec.shuffle_window_shards, epoch)
          : EpochOrder(spec.num_samples, spec.seed, spec.shuffle, epoch);
  if (spec.repeats <= 1 || order.empty()) return order;
  std::vector<uint64_t> repeated(EpochLength(spec));
  for (uint64_t p = 0; p < repeated.size(); ++p) {
    repeated[p] = order[p / spec.repeats] +
                  (p % spec.repeats) * uint64_t{spec.num_samples};
  }
  return repeated;
}

namespace {

// Position p of this run's padded order (p < ShardSize * world_size) is
// absolute position start + p of the epoch, and absolute position a is
// epoch_order[a % N]: the padding past N repeats the epoch's head, cycling
// through the order again when the padding is longer than N (as
// DistributedSampler's `indices * ceil(padding / N)`). Absolute positions
// make a resume with the same world size take exactly the batches the
// first run would have, padding included.
uint64_t AtPaddedPosition(const ShardSpec& spec,
                          const std::vector<uint64_t>& epoch_order,
                          uint64_t position) {
  return epoch_order[(spec.start_position + position) % epoch_order.size()];
}

}  // namespace

std::vector<uint64_t> ShardIndices(const ShardSpec& spec,
                                   const std::vector<uint64_t>& epoch_order) {
  if (!IsValid(spec) || epoch_order.size() != EpochLength(spec)) return {};
  const uint64_t shard_size = ShardSize(spec);
  std::vector<uint64_t> shard;
  shard.reserve(shard_size);
  for (uint64_t k = 0; k < shard_size; ++k) {
    shard.push_back(
        AtPaddedPosition(spec, epoch_order, spec.rank + k * spec.world_size));
  }
  return shard;
}

std::vector<uint64_t> BatchSampleIndices(const ShardSpec& spec,
                                         const std::vector<uint64_t>& shard,
                                         uint64_t batch_index) {
  if (spec.batch_size == 0) return {};
  const uint64_t begin = batch_index * spec.batch_size;
  // Overflow-safe form of `batch_index >= ceil(size / batch_size)`.
  if (batch_index >= CeilDiv(shard.size(), spec.batch_size)) return {};
  const uint64_t end =
      std::min<uint64_t>(shard.size(), begin + spec.batch_size);
  if (spec.drop_last && end - begin < spec.batch_size) return {};
  return std::vector<uint64_t>(shard.begin() + begin, shard.begin() + end);
}

std::vector<uint64_t> BatchIndicesFromOrder(
    const ShardSpec& spec, const std::vector<uint64_t>& epoch_order,
    uint64_t batch_index) {
  if (!IsValid(spec) || epoch_order.size() != EpochLength(spec)) return {};
  if (batch_index >= BatchesPerEpoch(spec)) return {};
  const uint64_t begin = batch_index * spec.batch_size;
  const uint64_t end =
      std::min<uint64_t>(ShardSize(spec), begin + spec.batch_size);
  std::vector<uint64_t> batch;
  batch.reserve(end - begin);
  for (uint64_t k = begin; k < end; ++k) {
    batch.push_back(
        AtPaddedPosition(spec, epoch_order, spec.rank + k * spec.world_size));
  }
  return batch;
}

// One cached order. The slot is created under the cache's lock; the order is
// computed outside it, exactly once, by whichever caller gets there first
// (the others wait in call_once). A slot evicted while being computed stays
// alive through the callers' shared_ptrs.
namespace {
struct OrderSlot {
  absl::once_flag once;
  std::shared_ptr<const std::vector<uint64_t>> order;  // set inside `once`
};
// (num_samples, seed, shuffle, effective window (0: per-sample), layout
// (null unless windowed), epoch, repeats, mixture). The layout and the
// mixture are keyed by address, and the key holds them, so no other can
// take that address while the key is cached.
using OrderKey =
    std::tuple<uint64_t, uint64_t, bool, uint32_t,
               std::shared_ptr<const std::vector<uint64_t>>, uint64_t,
               uint32_t, std::shared_ptr<const MixtureSpec>>;
}  // namespace

struct EpochOrderCache::Impl {
  explicit Impl(size_t capacity) : capacity(capacity) {}

  const size_t capacity;
  std::atomic<uint64_t> computed{0};

  absl::Mutex mu;
  // Most recently used first.
  std::list<std::pair<OrderKey, std::shared_ptr<OrderSlot>>> lru
      ABSL_GUARDED_BY(mu);
  // Every key in `lru`, pointing at its list node.
  std::map<OrderKey, decltype(lru)::iterator> index ABSL_GUARDED_BY(mu);
};

EpochOrderCache::EpochOrderCache(size_t capacity)
    : impl_(std::make_unique<Impl>(capacity)) {}

EpochOrderCache::~EpochOrderCache() = default;

std::shared_ptr<const std::vector<uint64_t>> EpochOrderCache::Get(
    uint64_t num_samples, uint64_t seed, bool shuffle, uint64_t epoch) {
  ShardSpec spec;
  spec.num_samples = num_samples;
  spec.seed = seed;
  spec.shuffle = shuffle;
  return Get(spec, epoch);
}

std::shared_ptr<const std::vector<uint64_t>> EpochOrderCache::Get(
    const ShardSpec& spec, uint64_t epoch) {
  const bool windowed = spec.shuffle && spec.shuffle_window_shards > 0 &&
                        spec.shard_samples != nullptr;
  // Unshuffled orders do not depend on seed or epoch.
  const uint32_t repeats = std::max<uint32_t>(spec.repeats, 1);
  OrderKey key{spec.num_samples, 0, false, 0, nullptr, 0, repeats, nullptr};
  if (spec.mixture != nullptr) {
    // A mixture's order moves with its cursors every epoch.
    key = OrderKey{spec.num_samples, spec.seed, spec.shuffle, 0, nullptr,
                   epoch, 1, spec.mixture};
  } else if (windowed) {
    key = OrderKey{spec.num_samples, spec.seed, true,
                   EffectiveWindowShards(spec.shuffle_window_shards,
                                         *spec.shard_samples),
                   spec.shard_samples, epoch, repeats, nullptr};
  } else if (spec.shuffle) {
    key = OrderKey{spec.num_samples, spec.seed, true, 0, nullptr, epoch,
                   repeats, nullptr};
  }
  std::shared_ptr<OrderSlot> slot;
  {
    absl::MutexLock lock(&impl_->mu);
    auto it = impl_->index.find(key);
    if (it != impl_->index.end()) {
      impl_->lru.splice(impl_->lru.begin(), impl_->lru, it->second);
      slot = it->second->second;
    } else {
      slot = std::make_shared<OrderSlot>();
      impl_->lru.emplace_front(key, slot);
      impl_->index.emplace(key, impl_->lru.begin());
      while (impl_->lru.size() > impl_->capacity) {
        impl_->index.erase(impl_->lru.back().first);
        impl_->lru.pop_back();
      }
    }
  }
  absl::call_once(slot->once, [&] {
    slot->order = std::make_shared<const std::vector<uint64_t>>(
        EpochOrderFor(spec, epoch));
    impl_->computed.fetch_add(1, std::memory_order_relaxed);
  });
  return slot->order;
}

uint64_t EpochOrderCache::computed() const {
  return impl_->computed.load(std::memory_order_relaxed);
}

}  // namespace batchd::common
