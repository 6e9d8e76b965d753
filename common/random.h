// Counter-based random numbers (Philox4x32-10, Salmon et al., SC'11).
//
// Every random number batchd uses is a pure function of
// (seed, epoch, sample index, purpose, draw number): no generator state is
// shared between threads, samples or daemons, so a batch's content never
// depends on which worker or daemon built it. See docs/design-choices.md.
//
//   SampleRandom rng(/*seed=*/7, /*epoch=*/0, /*sample_index=*/42,
//                    RandomPurpose::kAugment);
//   double u = rng.Uniform(0.08, 1.0);
//
// Thread-compatible: one object per use; objects are cheap (a few words).
#ifndef BATCHD_COMMON_RANDOM_H_
#define BATCHD_COMMON_RANDOM_H_

#include <array>
#include <cstdint>

namespace batchd::common {

// One Philox4x32-10 block: 128 random bits for `counter` under `key`.
std::array<uint32_t, 4> Philox4x32(std::array<uint32_t, 4> counter,
                                   std::array<uint32_t, 2> key);

// Separate streams for separate uses, so adding draws to one use never
// shifts another's numbers.
enum class RandomPurpose : uint8_t {
  kPermutation = 1,  // the epoch's sample order
  kAugment = 2,      // a sample's crop and flip
  kSubstitute = 3,   // choosing a substitute for a bad sample
  kShardPermutation = 4,  // the epoch's shard order (shard-aware shuffle)
  kShardWindow = 5,       // draws from the shard-aware shuffle's window
  kAugmentOps = 6,  // a sample's augmentation ops (Pipeline.augment)
  // Far from the others so that purposes added beside them do not clash.
  kErasing = 20,       // a sample's RandomErasing rectangle
  kErasingNoise = 21,  // the key of its noise (RandomErasing random_value)
  kBatchMix = 22,      // a batch's MixUp/CutMix (indexed by batch, not sample)
  kMixturePass = 23,        // a mixture source's pass (common/mixture.h)
  kMixtureInterleave = 24,  // a mixture epoch's order of sources
};

// The largest sample index the counter layout can hold (56 bits).
inline constexpr uint64_t kMaxSampleIndex = (uint64_t{1} << 56) - 1;

// A stream of uniform random numbers for one (seed, epoch, sample, purpose).
class SampleRandom {
 public:
  // REQUIRES: `sample_index` <= kMaxSampleIndex, `epoch` < 2^32.
  SampleRandom(uint64_t seed, uint64_t epoch, uint64_t sample_index,
               RandomPurpose purpose);

  // Uniform in [0, 2^32).
  uint32_t NextU32();
  // Uniform in [0, 1), with 53 random bits.
  double Uniform();
  // Uniform in [lo, hi).
  double Uniform(double lo, double hi) { return lo + (hi - lo) * Uniform(); }
  // Uniform integer in [0, n), unbiased (Lemire's method). REQUIRES: n > 0.
  uint64_t UniformInt(uint64_t n);

 private:
  std::array<uint32_t, 4> counter_;
  std::array<uint32_t, 2> key_;
  std::array<uint32_t, 4> block_{};
  int used_ = 4;  // words of block_ already handed out
};

}  // namespace batchd::common

#endif  // BATCHD_COMMON_RANDOM_H_
