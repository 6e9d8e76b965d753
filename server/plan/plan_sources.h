// Plan.sources, resolved: a weighted mixture of the daemon's datasets
// (common/mixture.h) checked and turned into the plan's sources and the
// shard's mixture. The pipeline reaches every sample of such a plan
// through ResolvedPlan::At (a sample number is an index in the sources'
// datasets concatenated in the plan's order).
//
// Plain functions; thread-safe.
#ifndef BATCHD_SERVER_PLAN_PLAN_SOURCES_H_
#define BATCHD_SERVER_PLAN_PLAN_SOURCES_H_

#include "absl/status/status.h"
#include "batchd/v1/data.pb.h"
#include "server/plan/resolved_plan.h"

namespace batchd::server {

// The cursors a plan may carry (MixtureSource.cursor), so that cursors
// plus an epoch's quotas stay far from overflow.
inline constexpr uint64_t kMaxSourceCursor = uint64_t{1} << 62;

// Fills `resolved`'s sources, its shard's num_samples (the sources' total)
// and mixture from `plan`'s sources; leaves `resolved->dataset` null.
// INVALID_ARGUMENT naming the field for: a dataset as well as sources, too
// many sources, an unknown or repeated dataset, a weight not finite or
// <= 0, a cursor or samples_per_epoch out of range, repeats > 1 or
// shuffle_window_shards with sources. REQUIRES: plan.sources() not empty.
absl::Status ResolveSources(const batchd::v1::Plan& plan,
                            const DatasetMap& datasets,
                            ResolvedPlan* resolved);

}  // namespace batchd::server

#endif  // BATCHD_SERVER_PLAN_PLAN_SOURCES_H_
