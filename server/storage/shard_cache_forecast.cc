// ShardCache's side that follows the plans' forecast (shard_demand.h): the
// registered forecasts, when each shard is next read, and the
// whole-or-ranges choice of a miss. The rest of the cache (admission,
// eviction, prefetch, reads) is in shard_cache.cc, its files in
// shard_cache_files.cc.
#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "server/storage/shard_cache.h"
#include "server/storage/shard_cache_files.h"

namespace batchd::server {

void ShardCache::AddForecast(const std::shared_ptr<ShardDemand>& demand,
                             std::shared_ptr<ObjectStore> store,
                             const std::vector<ObjectInfo>& shards,
                             uint64_t request_cost_bytes) {
  auto forecaster = std::make_shared<Forecaster>();
  forecaster->demand = demand;
  forecaster->store = std::move(store);
  forecaster->shards = shards;
  forecaster->costs = {request_cost_bytes, options_.chunk_bytes};
  forecaster->sizes.reserve(shards.size());
  forecaster->names.reserve(shards.size());
  for (const ObjectInfo& shard : shards) {
    forecaster->sizes.push_back(shard.size);
    forecaster->names.push_back(ShardFileName(shard));
  }
  RemoveForecast(demand.get());
  absl::MutexLock lock(&mu_);
  const Forecaster* key = forecaster.get();
  for (uint32_t i = 0; i < key->names.size(); ++i) {
    forecast_shards_[key->names[i]] = {key, i};
  }
  forecasters_[demand.get()] = std::move(forecaster);
}

void ShardCache::RemoveForecast(const ShardDemand* demand) {
  absl::MutexLock lock(&mu_);
  auto it = forecasters_.find(demand);
  if (it == forecasters_.end()) return;
  const Forecaster* key = it->second.get();
  absl::erase_if(forecast_shards_,
                 [key](const auto& entry) { return entry.second.first == key; });
  ranges_answers_.erase(key);
  forecasters_.erase(it);
}

ShardCache::Outlook ShardCache::TakeOutlook(bool rebuild) const {
  std::vector<std::pair<std::shared_ptr<const Forecaster>,
                        std::shared_ptr<ShardDemand>>>
      demands;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [key, forecaster] : forecasters_) {
      if (auto demand = forecaster->demand.lock()) {
        demands.emplace_back(forecaster, std::move(demand));
      }
    }
  }
  Outlook outlook;
  for (auto& [forecaster, demand] : demands) {
    const Forecaster* key = forecaster.get();
    outlook[key] = {std::move(forecaster), rebuild ? demand->Forecast()
                                                   : demand->LastForecast()};
  }
  return outlook;
}

uint64_t ShardCache::NextUse(const Outlook& outlook,
                             const std::string& name) const {
  auto known = forecast_shards_.find(name);
  if (known == forecast_shards_.end()) return ShardForecast::kNever;
  auto forecast = outlook.find(known->second.first);
  if (forecast == outlook.end()) return ShardForecast::kNever;
  return forecast->second.forecast->NextUse(known->second.second);
}

std::optional<ShardFetch> ShardCache::ChooseFetchFor(
    const Outlook& outlook, const std::string& name,
    bool when_next_read) const {
  auto known = forecast_shards_.find(name);
  if (known == forecast_shards_.end()) return std::nullopt;
  const auto& [forecaster, shard] = known->second;
  auto it = outlook.find(forecaster);
  if (it == outlook.end()) return std::nullopt;
  const ShardForecast& forecast = *it->second.forecast;
  const uint64_t next_use = forecast.NextUse(shard);
  if (next_use == ShardForecast::kNever) return std::nullopt;
  // Reads past the point where a cache this size could no longer hold
  // every shard needed sooner would likely find the shard gone: only the
  // reads before it pay for a whole download.
  const uint64_t from = when_next_read ? next_use : 0;
  const uint64_t horizon = forecast.HoldHorizonFrom(
      from, options_.disk_bytes,
      [forecaster = forecaster](uint32_t s) { return forecaster->sizes[s]; });
  return ChooseFetch(forecaster->sizes[shard],
                     forecast.ReadsBetween(shard, from, horizon),
                     forecaster->costs);
}

bool ShardCache::ForecastReadsNone(const Outlook& outlook,
                                   const std::string& name) const {
  auto known = forecast_shards_.find(name);
  if (known == forecast_shards_.end()) return false;
  auto it = outlook.find(known->second.first);
  if (it == outlook.end() || it->second.forecast->reads() == 0) return false;
  return it->second.forecast->NextUse(known->second.second) ==
         ShardForecast::kNever;
}

}  // namespace batchd::server
