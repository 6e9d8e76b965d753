// What one epoch of one shard must contain, by DistributedSampler arithmetic
// (see Plan in proto/batchd/v1/data.proto), for checking a daemon's output.
//
// The epoch order (0..N-1, or the plan's seeded permutation of it, from
// common/sampler.h's EpochOrderFor: with Plan.shuffle_window_shards the
// shard-aware order, which needs the dataset's shard layout) is padded by
// repeating its head to a multiple of world_size; rank r takes positions r, r + W, r + 2W, ...;
// batches of batch_size follow, and drop_last keeps whole batches only. The
// expected multiset of sample indices (with Plan.repeats, of (sample,
// repeat) pairs) is therefore known exactly for every epoch, shuffled or
// not.
//
// Thread-compatible; immutable after construction.
#ifndef BATCHD_CLIENT_SHARD_COVERAGE_H_
#define BATCHD_CLIENT_SHARD_COVERAGE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "batchd/v1/data.pb.h"
#include "common/sampler.h"

namespace batchd::client {

class ShardCoverage {
 public:
  // INVALID_ARGUMENT for `num_samples` 0, batch_size 0 or rank >= world_size,
  // and for a shard-aware shuffle (plan.shuffle_window_shards > 0) without
  // `shard_samples` (batchd.v1.DatasetInfo.shard_samples) that sum to
  // `num_samples`.
  static absl::StatusOr<ShardCoverage> Create(
      uint64_t num_samples, const batchd::v1::Plan& plan,
      std::vector<uint64_t> shard_samples = {});

  // Batches per epoch of this shard.
  uint64_t batches() const { return batches_; }
  // Samples per epoch kept (after drop_last).
  uint64_t samples() const { return kept_; }
  // Samples in batch `index` (0 beyond the epoch).
  uint64_t BatchSamples(uint64_t index) const;

  // Checks the epoch-order entries of `epoch` (all batches, any order):
  // sample indices, or with Plan.repeats index + repeat * num_samples
  // (common::SampleOf / RepeatOf; BatchHeader.repeats). Returns
  // the problems found, at most `max_problems`; empty when the epoch is
  // right.
  std::vector<std::string> Check(uint64_t epoch,
                                 const std::vector<uint64_t>& samples,
                                 size_t max_problems = 10) const;

 private:
  ShardCoverage() = default;

  // The shard's arithmetic (common/sampler.h), start_position 0.
  common::ShardSpec spec_;
  uint64_t batches_ = 0;
  uint64_t kept_ = 0;
  // Position in the unpadded epoch order -> times this shard takes it.
  std::map<uint64_t, uint64_t> positions_;
};

}  // namespace batchd::client

#endif  // BATCHD_CLIENT_SHARD_COVERAGE_H_
