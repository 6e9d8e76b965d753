// Multi-view plans (batchd.v1.Plan.views): each sample decoded once and cut
// into several views, each with its own RandomResizedCrop, flip and ops.
// ViewGroupSpec is one resolved group; ResolveViews checks a plan's groups.
// View v of epoch-order entry e draws as common::ViewEntry(e, v, N, R).
//
// Pure functions and immutable values; thread-safe.
#ifndef BATCHD_SERVER_PLAN_VIEWS_H_
#define BATCHD_SERVER_PLAN_VIEWS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "batchd/v1/data.pb.h"
#include "server/augment/image.h"
#include "server/augment/policy.h"
#include "server/plan/transform.h"

namespace batchd::server {

// The most view groups a plan may have (the views over all groups are at
// most common::kMaxViews).
inline constexpr uint32_t kMaxViewGroups = 8;

struct ViewGroupSpec {
  uint32_t count = 1;
  TrainTransform transform;
  augment::Interpolation interpolation = augment::Interpolation::kBilinear;
  augment::AugmentPlan augment;
};

// A plan's views, expanded: `groups` in order and, per view, its group.
struct PlanViews {
  std::vector<ViewGroupSpec> groups;
  std::vector<uint32_t> group_of_view;  // empty: a plan without views

  bool empty() const { return group_of_view.empty(); }
  const ViewGroupSpec& group(uint32_t view) const {
    return groups[group_of_view[view]];
  }
  // The canonical text of the groups for the plan's fingerprint; "" without
  // views.
  std::string Fingerprint() const;
};

// Checks `in` (a RandomResizedCrop at `field`, e.g. "pipeline.train") and
// fills `out`, defaults included. INVALID_ARGUMENT naming the field.
absl::Status ResolveTrain(const batchd::v1::RandomResizedCrop& in,
                          const std::string& field, int max_output_size,
                          TrainTransform* out);

// The crop's resize for `value` at `field`: bilinear (unspecified too) or
// bicubic; INVALID_ARGUMENT for nearest or an unknown value.
absl::StatusOr<augment::Interpolation> ResolveCropInterpolation(
    batchd::v1::Interpolation value, const std::string& field);

// Checks `plan`'s views: at most kMaxViewGroups groups and
// common::kMaxViews views, each group 1.. views with a valid crop (size
// 1..max_output_size), interpolation and ops, and `plan.pipeline` holding
// nothing the views replace or that does not work with them (transform,
// augment, interpolation, erasing, mix). INVALID_ARGUMENT naming the field
// ("views[1].count", "pipeline.mix", ...). REQUIRES: plan.views_size() > 0.
absl::StatusOr<PlanViews> ResolveViews(const batchd::v1::Plan& plan,
                                       int max_output_size);

}  // namespace batchd::server

#endif  // BATCHD_SERVER_PLAN_VIEWS_H_
