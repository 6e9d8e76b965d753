#include "common/mixture.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <queue>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/random.h"

namespace batchd::common {
namespace {

using u128 = unsigned __int128;

// Pass `pass` of a source's stream: 0..n-1, permuted with shuffle.
std::vector<uint64_t> PassOrder(uint64_t n, uint64_t seed, bool shuffle,
                                uint64_t stream_key, uint64_t pass) {
  std::vector<uint64_t> order(n);
  for (uint64_t i = 0; i < n; ++i) order[i] = i;
  if (!shuffle || n < 2) return order;
  SampleRandom rng(seed, pass & 0xFFFFFFFFu, stream_key,
                   RandomPurpose::kMixturePass);
  for (uint64_t i = n - 1; i > 0; --i) {
    std::swap(order[i], order[rng.UniformInt(i + 1)]);
  }
  return order;
}

// The epoch's sequence of sources: the j-th of source s's q_s at
// (2j + 1) / (2 q_s) of the epoch, ties to the lower source.
std::vector<uint32_t> SmoothSources(const std::vector<uint64_t>& quotas) {
  struct Next {
    uint64_t j;
    uint64_t q;
    uint32_t s;
  };
  // Later first: (2j_a + 1) / q_a > (2j_b + 1) / q_b, then higher source.
  auto later = [](const Next& a, const Next& b) {
    const u128 ka = static_cast<u128>(2 * a.j + 1) * b.q;
    const u128 kb = static_cast<u128>(2 * b.j + 1) * a.q;
    return ka != kb ? ka > kb : a.s > b.s;
  };
  std::priority_queue<Next, std::vector<Next>, decltype(later)> queue(later);
  uint64_t total = 0;
  for (uint32_t s = 0; s < quotas.size(); ++s) {
    total += quotas[s];
    if (quotas[s] > 0) queue.push(Next{0, quotas[s], s});
  }
  std::vector<uint32_t> sources;
  sources.reserve(total);
  while (!queue.empty()) {
    Next next = queue.top();
    queue.pop();
    sources.push_back(next.s);
    if (++next.j < next.q) queue.push(next);
  }
  return sources;
}

}  // namespace

std::vector<uint64_t> QuantizeWeights(const std::vector<double>& weights) {
  double largest = 0;
  for (double w : weights) largest = std::max(largest, w);
  std::vector<uint64_t> units;
  units.reserve(weights.size());
  for (double w : weights) {
    // One division, one exact scaling by 2^32, one addition: the same
    // double in every IEEE implementation (Python's included).
    const double scaled =
        std::floor(w / largest * static_cast<double>(kWeightUnits) + 0.5);
    units.push_back(std::max<uint64_t>(1, static_cast<uint64_t>(scaled)));
  }
  return units;
}

uint64_t SourceStreamKey(absl::string_view dataset) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (unsigned char c : dataset) {
    hash ^= c;
    hash *= 0x100000001b3ull;
  }
  return hash & kMaxSampleIndex;
}

std::vector<uint64_t> MixtureQuotas(const MixtureSpec& spec) {
  const uint64_t length = spec.samples_per_epoch;
  u128 total_weight = 0;
  for (const MixtureSource& s : spec.sources) total_weight += s.weight_units;
  std::vector<uint64_t> quotas(spec.sources.size(), 0);
  if (total_weight == 0) return quotas;
  std::vector<std::pair<u128, size_t>> remainders;
  uint64_t given = 0;
  for (size_t s = 0; s < spec.sources.size(); ++s) {
    const u128 share = static_cast<u128>(length) * spec.sources[s].weight_units;
    quotas[s] = static_cast<uint64_t>(share / total_weight);
    given += quotas[s];
    remainders.emplace_back(share % total_weight, s);
  }
  // Largest remainder first, then the lower source.
  std::sort(remainders.begin(), remainders.end(),
            [](const auto& a, const auto& b) {
              return a.first != b.first ? a.first > b.first
                                        : a.second < b.second;
            });
  for (size_t i = 0; given < length; ++i, ++given) {
    ++quotas[remainders[i].second];
  }
  return quotas;
}

uint64_t CursorAt(const MixtureSpec& spec, size_t source, uint64_t epoch) {
  const uint64_t quota = MixtureQuotas(spec)[source];
  const uint64_t start = spec.sources[source].start_cursor;
  if (epoch >= spec.cursor_epoch) {
    return start + (epoch - spec.cursor_epoch) * quota;
  }
  const u128 back = static_cast<u128>(spec.cursor_epoch - epoch) * quota;
  return back >= start ? 0 : start - static_cast<uint64_t>(back);
}

