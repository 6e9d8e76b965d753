#include "client/step_timeline.h"

#include "gtest/gtest.h"

namespace batchd::client {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

absl::Time At(int ms) { return kT0 + absl::Milliseconds(ms); }

TEST(StepTimelineTest, StepsTileTheConsumersTime) {
  StepTimeline timeline(/*capacity=*/8);
  // Next() 0..30 ms, compute to 100; Next() 100..105 with a 10 ms copy
  // after it, compute to 150; the epoch's last Next() entered at 150.
  timeline.Open(/*epoch=*/0, /*batch_index=*/0, At(0), At(30),
                /*ring_copy=*/absl::Milliseconds(2));
  timeline.Close(At(100));
  timeline.Open(0, 1, At(100), At(105), absl::ZeroDuration());
  timeline.AddCopy(absl::Milliseconds(10));
  timeline.Close(At(150));

  const std::vector<TimelineStep> steps = timeline.Steps();
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps[0].batch_index, 0u);
  EXPECT_EQ(steps[0].start, At(0));
  EXPECT_EQ(steps[0].waited, absl::Milliseconds(30));
  EXPECT_EQ(steps[0].copy, absl::ZeroDuration());
  EXPECT_EQ(steps[0].compute, absl::Milliseconds(70));
  EXPECT_EQ(steps[0].ring_copy, absl::Milliseconds(2));
  EXPECT_EQ(steps[1].start, At(100));
  EXPECT_EQ(steps[1].waited, absl::Milliseconds(5));
  EXPECT_EQ(steps[1].copy, absl::Milliseconds(10));
  EXPECT_EQ(steps[1].compute, absl::Milliseconds(35));
  absl::Duration total;
  for (const TimelineStep& s : steps) total += s.waited + s.copy + s.compute;
  EXPECT_EQ(total, At(150) - At(0));
}

TEST(StepTimelineTest, TheOpenStepIsNotReported) {
  StepTimeline timeline(8);
  timeline.Open(0, 0, At(0), At(1), absl::ZeroDuration());
  EXPECT_TRUE(timeline.Steps().empty());
  timeline.Close(At(5));
  ASSERT_EQ(timeline.Steps().size(), 1u);
  // Closing again, or copying with no step open, changes nothing.
  timeline.Close(At(9));
  timeline.AddCopy(absl::Milliseconds(3));
  ASSERT_EQ(timeline.Steps().size(), 1u);
  EXPECT_EQ(timeline.Steps()[0].compute, absl::Milliseconds(4));
}

TEST(StepTimelineTest, OpeningClosesThePreviousStep) {
  StepTimeline timeline(8);
  timeline.Open(0, 0, At(0), At(1), absl::ZeroDuration());
  timeline.Open(0, 1, At(10), At(12), absl::ZeroDuration());
  timeline.Close(At(20));
  const std::vector<TimelineStep> steps = timeline.Steps();
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps[0].compute, absl::Milliseconds(9));
  EXPECT_EQ(steps[1].compute, absl::Milliseconds(8));
}

TEST(StepTimelineTest, KeepsTheLastCapacitySteps) {
  StepTimeline timeline(/*capacity=*/3);
  for (int i = 0; i < 10; ++i) {
    timeline.Open(0, i, At(10 * i), At(10 * i + 1), absl::ZeroDuration());
  }
  timeline.Close(At(100));
  const std::vector<TimelineStep> steps = timeline.Steps();
  ASSERT_EQ(steps.size(), 3u);
  EXPECT_EQ(steps[0].batch_index, 7u);
  EXPECT_EQ(steps[2].batch_index, 9u);
}

TEST(StepTimelineTest, ACopyLongerThanTheStepIsCappedAtItsLength) {
  StepTimeline timeline(8);
  timeline.Open(0, 0, At(0), At(2), absl::ZeroDuration());
  timeline.AddCopy(absl::Milliseconds(50));
  timeline.Close(At(10));
  const TimelineStep step = timeline.Steps()[0];
  EXPECT_EQ(step.copy, absl::Milliseconds(8));
  EXPECT_EQ(step.compute, absl::ZeroDuration());
}

}  // namespace
}  // namespace batchd::client
