#include "client/shard_coverage.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/sampler.h"

namespace batchd::client {

absl::StatusOr<ShardCoverage> ShardCoverage::Create(
    uint64_t num_samples, const batchd::v1::Plan& plan,
    std::vector<uint64_t> shard_samples) {
  const uint64_t world_size = plan.world_size() == 0 ? 1 : plan.world_size();
  if (num_samples == 0) {
    return absl::InvalidArgumentError("the dataset has no samples");
  }
  if (plan.batch_size() == 0) {
    return absl::InvalidArgumentError("batch_size must be > 0");
  }
  if (plan.rank() >= world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", plan.rank(), " must be below world_size ", world_size));
  }
  ShardCoverage coverage;
  if (plan.shuffle() && plan.shuffle_window_shards() > 0) {
    uint64_t sum = 0;
    for (uint64_t samples : shard_samples) {
      if (samples == 0) {
        return absl::InvalidArgumentError(
            "the dataset's shard layout has an empty shard");
      }
      sum += samples;
    }
    if (shard_samples.empty() || sum != num_samples) {
      return absl::InvalidArgumentError(absl::StrCat(
          "shuffle_window_shards needs the dataset's shard layout "
          "(DatasetInfo.shard_samples); got ", shard_samples.size(),
          " shards of ", sum, " samples for a dataset of ", num_samples));
    }
    coverage.spec_.shuffle_window_shards = plan.shuffle_window_shards();
    coverage.spec_.shard_samples =
        std::make_shared<const std::vector<uint64_t>>(std::move(shard_samples));
  }
  if (plan.repeats() > common::kMaxRepeats) {
    return absl::InvalidArgumentError(absl::StrCat(
        "repeats ", plan.repeats(), " is above ", common::kMaxRepeats));
  }
  common::ShardSpec& spec = coverage.spec_;
  spec.num_samples = num_samples;
  spec.seed = plan.seed();
  spec.shuffle = plan.shuffle();
  spec.drop_last = plan.drop_last();
  spec.rank = plan.rank();
  spec.world_size = static_cast<uint32_t>(world_size);
  spec.batch_size = plan.batch_size();
  spec.repeats = std::max<uint32_t>(plan.repeats(), 1);
  coverage.batches_ = common::BatchesPerEpoch(spec);
  coverage.kept_ = spec.drop_last ? coverage.batches_ * spec.batch_size
                                  : common::ShardSize(spec);
  const uint64_t length = common::EpochLength(spec);
  for (uint64_t k = 0; k < coverage.kept_; ++k) {
    // Padded position p holds order[p mod length].
    ++coverage.positions_[(spec.rank + k * world_size) % length];
  }
  return coverage;
}

uint64_t ShardCoverage::BatchSamples(uint64_t index) const {
  if (index >= batches_) return 0;
  const uint64_t start = index * spec_.batch_size;
  return std::min<uint64_t>(spec_.batch_size, kept_ - start);
}

std::vector<std::string> ShardCoverage::Check(
    uint64_t epoch, const std::vector<uint64_t>& samples,
    size_t max_problems) const {
  std::vector<std::string> problems;
  auto add = [&problems, max_problems](std::string problem) {
    if (problems.size() < max_problems) problems.push_back(std::move(problem));
  };
  if (samples.size() != kept_) {
    add(absl::StrCat(samples.size(), " samples in the epoch, expected ",
                     kept_));
  }
  std::map<uint64_t, uint64_t> counts;
  const uint64_t entries = spec_.num_samples * spec_.repeats;
  for (uint64_t sample : samples) {
    if (sample >= entries) {
      add(absl::StrCat("sample index ", sample, " is beyond the dataset's ",
                       spec_.num_samples, " samples",
                       spec_.repeats > 1
                           ? absl::StrCat(" x ", spec_.repeats, " repeats")
                           : ""));
      continue;
    }
    ++counts[sample];
  }
  // Position in the epoch order -> entry, by the plan's permutation.
  const std::vector<uint64_t> order = common::EpochOrderFor(spec_, epoch);
  std::map<uint64_t, uint64_t> expected;
  for (const auto& [position, times] : positions_) {
    expected[order[position]] += times;
  }
  for (const auto& [sample, want] : expected) {
    auto it = counts.find(sample);
    const uint64_t got = it == counts.end() ? 0 : it->second;
    if (got != want) {
      add(absl::StrCat("sample ", sample, " appeared ", got,
                       " times, expected ", want));
    }
  }
  for (const auto& [sample, got] : counts) {
    if (expected.count(sample) == 0) {
      add(absl::StrCat("sample ", sample, " appeared ", got,
                       " times, expected 0"));
    }
  }
  return problems;
}

}  // namespace batchd::client
