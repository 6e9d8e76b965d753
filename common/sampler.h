// Sample order and sharding for one plan: which dataset samples make up
// batch b of epoch e for this client's shard.
//
// Semantics follow torch.utils.data.DistributedSampler + BatchSampler:
// - the epoch order is 0..N-1, or a permutation seeded by (seed, epoch) when
//   shuffling (Fisher-Yates driven by common::SampleRandom with
//   RandomPurpose::kPermutation, sample index 0), or with
//   shuffle_window_shards > 0 the shard-aware order of ShardWindowOrder;
// - an elastic resume starts the epoch at `start_position`: the positions
//   before it were consumed by an earlier run (of any world size) and are
//   left out; start_position 0 is the whole epoch;
// - the rest of the order is padded to a multiple of world_size by repeating
//   the epoch order's head (more than once when world_size > N);
// - rank r takes positions r, r + world_size, r + 2 * world_size, ... of
//   that rest, so after every rank has taken m samples the ranks together
//   have taken exactly its first m * world_size positions, whatever the
//   world size (GlobalPosition);
// - the shard is cut into batches of batch_size; drop_last drops a final
//   partial batch;
// - with repeats R > 1 (repeated augmentation, torchvision's RASampler):
//   each entry of the order above is repeated R times in a row, and the
//   epoch keeps the first EpochLength of that (about N entries, so about
//   N / R distinct samples, each R times); consecutive positions go to
//   consecutive ranks, so one sample's repeats land on different ranks
//   where the world has R ranks or more. Repeat r of sample i is the entry
//   i + r * N (SampleOf, RepeatOf): each repeat is its own (sample, repeat)
//   pair for exactly-once, and draws its own augmentation;
// - with views (batchd.v1.Plan.views), view v of entry e draws as the entry
//   e + v * N * R (ViewEntry): view 0 is the entry itself, so a plan's
//   first view draws what the same plan without views draws, and no two
//   (entry, view) pairs share a draw. SampleOf still names the sample.
//
// Pure functions; thread-safe. EpochOrderCache is thread-safe too.
#ifndef BATCHD_COMMON_SAMPLER_H_
#define BATCHD_COMMON_SAMPLER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/mixture.h"

namespace batchd::common {

// The widest shard-aware shuffle window a plan may ask for
// (batchd.v1.Plan.shuffle_window_shards).
inline constexpr uint32_t kMaxShuffleWindowShards = 65536;
// The most repeats a plan may ask for (batchd.v1.Plan.repeats).
inline constexpr uint32_t kMaxRepeats = 16;

struct ShardSpec {
  uint64_t num_samples = 0;  // N, > 0
  uint64_t seed = 0;
  bool shuffle = false;
  bool drop_last = false;
  uint32_t rank = 0;         // < world_size
  uint32_t world_size = 1;   // > 0
  uint32_t batch_size = 1;   // > 0
  // Positions of the epoch's order consumed before this run; < N.
  uint64_t start_position = 0;
  // With `shuffle`: 0 for the per-sample shuffle (EpochOrder), K > 0 for the
  // shard-aware shuffle with a window of K shards (ShardWindowOrder).
  uint32_t shuffle_window_shards = 0;
  // The dataset's shard layout, needed when shuffle_window_shards > 0: the
  // samples of each shard in sample order, all > 0, summing to
  // num_samples (batchd.v1.DatasetInfo.shard_samples). Shared and never
  // modified; its address names it in EpochOrderCache.
  std::shared_ptr<const std::vector<uint64_t>> shard_samples;
  // Repeated augmentation: each sample of the order R times in a row; 1
  // (or 0): none. <= kMaxRepeats.
  uint32_t repeats = 1;
  // A weighted mixture of datasets (common/mixture.h), or null. With one,
  // num_samples is the sources' total T, the epoch's order is
  // MixtureOrder's (entries naming (source, sample, occurrence)), its
  // length samples_per_epoch, and repeats and shuffle_window_shards are
  // unused. Shared and never modified; its address names it in
  // EpochOrderCache.
  std::shared_ptr<const MixtureSpec> mixture;
};

// The entries of one epoch's order: a mixture's samples_per_epoch; N, or
// with repeats R > 1 torchvision's
// RASampler length, N rounded down to a multiple of 256 (N itself below
// 256, where RASampler would yield nothing).
uint64_t EpochLength(const ShardSpec& spec);

// The dataset sample, and which of its repeats, of an epoch order's entry.
inline uint64_t SampleOf(uint64_t entry, uint64_t num_samples) {
  return entry % num_samples;
}
inline uint32_t RepeatOf(uint64_t entry, uint64_t num_samples) {
  return static_cast<uint32_t>(entry / num_samples);
}

// The most views a plan may ask for, over all its groups
// (batchd.v1.Plan.views).
inline constexpr uint32_t kMaxViews = 16;
// The entry whose draws view `view` of epoch-order entry `entry` takes:
// entry + view * N * R. REQUIRES: entry < N * R, view < kMaxViews.
inline uint64_t ViewEntry(uint64_t entry, uint32_t view, uint64_t num_samples,
                          uint32_t repeats) {
  return entry + uint64_t{view} * num_samples * (repeats == 0 ? 1 : repeats);
}

// Batches in each epoch of a plan: `per_epoch`, except `resumed` in the
// epoch an elastic resume starts part-way (batchd.v1.Plan.resume).
struct EpochBatches {
  uint64_t per_epoch = 0;
  std::optional<uint64_t> resumed_epoch;
  uint64_t resumed = 0;

