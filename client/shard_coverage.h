// What one epoch of one shard must contain, by DistributedSampler arithmetic
// (see Plan in proto/batchd/v1/data.proto), for checking a daemon's output
// without the daemon's permutation.
//
// The epoch order (0..N-1, or a seeded permutation of it) is padded by
// repeating its head to a multiple of world_size; rank r takes positions
// r, r + W, r + 2W, ...; batches of batch_size follow, and drop_last keeps
// whole batches only. Without shuffling the order is the identity, so the
// expected multiset of sample indices is known exactly. With shuffling it
// is the image of the position multiset under an unknown permutation, so
// what can be checked is its shape: as many distinct samples, each appearing
// as often, as the positions (for world_size 1 without drop_last this is
// exactly "every sample once").
//
// Thread-compatible; immutable after construction.
#ifndef BATCHD_CLIENT_SHARD_COVERAGE_H_
#define BATCHD_CLIENT_SHARD_COVERAGE_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "batchd/v1/data.pb.h"

namespace batchd::client {

class ShardCoverage {
 public:
  // INVALID_ARGUMENT for `num_samples` 0, batch_size 0 or rank >= world_size.
  static absl::StatusOr<ShardCoverage> Create(uint64_t num_samples,
                                              const batchd::v1::Plan& plan);

  // Batches per epoch of this shard.
  uint64_t batches() const { return batches_; }
  // Samples per epoch kept (after drop_last).
  uint64_t samples() const { return kept_; }
  // Samples in batch `index` (0 beyond the epoch).
  uint64_t BatchSamples(uint64_t index) const;

  // Checks one epoch's sample indices (all batches, any order). Returns the
  // problems found, at most `max_problems`; empty when the epoch is right.
  std::vector<std::string> Check(const std::vector<uint64_t>& samples,
                                 size_t max_problems = 10) const;

 private:
  ShardCoverage() = default;

  uint64_t num_samples_ = 0;
  uint64_t batch_size_ = 0;
  bool shuffle_ = false;
  uint64_t batches_ = 0;
  uint64_t kept_ = 0;
  // Position in the unpadded epoch order -> times this shard takes it.
  std::map<uint64_t, uint64_t> positions_;
};

}  // namespace batchd::client

#endif  // BATCHD_CLIENT_SHARD_COVERAGE_H_
