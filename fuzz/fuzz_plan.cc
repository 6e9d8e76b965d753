// Fuzz target: plan validation and resolution from arbitrary Plan protos
// (raw serialized bytes), then the plan arithmetic a stream does with a
// resolved plan: batches per epoch, the shape, a batch's sample order and
// each sample's crop, and the sample's augmentation calls (Pipeline.augment)
// drawn, described and applied to the output image when it is small.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "batchd/v1/data.pb.h"
#include "common/sampler.h"
#include "server/augment/op_call.h"
#include "server/dataset/dataset.h"
#include "server/plan/resolved_plan.h"

namespace {

batchd::server::DatasetMap& Datasets() {
  static auto* datasets = [] {
    auto* map = new batchd::server::DatasetMap();
    // "sharded": shards of 5 samples (the last of 2), for the shard-aware
    // shuffle.
    for (auto [name, samples] :
         {std::pair<const char*, int>{"small", 37}, {"one", 1},
          {"sharded", 37}}) {
      std::vector<batchd::server::Sample> list;
      for (int i = 0; i < samples; ++i) {
        list.push_back({"/nonexistent/" + std::to_string(i), i % 3});
        if (std::string(name) == "sharded") list.back().shard = i / 5;
      }
      (*map)[name] = std::make_shared<batchd::server::Dataset>(
          name, std::move(list),
          std::vector<std::string>{"a", "b", "c"});
    }
    return map;
  }();
  return *datasets;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  batchd::v1::Plan plan;
  if (!plan.ParseFromArray(data, static_cast<int>(size))) return 0;
  batchd::server::PlanLimits limits;
  auto resolved = batchd::server::ResolvePlan(plan, Datasets(), limits);
  if (!resolved.ok()) return 0;
  const batchd::server::ResolvedPlan& p = **resolved;
  const uint64_t batches = batchd::common::BatchesPerEpoch(p.shard);
  if (batches == 0) return 0;
  const uint64_t epoch = plan.seed() % 3;
  const std::vector<uint64_t> order =
      batchd::common::EpochOrderFor(p.shard, epoch);
  for (uint64_t batch : {uint64_t{0}, batches - 1}) {
    std::vector<uint64_t> samples =
        batchd::common::BatchIndicesFromOrder(p.shard, order, batch);
    (void)p.shape(samples.size());
    for (uint64_t sample : samples) {
      (void)p.Crop(epoch, sample, /*width=*/1 + sample % 777,
                   /*height=*/1 + sample % 555);
      if (p.augment.empty()) continue;
      // The ops run on the square output; small ones are applied (the
      // plan's checks, e.g. the blur's kernel, hold for that side).
      const int side = p.output_size();
      const std::vector<batchd::server::augment::OpCall> calls =
          p.AugmentCalls(epoch, sample, side, side);
      (void)batchd::server::augment::Describe(calls);
      if (side > 48) continue;
      std::vector<uint8_t> pixels(static_cast<size_t>(3 * side * side),
                                  static_cast<uint8_t>(sample * 37));
      thread_local batchd::server::augment::Scratch scratch;
      batchd::server::augment::Apply(
          calls, {pixels.data(), side, side, ptrdiff_t{3} * side}, &scratch);
    }
  }
  return 0;
}
