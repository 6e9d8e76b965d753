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
    coverage.window_shards_ = plan.shuffle_window_shards();
    coverage.shard_samples_ =
        std::make_shared<const std::vector<uint64_t>>(std::move(shard_samples));
  }
  coverage.num_samples_ = num_samples;
  coverage.batch_size_ = plan.batch_size();
  coverage.shuffle_ = plan.shuffle();
  coverage.seed_ = plan.seed();
  const uint64_t shard = (num_samples + world_size - 1) / world_size;
  coverage.batches_ = plan.drop_last()
                          ? shard / plan.batch_size()
                          : (shard + plan.batch_size() - 1) / plan.batch_size();
  coverage.kept_ =
      plan.drop_last() ? coverage.batches_ * plan.batch_size() : shard;
  for (uint64_t k = 0; k < coverage.kept_; ++k) {
    // Padded position p holds order[p mod N].
    ++coverage.positions_[(plan.rank() + k * world_size) % num_samples];
  }
  return coverage;
}

uint64_t ShardCoverage::BatchSamples(uint64_t index) const {
  if (index >= batches_) return 0;
  const uint64_t start = index * batch_size_;
  return std::min<uint64_t>(batch_size_, kept_ - start);
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
  for (uint64_t sample : samples) {
    if (sample >= num_samples_) {
      add(absl::StrCat("sample index ", sample, " is beyond the dataset's ",
                       num_samples_, " samples"));
      continue;
    }
    ++counts[sample];
  }
  // Position in the epoch order -> sample, by the plan's permutation.
  common::ShardSpec spec;
  spec.num_samples = num_samples_;
  spec.seed = seed_;
  spec.shuffle = shuffle_;
  spec.shuffle_window_shards = window_shards_;
  spec.shard_samples = shard_samples_;
  const std::vector<uint64_t> order = common::EpochOrderFor(spec, epoch);
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
