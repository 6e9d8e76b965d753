// StepTimeline: the last N training steps as the consumer thread lived
// them (waiting in Next(), copying, computing), for a picture of one run
// that says where it was input-bound and where compute-bound
// (Loader::timeline(), Python's Loader.timeline() and plot_timeline()).
// Pure bookkeeping: no threads, no clock of its own (callers pass the
// times), bounded: the oldest step is dropped once `capacity` are kept.
//
// A step runs from entering the Next() that returned its batch to entering
// the following Next(), so consecutive steps tile the consumer's time:
// waited + copy + compute of a step is its length.
//
// Thread-compatible: the Loader calls it under its own mutex.
#ifndef BATCHD_CLIENT_STEP_TIMELINE_H_
#define BATCHD_CLIENT_STEP_TIMELINE_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "absl/time/time.h"

namespace batchd::client {

// One step of a StepTimeline.
struct TimelineStep {
  uint64_t epoch = 0;
  uint64_t batch_index = 0;
  // When the Next() that returned this batch was entered.
  absl::Time start;
  // Inside that Next(): waiting for the batch.
  absl::Duration waited;
  // Copies reported (Loader::RecordCopy, e.g. host to device) between that
  // Next() returning and the following Next() being entered.
  absl::Duration copy;
  // The rest of the step: the trainer's own work.
  absl::Duration compute;
  // The receive thread's copy of this batch into its ring slot. It ran
  // before the step, beside earlier steps, so it is not part of the
  // step's length; zero under shared memory.
  absl::Duration ring_copy;
};

class StepTimeline {
 public:
  // Keeps the last `capacity` (at least 1) finished steps.
  explicit StepTimeline(size_t capacity);

  // A Next() entered at `entered` returned batch (`epoch`, `batch_index`)
  // at `returned`, its bytes copied into the ring in `ring_copy`: opens
  // its step. REQUIRES: the previous step was closed (Close(entered)).
  void Open(uint64_t epoch, uint64_t batch_index, absl::Time entered,
            absl::Time returned, absl::Duration ring_copy);
  // Adds `copy` to the open step's copy time; nothing without one.
  void AddCopy(absl::Duration copy);
  // Ends the open step at `at` (a Next() was entered); nothing without
  // one.
  void Close(absl::Time at);

  // The finished steps, oldest first.
  std::vector<TimelineStep> Steps() const;

 private:
  const size_t capacity_;
  std::deque<TimelineStep> steps_;  // size() <= capacity_
  // The step whose batch the trainer holds now; `returned_` is when its
  // Next() returned.
  std::optional<TimelineStep> open_;
  absl::Time returned_;
};

}  // namespace batchd::client

#endif  // BATCHD_CLIENT_STEP_TIMELINE_H_
