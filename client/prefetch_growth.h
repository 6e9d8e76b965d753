// PrefetchGrowth: LoaderOptions::auto_prefetch's rule for growing the ring.
// Once a look interval (1 s) has passed with enough steps to judge (4), it
// grows the ring by half its slots in use (at least one, never beyond its
// capacity) when the trainer waited more than 5 % of the time but at most
// half of its steps waited at all: the daemons keep up on average, so only
// bursts hurt, and depth hides bursts. It never shrinks the ring.
//
// Pure: no threads, no clock of its own (callers pass `now`), fed traces in
// prefetch_growth_test.cc. Thread-compatible: DaemonSet calls it under its
// mutex.
#ifndef BATCHD_CLIENT_PREFETCH_GROWTH_H_
#define BATCHD_CLIENT_PREFETCH_GROWTH_H_

#include <cstddef>
#include <cstdint>

#include "absl/time/time.h"

namespace batchd::client {

class PrefetchGrowth {
 public:
  // The look's period, and the fewest steps in it that can be judged.
  static constexpr absl::Duration kLookInterval = absl::Seconds(1);
  static constexpr uint64_t kMinSteps = 4;

  // The trainer's figures since it started (TrainerClock::Reading): steps
  // once the pipeline is full, those that waited, and their wait.
  struct Steps {
    uint64_t steps = 0;
    uint64_t waited_steps = 0;
    absl::Duration waited;
  };

  // How many slots to add at `now`, with `active` of the ring's `capacity`
  // slots in use and the trainer at `steps`; 0 most of the time. The first
  // call only takes note.
  size_t Look(absl::Time now, const Steps& steps, size_t active,
              size_t capacity);

 private:
  // The trainer's figures at the last look; InfinitePast before the first.
  absl::Time at_ = absl::InfinitePast();
  Steps last_;
};

}  // namespace batchd::client

#endif  // BATCHD_CLIENT_PREFETCH_GROWTH_H_