  uint64_t In(uint64_t epoch) const {
    return epoch == resumed_epoch ? resumed : per_epoch;
  }
};

// Samples in this shard per epoch:
// ceil((EpochLength - start_position) / world_size).
uint64_t ShardSize(const ShardSpec& spec);

// Batches per epoch: ShardSize / batch_size, rounded down with drop_last and
// up without.
uint64_t BatchesPerEpoch(const ShardSpec& spec);

// The position in the epoch's order that every rank of `spec`'s world has
// reached together once each has taken its first `next_batch` batches, in
// lockstep: start_position + next_batch * batch_size * world_size, or
// EpochLength once
// the epoch is done (next_batch >= BatchesPerEpoch; with drop_last the tail
// the ranks drop is done too). A checkpoint stores this position; a resume
// on any world size passes it as start_position and gets every remaining
// sample exactly once (plus its own padding).
uint64_t GlobalPosition(const ShardSpec& spec, uint64_t next_batch);

// The whole epoch's order of dataset indices (before repeats, padding and
// sharding).
std::vector<uint64_t> EpochOrder(uint64_t num_samples, uint64_t seed,
                                 bool shuffle, uint64_t epoch);

// The shard-aware order of one epoch (batchd.v1.Plan.shuffle_window_shards).
// Shard g holds the samples [sum(shard_samples[0..g)), + shard_samples[g]).
//   1. The shards are permuted: Fisher-Yates as EpochOrder's, over shard
//      numbers, drawing from SampleRandom(seed, epoch, 0, kShardPermutation).
//   2. The window opens the first min(K, S) shards of that permutation: their
//      samples go into a buffer, shard by shard in permuted order, each
//      shard's in sample order.
//   3. Until the buffer is empty: draw j uniform in [0, buffer size) from
//      SampleRandom(seed, epoch, 0, kShardWindow), emit buffer[j], move the
//      buffer's last sample into slot j; when the emitted sample was its
//      shard's last, open the next shard of the permutation (if any).
// Window bound: at every position p of the result at most K shards are
// live (have a sample at or before p and one at or after p), so a cache of
// K shards that drops a shard after its last sample reads each shard once
// per epoch; L consecutive positions touch at most 2K + floor(L / s_min)
// distinct shards (s_min: the smallest shard). K = 1 reads shards one by
// one, each in a random order; K >= S is a uniform permutation of all
// samples (a different one from EpochOrder's). O(N log S) time, O(N)
// memory. REQUIRES: every entry of `shard_samples` > 0, window_shards > 0.
std::vector<uint64_t> ShardWindowOrder(
    const std::vector<uint64_t>& shard_samples, uint64_t seed,
    uint32_t window_shards, uint64_t epoch);

// The epoch order `spec` asks for: ShardWindowOrder with shuffle and
// shuffle_window_shards > 0 (and a layout), else EpochOrder; with repeats,
// each entry R times in a row (i + r * N), cut to EpochLength; with a
// mixture, MixtureOrder.
std::vector<uint64_t> EpochOrderFor(const ShardSpec& spec, uint64_t epoch);

// The window that decides ShardWindowOrder's result: min(window_shards,
// number of shards); windows at least as large give the same order.
uint32_t EffectiveWindowShards(uint32_t window_shards,
                               const std::vector<uint64_t>& shard_samples);

// This shard's dataset indices for `epoch`, in order, from the epoch's order.
std::vector<uint64_t> ShardIndices(const ShardSpec& spec,
                                   const std::vector<uint64_t>& epoch_order);

// Dataset indices of batch `batch_index` of the shard.
// REQUIRES: batch_index < BatchesPerEpoch(spec).
std::vector<uint64_t> BatchSampleIndices(const ShardSpec& spec,
                                         const std::vector<uint64_t>& shard,
                                         uint64_t batch_index);

// The same as BatchSampleIndices(spec, ShardIndices(spec, epoch_order),
// batch_index), read straight from the epoch order in O(batch_size), so
// building a batch never copies a whole shard.
std::vector<uint64_t> BatchIndicesFromOrder(
    const ShardSpec& spec, const std::vector<uint64_t>& epoch_order,
    uint64_t batch_index);

// Shares epoch orders between streams: identical (num_samples, seed,
// shuffle, epoch, and for the shard-aware shuffle the effective window and
// the layout's address) are computed once. Keeps the `capacity` most
// recently used orders (and the layouts their keys name alive).
class EpochOrderCache {
 public:
  explicit EpochOrderCache(size_t capacity = 16);
  ~EpochOrderCache();
  EpochOrderCache(const EpochOrderCache&) = delete;
  EpochOrderCache& operator=(const EpochOrderCache&) = delete;

  // The order for (num_samples, seed, shuffle, epoch), computed on first use.
  // Concurrent calls for the same key compute it once; the others block
  // until it is ready.
  std::shared_ptr<const std::vector<uint64_t>> Get(uint64_t num_samples,
                                                   uint64_t seed, bool shuffle,
                                                   uint64_t epoch);
  // The order of EpochOrderFor(spec, epoch), computed on first use, as above.
  std::shared_ptr<const std::vector<uint64_t>> Get(const ShardSpec& spec,
                                                   uint64_t epoch);
  // How many orders were computed (not served from the cache); for tests.
  uint64_t computed() const;

 private:
  // Implementation's choice; protected by mu_.
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace batchd::common

#endif  // BATCHD_COMMON_SAMPLER_H_