std::vector<uint64_t> CursorsAt(const MixtureSpec& spec, uint64_t epoch) {
  std::vector<uint64_t> cursors;
  for (size_t s = 0; s < spec.sources.size(); ++s) {
    cursors.push_back(CursorAt(spec, s, epoch));
  }
  return cursors;
}

uint64_t TotalSamples(const MixtureSpec& spec) {
  uint64_t total = 0;
  for (const MixtureSource& s : spec.sources) total += s.num_samples;
  return total;
}

std::vector<uint64_t> SourceOffsets(const MixtureSpec& spec) {
  std::vector<uint64_t> offsets;
  uint64_t offset = 0;
  for (const MixtureSource& s : spec.sources) {
    offsets.push_back(offset);
    offset += s.num_samples;
  }
  return offsets;
}

uint64_t EntryBound(const MixtureSpec& spec) {
  const std::vector<uint64_t> quotas = MixtureQuotas(spec);
  uint64_t most_passes = 0;
  for (size_t s = 0; s < spec.sources.size(); ++s) {
    if (spec.sources[s].num_samples == 0) {
      return std::numeric_limits<uint64_t>::max();
    }
    most_passes = std::max(most_passes,
                           quotas[s] / spec.sources[s].num_samples + 2);
  }
  const u128 bound = static_cast<u128>(TotalSamples(spec)) * most_passes;
  return bound > std::numeric_limits<uint64_t>::max()
             ? std::numeric_limits<uint64_t>::max()
             : static_cast<uint64_t>(bound);
}

uint64_t StreamSample(const MixtureSpec& spec, size_t source, uint64_t seed,
                      bool shuffle, uint64_t k) {
  const MixtureSource& s = spec.sources[source];
  return PassOrder(s.num_samples, seed, shuffle, s.stream_key,
                   k / s.num_samples)[k % s.num_samples];
}

std::vector<uint64_t> MixtureOrder(const MixtureSpec& spec, uint64_t seed,
                                   bool shuffle, uint64_t epoch) {
  const std::vector<uint64_t> quotas = MixtureQuotas(spec);
  std::vector<uint32_t> sources = SmoothSources(quotas);
  if (shuffle && sources.size() > 1) {
    SampleRandom rng(seed, epoch, /*sample_index=*/0,
                     RandomPurpose::kMixtureInterleave);
    for (uint64_t i = sources.size() - 1; i > 0; --i) {
      std::swap(sources[i], sources[rng.UniformInt(i + 1)]);
    }
  }
  const std::vector<uint64_t> offsets = SourceOffsets(spec);
  const uint64_t total = TotalSamples(spec);
  // Each source's next stream position, the pass loaded and its order.
  struct Cursor {
    uint64_t next = 0;
    uint64_t first_pass = 0;
    uint64_t loaded_pass = std::numeric_limits<uint64_t>::max();
    std::vector<uint64_t> pass;
  };
  std::vector<Cursor> cursors(spec.sources.size());
  for (size_t s = 0; s < spec.sources.size(); ++s) {
    cursors[s].next = CursorAt(spec, s, epoch);
    cursors[s].first_pass = cursors[s].next / spec.sources[s].num_samples;
  }
  std::vector<uint64_t> order;
  order.reserve(sources.size());
  for (uint32_t s : sources) {
    const MixtureSource& source = spec.sources[s];
    Cursor& cursor = cursors[s];
    const uint64_t k = cursor.next++;
    const uint64_t pass = k / source.num_samples;
    if (pass != cursor.loaded_pass) {
      cursor.pass = PassOrder(source.num_samples, seed, shuffle,
                              source.stream_key, pass);
      cursor.loaded_pass = pass;
    }
    const uint64_t sample = cursor.pass[k % source.num_samples];
    order.push_back(offsets[s] + sample +
                    (pass - cursor.first_pass) * total);
  }
  return order;
}

MixtureEntry DecodeEntry(const std::vector<uint64_t>& offsets,
                         uint64_t total, uint64_t entry) {
  MixtureEntry out;
  if (offsets.empty() || total == 0) return out;
  out.occurrence = entry / total;
  const uint64_t index = entry % total;
  // The last source whose offset is <= index (offsets[0] is 0).
  out.source = static_cast<uint32_t>(
      std::upper_bound(offsets.begin(), offsets.end(), index) -
      offsets.begin() - 1);
  out.sample = index - offsets[out.source];
  return out;
}

std::string MixtureText(const MixtureSpec& spec) {
  std::string text = absl::StrCat("mix L=", spec.samples_per_epoch,
                                  " at=", spec.cursor_epoch);
  for (const MixtureSource& s : spec.sources) {
    absl::StrAppend(&text, " [n=", s.num_samples, " w=", s.weight_units,
                    " k=", s.stream_key, " c=", s.start_cursor, "]");
  }
  return text;
}

}  // namespace batchd::common
