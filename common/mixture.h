// A weighted mixture of datasets (batchd.v1.Plan.sources): which sample of
// which source every position of an epoch's order is. One contract the
// daemon and the clients compute, as pure functions (docs/datasets.md,
// "Mixtures").
//
// - Each source s (N_s samples) has its own stream of samples: pass p of it
//   is a permutation of 0..N_s-1 (Fisher-Yates from SampleRandom(seed,
//   p mod 2^32, key_s, kMixturePass), key_s the FNV-1a hash of the source's
//   dataset name; 0..N_s-1 in order without shuffle), and the passes follow
//   one another: stream position k is pass k / N_s, place k % N_s.
// - An epoch holds samples_per_epoch positions; source s gets its quota q_s
//   of them (the largest-remainder split of samples_per_epoch by the
//   quantized weights: exact to one sample of its share) and takes the next
//   q_s positions of its stream, from its cursor: a source smaller than its
//   share is repeated, a larger one subsampled, without replacement within a
//   pass, and its passes continue across epochs.
// - The cursor of source s at epoch e >= cursor_epoch is start_cursor_s +
//   (e - cursor_epoch) * q_s (for e < cursor_epoch, start_cursor_s less the
//   quotas of the epochs between, at least 0). A weight change at an epoch
//   boundary is a new spec whose start cursors are the old spec's cursors
//   at that epoch (NextCursors).
// - The epoch interleaves the sources' quotas: without shuffle in the
//   smooth order (the j-th of q_s at (j + 1/2) / q_s of the epoch, ties to
//   the lower source), with shuffle a Fisher-Yates of that sequence drawn
//   from SampleRandom(seed, epoch, 0, kMixtureInterleave).
// - An order's entry names (source, sample, occurrence): offset_s + sample
//   + occurrence * T, offsets the sources' sizes summed in order, T their
//   total, occurrence the pass within the epoch (0 for the first pass the
//   epoch touches), so that one sample seen twice in an epoch draws its
//   augmentation twice. DecodeEntry reverses it.
//
// Pure functions of their arguments; thread-safe.
#ifndef BATCHD_COMMON_MIXTURE_H_
#define BATCHD_COMMON_MIXTURE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace batchd::common {

// The most sources a plan may mix (batchd.v1.Plan.sources).
inline constexpr size_t kMaxMixtureSources = 64;
// The longest epoch a mixture may ask for (Plan.samples_per_epoch).
inline constexpr uint64_t kMaxMixtureEpochSamples = uint64_t{1} << 32;
// Weights are quantized to this many units of the largest weight, so that
// every client computes the same quotas in integers.
inline constexpr uint64_t kWeightUnits = uint64_t{1} << 32;

struct MixtureSource {
  uint64_t num_samples = 0;   // N_s > 0
  uint64_t weight_units = 0;  // > 0, QuantizeWeights
  uint64_t stream_key = 0;    // SourceStreamKey(dataset name)
  // Positions of the source's stream consumed before cursor_epoch.
  uint64_t start_cursor = 0;
};

struct MixtureSpec {
  std::vector<MixtureSource> sources;
  uint64_t samples_per_epoch = 0;  // > 0
  uint64_t cursor_epoch = 0;
};

// Each weight as a number of kWeightUnits of the largest:
// floor(w / max * 2^32 + 0.5), at least 1. REQUIRES: weights finite, > 0.
std::vector<uint64_t> QuantizeWeights(const std::vector<double>& weights);

// The 56-bit key of a source's passes: FNV-1a 64 of its dataset's name, so
// that reordering or adding sources keeps each one's passes.
uint64_t SourceStreamKey(absl::string_view dataset);

// q_s: floor(L * w_s / W), then one more for the L - sum of those with the
// largest remainders (ties to the lower source). Sums to L.
std::vector<uint64_t> MixtureQuotas(const MixtureSpec& spec);

// Source `source`'s cursor at the start of `epoch` (see above).
uint64_t CursorAt(const MixtureSpec& spec, size_t source, uint64_t epoch);

// Every source's cursor at the start of `epoch`: the start cursors of a
// spec with new weights from that epoch on.
std::vector<uint64_t> CursorsAt(const MixtureSpec& spec, uint64_t epoch);

// T: the sources' sizes summed; offsets[s]: those before s.
uint64_t TotalSamples(const MixtureSpec& spec);
std::vector<uint64_t> SourceOffsets(const MixtureSpec& spec);

// The largest entry a spec's orders can hold, + 1: T * (max over sources
// of q_s / N_s + 2). Callers keep it within kMaxSampleIndex.
uint64_t EntryBound(const MixtureSpec& spec);

// The sample at position `k` of source `source`'s stream.
uint64_t StreamSample(const MixtureSpec& spec, size_t source, uint64_t seed,
                      bool shuffle, uint64_t k);

// The entries of `epoch`'s order, samples_per_epoch of them.
std::vector<uint64_t> MixtureOrder(const MixtureSpec& spec, uint64_t seed,
                                   bool shuffle, uint64_t epoch);

struct MixtureEntry {
  uint32_t source = 0;
  uint64_t sample = 0;      // index in the source's dataset
  uint64_t occurrence = 0;  // the pass within the epoch
};
// What `entry` names, given SourceOffsets(spec) and TotalSamples(spec).
MixtureEntry DecodeEntry(const std::vector<uint64_t>& offsets, uint64_t total,
                         uint64_t entry);

// A canonical text of the spec, for plan fingerprints and cache keys.
std::string MixtureText(const MixtureSpec& spec);

}  // namespace batchd::common

#endif  // BATCHD_COMMON_MIXTURE_H_
