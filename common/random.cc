#include "common/random.h"

namespace batchd::common {
namespace {

constexpr uint32_t kMul0 = 0xD2511F53;
constexpr uint32_t kMul1 = 0xCD9E8D57;
constexpr uint32_t kWeyl0 = 0x9E3779B9;
constexpr uint32_t kWeyl1 = 0xBB67AE85;
constexpr int kRounds = 10;

inline void MulHiLo(uint32_t a, uint32_t b, uint32_t* hi, uint32_t* lo) {
  const uint64_t product = uint64_t{a} * b;
  *hi = static_cast<uint32_t>(product >> 32);
  *lo = static_cast<uint32_t>(product);
}

}  // namespace

std::array<uint32_t, 4> Philox4x32(std::array<uint32_t, 4> ctr,
                                   std::array<uint32_t, 2> key) {
  for (int round = 0; round < kRounds; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    MulHiLo(kMul0, ctr[0], &hi0, &lo0);
    MulHiLo(kMul1, ctr[2], &hi1, &lo1);
    ctr = {hi1 ^ ctr[1] ^ key[0], lo1, hi0 ^ ctr[3] ^ key[1], lo0};
    key[0] += kWeyl0;
    key[1] += kWeyl1;
  }
  return ctr;
}

// Counter layout: word 0 counts blocks within the stream; word 1 is the
// epoch; words 2-3 hold the 56-bit sample index and the 8-bit purpose.
SampleRandom::SampleRandom(uint64_t seed, uint64_t epoch,
                           uint64_t sample_index, RandomPurpose purpose)
    : counter_{0, static_cast<uint32_t>(epoch),
               static_cast<uint32_t>(sample_index),
               static_cast<uint32_t>((sample_index >> 32) & 0xFFFFFF) |
                   (uint32_t{static_cast<uint8_t>(purpose)} << 24)},
      key_{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)} {}

uint32_t SampleRandom::NextU32() {
  if (used_ == 4) {
    block_ = Philox4x32(counter_, key_);
    ++counter_[0];
    used_ = 0;
  }
  return block_[used_++];
}

double SampleRandom::Uniform() {
  const uint64_t hi = NextU32() >> 5;  // 27 bits
  const uint64_t lo = NextU32() >> 6;  // 26 bits
  return static_cast<double>((hi << 26) | lo) * (1.0 / 9007199254740992.0);
}

uint64_t SampleRandom::UniformInt(uint64_t n) {
  // Lemire, "Fast Random Integer Generation in an Interval" (2019), 64-bit.
  auto next64 = [this] {
    return (uint64_t{NextU32()} << 32) | NextU32();
  };
  unsigned __int128 m = static_cast<unsigned __int128>(next64()) * n;
  uint64_t low = static_cast<uint64_t>(m);
  if (low < n) {
    const uint64_t threshold = -n % n;
    while (low < threshold) {
      m = static_cast<unsigned __int128>(next64()) * n;
      low = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

}  // namespace batchd::common
