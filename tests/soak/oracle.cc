#include "tests/soak/oracle.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/loader.h"
#include "testing/e2e_helpers.h"

namespace batchd::testing {

using client::Loader;
using client::LoaderOptions;

v1::Plan RandomOraclePlan(std::mt19937_64& rng, const std::string& dataset,
                          int client) {
  auto pick = [&rng](int lo, int hi) {
    return std::uniform_int_distribution<int>(lo, hi)(rng);
  };
  const uint32_t size = 8 * pick(2, 5);
  v1::Plan plan = pick(0, 3) == 0 ? EvalPlan(dataset, pick(3, 12), size, rng())
                                  : TrainPlan(dataset, pick(3, 12), size, rng());
  plan.set_world_size(pick(1, 3));
  plan.set_rank(pick(0, static_cast<int>(plan.world_size()) - 1));
  plan.set_shuffle(pick(0, 1) == 1);
  plan.set_drop_last(pick(0, 1) == 1);
  plan.mutable_pipeline()->set_layout(pick(0, 1) ? v1::LAYOUT_NCHW
                                                 : v1::LAYOUT_NHWC);
  plan.set_job(absl::StrCat("soak-client-", client));
  return plan;
}

void OracleClientLoop(int id, const std::string& endpoints, absl::Time until,
                      const OracleClientConfig& config, OracleTotals* totals) {
  std::mt19937_64 rng(config.seed * 1000 + id);
  std::uniform_real_distribution<double> coin(0, 1);
  auto stopped = [&config] {
    return config.stop != nullptr && config.stop->load();
  };
  while (absl::Now() < until && !stopped()) {
    const v1::Plan plan = RandomOraclePlan(rng, config.dataset, id);
    int plan_id;
    {
      absl::MutexLock lock(&totals->mu);
      plan_id = static_cast<int>(totals->plans.size());
      totals->plans.push_back(plan);
    }
    LoaderOptions options;
    options.endpoint = endpoints;
    options.plan = plan;
    options.prefetch = 2 + rng() % 5;
    options.stall_timeout = config.stall_timeout;
    options.batch_progress_timeout = config.batch_progress_timeout;
    options.connect_timeout = config.connect_timeout;
    // Several endpoints: bytes over the stream either way.
    options.shared_memory = false;
    absl::StatusOr<std::unique_ptr<Loader>> loader = Loader::Create(options);
    if (!loader.ok()) {
      absl::MutexLock lock(&totals->mu);
      totals->errors.push_back(absl::StrCat("client ", id, " Create: ",
                                            loader.status().ToString()));
      absl::SleepFor(absl::Seconds(1));
      continue;
    }
    const uint64_t epochs = 1 + rng() % 3;
    for (uint64_t epoch = 0; epoch < epochs && absl::Now() < until; ++epoch) {
      absl::Status started = (*loader)->StartEpoch(epoch);
      if (!started.ok()) {
        absl::MutexLock lock(&totals->mu);
        totals->errors.push_back(
            absl::StrCat("client ", id, " StartEpoch: ", started.ToString()));
        break;
      }
      // Faults on the client side, decided up front for this epoch.
      const uint64_t batches = (*loader)->batches_per_epoch();
      const bool abandon = coin(rng) < 0.15;
      const uint64_t abandon_at = batches == 0 ? 0 : rng() % batches;
      const bool stall = coin(rng) < 0.2;
      const uint64_t stall_at = batches == 0 ? 0 : rng() % batches;
      std::set<uint64_t> seen;
      bool complete = true;
      for (uint64_t n = 0;; ++n) {
        if (abandon && n == abandon_at) {
          complete = false;
          break;
        }
        if (absl::Now() > until + config.grace || stopped()) {
          complete = false;
          break;
        }
        if (stall && n == stall_at) {
          absl::SleepFor(absl::Milliseconds(500 + rng() % 2500));
        }
        const absl::Time asked = absl::Now();
        absl::StatusOr<client::Batch> batch = (*loader)->Next();
        const absl::Duration waited = absl::Now() - asked;
        if (!batch.ok()) {
          if (absl::IsOutOfRange(batch.status())) break;  // the epoch's end
          absl::MutexLock lock(&totals->mu);
          totals->errors.push_back(
              absl::StrCat("client ", id, " Next: ", batch.status().ToString()));
          complete = false;
          break;
        }
        const uint64_t hash = ToRecord(*batch).PixelHash();
        absl::MutexLock lock(&totals->mu);
        totals->longest_wait = std::max(totals->longest_wait, waited);
        ++totals->delivered;
        if (!seen.insert(batch->batch_index).second ||
            batch->epoch != epoch) {
          ++totals->duplicated;
          continue;
        }
        totals->hashes[{plan_id, epoch, batch->batch_index}] = hash;
      }
      absl::MutexLock lock(&totals->mu);
      if (complete) {
        ++totals->epochs_completed;
        totals->lost += batches - seen.size();
      } else {
        ++totals->epochs_abandoned;
        ++totals->faults["client dropped mid-epoch"];
        break;  // the Loader goes away with batches in flight
      }
      if (stall) ++totals->faults["stalled consumer"];
    }
    const client::LoaderStats stats = (*loader)->stats();
    absl::MutexLock lock(&totals->mu);
    totals->rerequested += stats.rerequested;
    totals->hedged += stats.hedged;
    totals->progress_cancels += stats.progress_cancels;
  }
}

absl::StatusOr<OracleResult> CheckAgainstReference(const std::string& reference,
                                                   OracleTotals& totals) {
  OracleResult result;
  absl::MutexLock lock(&totals.mu);
  std::map<int, std::set<uint64_t>> epochs_of_plan;
  for (const auto& [key, hash] : totals.hashes) {
    epochs_of_plan[std::get<0>(key)].insert(std::get<1>(key));
  }
  for (const auto& [plan_id, epochs] : epochs_of_plan) {
    LoaderOptions options;
    options.endpoint = reference;
    options.plan = totals.plans[plan_id];
    absl::StatusOr<std::unique_ptr<Loader>> loader = Loader::Create(options);
    if (!loader.ok()) {
      return absl::Status(loader.status().code(),
                          absl::StrCat("reference Create: ",
                                       loader.status().message()));
    }
    for (uint64_t epoch : epochs) {
      if (absl::Status s = (*loader)->StartEpoch(epoch); !s.ok()) return s;
      absl::StatusOr<std::vector<BatchRecord>> records = ReadFrom(**loader);
      if (!records.ok()) {
        return absl::Status(records.status().code(),
                            absl::StrCat("reference read: ",
                                         records.status().message()));
      }
      for (const BatchRecord& r : *records) {
        auto it = totals.hashes.find({plan_id, epoch, r.batch_index});
        if (it == totals.hashes.end()) continue;
        ++result.verified;
        if (it->second != r.PixelHash()) ++result.wrong;
      }
    }
  }
  return result;
}

bool PrintOracleReport(const OracleResult& result, OracleTotals& totals) {
  absl::MutexLock lock(&totals.mu);
  std::printf("faults:");
  for (const auto& [fault, n] : totals.faults) {
    std::printf(" %s %d;", fault.c_str(), n);
  }
  std::printf("\nplans %zu, epochs completed %llu, abandoned %llu, batches "
              "delivered %llu\n",
              totals.plans.size(),
              static_cast<unsigned long long>(totals.epochs_completed),
              static_cast<unsigned long long>(totals.epochs_abandoned),
              static_cast<unsigned long long>(totals.delivered));
  std::printf("batches verified %llu, wrong %llu, lost %llu, duplicated %llu\n",
              static_cast<unsigned long long>(result.verified),
              static_cast<unsigned long long>(result.wrong),
              static_cast<unsigned long long>(totals.lost),
              static_cast<unsigned long long>(totals.duplicated));
  std::printf("longest trainer wait %.2f s\n",
              absl::ToDoubleSeconds(totals.longest_wait));
  std::printf("loaders: batches re-requested %llu, hedged %llu, streams "
              "dropped by the progress deadline %llu\n",
              static_cast<unsigned long long>(totals.rerequested),
              static_cast<unsigned long long>(totals.hedged),
              static_cast<unsigned long long>(totals.progress_cancels));
  for (const std::string& error : totals.errors) {
    std::printf("client error: %s\n", error.c_str());
  }
  return result.wrong == 0 && totals.lost == 0 && totals.duplicated == 0 &&
         totals.errors.empty() && result.verified > 0;
}

}  // namespace batchd::testing
