#include "server/plan/plan_sources.h"

#include <cmath>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/mixture.h"
#include "common/random.h"

namespace batchd::server {
namespace {

absl::Status Invalid(const std::string& message) {
  return absl::InvalidArgumentError(message);
}

}  // namespace

absl::Status ResolveSources(const batchd::v1::Plan& plan,
                            const DatasetMap& datasets,
                            ResolvedPlan* resolved) {
  if (!plan.dataset().empty()) {
    return Invalid(absl::StrCat(
        "both dataset '", plan.dataset(), "' and ", plan.sources_size(),
        " sources are set; a plan reads one dataset or a mixture: leave "
        "dataset empty and list it among the sources"));
  }
  if (static_cast<size_t>(plan.sources_size()) > common::kMaxMixtureSources) {
    return Invalid(absl::StrCat("sources has ", plan.sources_size(),
                                " entries; a mixture has 1..",
                                common::kMaxMixtureSources));
  }
  if (plan.repeats() > 1 || plan.shuffle_window_shards() > 0 ||
      plan.views_size() > 0) {
    return Invalid(
        "sources: a mixture is not offered with repeats > 1, "
        "shuffle_window_shards or views; leave them unset");
  }
  auto mixture = std::make_shared<common::MixtureSpec>();
  std::vector<double> weights;
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (int s = 0; s < plan.sources_size(); ++s) {
    const batchd::v1::MixtureSource& source = plan.sources(s);
    const std::string field = absl::StrCat("sources[", s, "]");
    auto it = datasets.find(source.dataset());
    if (it == datasets.end()) {
      std::vector<std::string> names;
      for (const auto& [name, dataset] : datasets) names.push_back(name);
      return Invalid(absl::StrCat(
          field, ".dataset: unknown dataset '", source.dataset(),
          "'; this daemon serves: ",
          names.empty() ? "(none)" : absl::StrJoin(names, ", ")));
    }
    if (!seen.insert(source.dataset()).second) {
      return Invalid(absl::StrCat(field, ".dataset: '", source.dataset(),
                                  "' is listed twice; name each dataset "
                                  "once and add up its weights"));
    }
    if (!std::isfinite(source.weight()) || source.weight() <= 0) {
      return Invalid(absl::StrCat(field, ".weight is ", source.weight(),
                                  "; it must be finite and > 0"));
    }
    if (source.cursor() > kMaxSourceCursor) {
      return Invalid(absl::StrCat(field, ".cursor is ", source.cursor(),
                                  "; it must be 0..2^62"));
    }
    const std::shared_ptr<const Dataset>& dataset = it->second;
    absl::StatusOr<PlanFields> fields =
        ResolveFields(plan, *dataset, plan.batch_size());
    if (!fields.ok()) {
      return absl::Status(fields.status().code(),
                          absl::StrCat(field, ": ", fields.status().message()));
    }
    resolved->sources.push_back(
        ResolvedPlan::Source{dataset, *std::move(fields), offset});
    offset += dataset->size();
    weights.push_back(source.weight());
    mixture->sources.push_back(common::MixtureSource{
        dataset->size(), 0, common::SourceStreamKey(source.dataset()),
        source.cursor()});
  }
  const std::vector<uint64_t> units = common::QuantizeWeights(weights);
  for (size_t s = 0; s < units.size(); ++s) {
    mixture->sources[s].weight_units = units[s];
  }
  mixture->samples_per_epoch =
      plan.samples_per_epoch() == 0 ? offset : plan.samples_per_epoch();
  if (mixture->samples_per_epoch > common::kMaxMixtureEpochSamples) {
    return Invalid(absl::StrCat(
        "samples_per_epoch is ", mixture->samples_per_epoch,
        plan.samples_per_epoch() == 0 ? " (the sources' sizes summed)" : "",
        "; it must be 1..", common::kMaxMixtureEpochSamples));
  }
  if (plan.sources_epoch() > 0xFFFFFFFFull) {
    return Invalid(absl::StrCat("sources_epoch ", plan.sources_epoch(),
                                " is too large; epochs are 0..4294967295"));
  }
  mixture->cursor_epoch = plan.sources_epoch();
  if (common::EntryBound(*mixture) > common::kMaxSampleIndex) {
    return Invalid(
        "sources: the sources' sizes times the passes an epoch takes are "
        "more than 2^56 sample numbers; lower samples_per_epoch");
  }
  resolved->dataset = nullptr;
  resolved->shard.num_samples = offset;
  resolved->shard.mixture = std::move(mixture);
  return absl::OkStatus();
}

}  // namespace batchd::server
