#include "client/step_timeline.h"

#include <algorithm>
#include <utility>

namespace batchd::client {

StepTimeline::StepTimeline(size_t capacity)
    : capacity_(std::max<size_t>(capacity, 1)) {}

void StepTimeline::Open(uint64_t epoch, uint64_t batch_index,
                        absl::Time entered, absl::Time returned,
                        absl::Duration ring_copy) {
  Close(entered);
  TimelineStep step;
  step.epoch = epoch;
  step.batch_index = batch_index;
  step.start = entered;
  step.waited = returned - entered;
  step.ring_copy = ring_copy;
  open_ = step;
  returned_ = returned;
}

void StepTimeline::AddCopy(absl::Duration copy) {
  if (open_.has_value()) open_->copy += copy;
}

void StepTimeline::Close(absl::Time at) {
  if (!open_.has_value()) return;
  TimelineStep step = *std::move(open_);
  open_.reset();
  const absl::Duration after = std::max(at - returned_, absl::ZeroDuration());
  // A copy reported from another thread may overlap the next Next(); the
  // step's length stays `at - start`.
  step.copy = std::min(step.copy, after);
  step.compute = after - step.copy;
  steps_.push_back(std::move(step));
  if (steps_.size() > capacity_) steps_.pop_front();
}

std::vector<TimelineStep> StepTimeline::Steps() const {
  return std::vector<TimelineStep>(steps_.begin(), steps_.end());
}

}  // namespace batchd::client
