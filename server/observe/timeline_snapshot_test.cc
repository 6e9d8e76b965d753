#include "server/observe/timeline_snapshot.h"

#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace batchd::server {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const absl::Time kStart = absl::FromUnixSeconds(1800000000);

// A clock that moves only when told.
class FakeClock {
 public:
  absl::Time Now() {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }
  std::function<absl::Time()> Function() {
    return [this] { return Now(); };
  }

 private:
  absl::Mutex mu_;
  absl::Time now_ = kStart;
};

// A status listing `jobs` jobs "job-0".. with images/s job index + 1.
batchd::v1::ServerStatus Status(int jobs) {
  batchd::v1::ServerStatus status;
  status.set_workers(2);
  for (int j = 0; j < jobs; ++j) {
    batchd::v1::JobStatus* job = status.add_jobs();
    job->set_job(absl::StrCat("job-", j));
    job->set_streams(1);
    job->set_images_per_second(j + 1);
  }
  return status;
}

TimelineSnapshotOptions Options(FakeClock& clock, int max_jobs = 32) {
  TimelineSnapshotOptions options;
  options.max_jobs = max_jobs;
  options.max_wait = absl::ZeroDuration();
  options.answers_per_second = 0;
  options.now = clock.Function();
  return options;
}

// `at` as "next" and since= spell it: Unix seconds to the millisecond.
std::string Since(absl::Time at) {
  return absl::StrFormat("%.3f", absl::ToUnixMillis(at) / 1000.0);
}

TEST(TimelineSnapshotsTest, ManyConcurrentCallersShareOneRenderASecond) {
  Timeline timeline;
  for (int i = 0; i < 300; ++i) {
    timeline.Add(Status(200), kStart + absl::Seconds(i));
  }
  FakeClock clock;
  TimelineSnapshots snapshots(&timeline, Options(clock));

  // 32 callers at once; the render takes long enough (300 points of 200
  // jobs) that most arrive while it runs, and they wait for it.
  constexpr int kCallers = 32;
  std::vector<std::shared_ptr<const RenderedTimeline>> got(kCallers);
  std::atomic<int> ready{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&, c] {
      ++ready;
      while (ready.load() < kCallers) {
      }
      got[c] = snapshots.Current();
      for (int i = 0; i < 20; ++i) snapshots.Answer({}).IgnoreError();
    });
  }
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(snapshots.renders(), 1u);
  for (int c = 0; c < kCallers; ++c) {
    ASSERT_NE(got[c], nullptr);
    EXPECT_EQ(got[c], got[0]) << "caller " << c;
  }

  // Within the second: the same snapshot, even with a new point.
  timeline.Add(Status(200), kStart + absl::Seconds(300));
  clock.Advance(absl::Milliseconds(999));
  EXPECT_EQ(snapshots.Current(), got[0]);
  EXPECT_EQ(snapshots.renders(), 1u);
  // A second on: one more render.
  clock.Advance(absl::Milliseconds(1));
  std::shared_ptr<const RenderedTimeline> next = snapshots.Current();
  EXPECT_NE(next, got[0]);
  EXPECT_EQ(snapshots.renders(), 2u);
  // Another second with no new point: nothing to render.
  clock.Advance(absl::Seconds(5));
  EXPECT_EQ(snapshots.Current(), next);
  EXPECT_EQ(snapshots.renders(), 2u);
  EXPECT_GT(snapshots.render_cpu_seconds(), 0);
}

TEST(TimelineSnapshotsTest, SinceGivesOnlyNewerPointsAndTheNextSince) {
  Timeline timeline;
  batchd::v1::ServerStatus status = Status(1);
  for (int i = 0; i < 5; ++i) {
    status.set_workers(i + 1);
    if (i == 1 || i == 3) {
      status.mutable_autoscale()->set_grows(i);
      status.mutable_autoscale()->set_last_change(absl::StrCat("grow ", i));
    }
    timeline.Add(status, kStart + absl::Seconds(i) + absl::Milliseconds(250));
  }
  FakeClock clock;
  TimelineSnapshots snapshots(&timeline, Options(clock));

  const std::string all = *snapshots.Answer({});
  EXPECT_THAT(all, HasSubstr("{\"since\":null,\"next\":1800000004.250,"));
  EXPECT_THAT(all, HasSubstr("\"workers\":[1,2,3,4,5]"));

  const absl::StatusOr<std::string> after = snapshots.Answer(
      {{"since", Since(kStart + absl::Seconds(2) + absl::Milliseconds(250))}});
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_THAT(*after, HasSubstr("{\"since\":1800000002.250,"
                                "\"next\":1800000004.250,"));
  EXPECT_THAT(*after, HasSubstr("\"t\":[1800000003.250,1800000004.250]"));
  EXPECT_THAT(*after, HasSubstr("\"workers\":[4,5]"));
  EXPECT_THAT(*after, HasSubstr("\"images_per_second\":[1,1]"));
  EXPECT_THAT(*after, HasSubstr("\"autoscale\":[{\"t\":1800000003.250,"
                                "\"workers\":4,\"change\":\"grow 3\"}]"));
  EXPECT_THAT(*after, Not(HasSubstr("grow 1")));

  // Nothing newer: empty columns, the same next.
  const std::string none = *snapshots.Answer({{"since", "1800000004.250"}});
  EXPECT_THAT(none, HasSubstr("\"next\":1800000004.250,"));
  EXPECT_THAT(none, HasSubstr("\"t\":[],\"workers\":[]"));
  EXPECT_THAT(none, HasSubstr("\"autoscale\":[]}"));
  // Older than every point: all of them.
  const std::string old = *snapshots.Answer({{"since", "1"}});
  EXPECT_THAT(old, HasSubstr("\"workers\":[1,2,3,4,5]"));
  EXPECT_THAT(old, HasSubstr("{\"t\":1800000001.250,\"workers\":2,"
                             "\"change\":\"grow 1\"},{\"t\":1800000003.250"));
}

TEST(TimelineSnapshotsTest, TheBusiestJobsHaveSeriesAndTheRestAreSummed) {
  Timeline timeline;
  batchd::v1::ServerStatus status = Status(5);  // images/s 1..5
  // JobStats' own "_other" (retired jobs) is summed too, however busy.
  batchd::v1::JobStatus* retired = status.add_jobs();
  retired->set_job("_other");
  retired->set_images_per_second(100);
  // Two of the summed jobs report: their wait is averaged.
  status.mutable_jobs(0)->mutable_trainer()->set_reporting_streams(1);
  status.mutable_jobs(0)->mutable_trainer()->set_wait_ratio(0.2);
  status.mutable_jobs(0)->mutable_trainer()->set_demand_images_per_second(3);
  status.mutable_jobs(1)->mutable_trainer()->set_reporting_streams(1);
  status.mutable_jobs(1)->mutable_trainer()->set_wait_ratio(0.4);
  status.mutable_jobs(1)->mutable_trainer()->set_demand_images_per_second(4);
  timeline.Add(status, kStart);
  timeline.Add(Status(1), kStart + absl::Seconds(1));  // job-0 only

  FakeClock clock;
  TimelineSnapshots snapshots(&timeline, Options(clock, /*max_jobs=*/2));
  const std::string json = *snapshots.Answer({});
  EXPECT_THAT(json, HasSubstr("\"max_jobs\":2,\"other_jobs\":4,"));
  EXPECT_THAT(json,
              HasSubstr("\"jobs\":[{\"job\":\"job-3\",\"images_per_second\":"
                        "[4,null],"));
  EXPECT_THAT(json, HasSubstr("{\"job\":\"job-4\",\"images_per_second\":"
                              "[5,null],"));
  // 1 + 2 + 3 + 100, then job-0 alone; wait (0.2 + 0.4) / 2; demand 3 + 4.
  EXPECT_THAT(json, HasSubstr("{\"job\":\"_other\",\"images_per_second\":"
                              "[106,1],\"wait_percent\":[30,null],"
                              "\"compute_percent\":[70,null],"
                              "\"demand_images_per_second\":[7,null]}]"));
  EXPECT_THAT(json, Not(HasSubstr("\"job-0\"")));

  // The view agrees: 3 series, job-3 and job-4 by name, "_other" last.
  const TimelineView view = timeline.View(2);
  ASSERT_EQ(view.jobs.size(), 3u);
  EXPECT_EQ(view.jobs[0].job, "job-3");
  EXPECT_EQ(view.jobs[2].job, "_other");
  // With room for all, no "_other" series but JobStats' own.
  EXPECT_EQ(timeline.View(10).other_jobs, 1);
  EXPECT_EQ(timeline.View(10).jobs.size(), 6u);
}

TEST(TimelineSnapshotsTest, ASinceThatIsNotATimeIsRefusedSayingWhatToGive) {
  Timeline timeline;
  FakeClock clock;
  TimelineSnapshots snapshots(&timeline, Options(clock));
  for (const char* bad : {"abc", "-1", "nan", "inf", "", "1e300"}) {
    SCOPED_TRACE(bad);
    const absl::StatusOr<std::string> answer =
        snapshots.Answer({{"since", bad}});
    ASSERT_EQ(answer.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(answer.status().message(),
                HasSubstr("give the \"next\" of the answer before"));
  }
  const absl::StatusOr<std::string> other = snapshots.Answer({{"from", "1"}});
  ASSERT_EQ(other.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(other.status().message(), HasSubstr("takes since=T only"));
}

// Real time: a since= request with nothing newer waits for the next
// point instead of answering at once, so that a client asking in a loop
// gets one answer a point; Stop() ends the wait.
TEST(TimelineSnapshotsTest, ASinceWithNothingNewerWaitsForTheNextPoint) {
  Timeline timeline;
  const absl::Time first = absl::Now();
  timeline.Add(Status(1), first);
  TimelineSnapshotOptions options;
  options.interval = absl::Milliseconds(50);
  options.max_wait = absl::Seconds(5);
  TimelineSnapshots snapshots(&timeline, options);
  const std::string since = Since(first);

  std::thread adder([&] {
    absl::SleepFor(absl::Milliseconds(200));
    timeline.Add(Status(1), first + absl::Seconds(1));
  });
  const absl::Time asked = absl::Now();
  const absl::StatusOr<std::string> answer =
      snapshots.Answer({{"since", since}});
  const absl::Duration waited = absl::Now() - asked;
  adder.join();
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_THAT(*answer, HasSubstr(absl::StrCat("\"t\":[", Since(first +
                                                  absl::Seconds(1)), "]")));
  EXPECT_GE(waited, absl::Milliseconds(150));
  EXPECT_LT(waited, absl::Seconds(2));

  std::thread stopper([&] {
    absl::SleepFor(absl::Milliseconds(100));
    snapshots.Stop();
  });
  const absl::Time stopped = absl::Now();
  const absl::StatusOr<std::string> empty =
      snapshots.Answer({{"since", Since(first + absl::Seconds(1))}});
  stopper.join();
  ASSERT_TRUE(empty.ok());
  EXPECT_THAT(*empty, HasSubstr("\"t\":[]"));
  EXPECT_LT(absl::Now() - stopped, absl::Seconds(2));
}

// Real time: clients asking in a loop get answers spaced 1/rate apart in
// all, first come first served; a turn beyond max_wait is refused after
// max_wait, not at once.
TEST(TimelineSnapshotsTest, AnswersAreSpacedAtTheRateWhateverTheCallers) {
  Timeline timeline;
  timeline.Add(Status(1), absl::Now());
  TimelineSnapshotOptions options;
  options.answers_per_second = 20;
  options.max_wait = absl::Milliseconds(300);
  TimelineSnapshots snapshots(&timeline, options);
  std::atomic<int> answered{0}, refused{0};
  std::vector<std::thread> callers;
  const absl::Time start = absl::Now();
  const absl::Time end = start + absl::Seconds(1);
  for (int c = 0; c < 8; ++c) {
    callers.emplace_back([&] {
      while (absl::Now() < end) {
        const absl::StatusOr<std::string> answer = snapshots.Answer({});
        if (answer.ok()) {
          ++answered;
        } else {
          EXPECT_EQ(answer.status().code(),
                    absl::StatusCode::kResourceExhausted);
          EXPECT_THAT(answer.status().message(), HasSubstr("at most 20"));
          ++refused;
        }
      }
    });
  }
  for (std::thread& t : callers) t.join();
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  std::printf("8 callers in a loop for %.2f s: %d answers, %d refused\n",
              seconds, answered.load(), refused.load());
  // 20 a second, and the turns promised before the end (max_wait).
  EXPECT_LE(answered.load(), 20 * seconds + 2);
  EXPECT_GE(answered.load(), 15);
  // 8 callers, 6 turns within max_wait: some wait max_wait and are refused.
  EXPECT_EQ(static_cast<uint64_t>(refused.load()), snapshots.refused());
}

// The cost of a render at the daemon's largest timeline: 900 points of
// 1,000 jobs, 32 series. Before the cap and the snapshot, one request of
// 400 points of 1,000 jobs took 4.46 CPU-s and answered 7.1 MB.
TEST(TimelineSnapshotsTest, ARenderOfAThousandJobsIsBoundedInCpuAndSize) {
  Timeline timeline;
  const batchd::v1::ServerStatus status = Status(1000);
  for (int i = 0; i < kTimelinePoints; ++i) {
    timeline.Add(status, kStart + absl::Seconds(i));
  }
  FakeClock clock;
  TimelineSnapshots snapshots(&timeline, Options(clock));
  const std::shared_ptr<const RenderedTimeline> snapshot =
      snapshots.Current();
  const std::string since = *snapshots.Answer(
      {{"since", Since(kStart + absl::Seconds(kTimelinePoints - 2))}});
  std::printf("render of %d points of 1,000 jobs: %.3f CPU-s, %zu bytes; "
              "the last point: %zu bytes\n",
              kTimelinePoints, snapshots.render_cpu_seconds(),
              snapshot->full().size(), since.size());
  EXPECT_EQ(snapshots.renders(), 1u);
  // Measured 0.006 CPU-s and 625,028 bytes in the plain build; the CPU
  // bound leaves room for a sanitizer build and a loaded host.
  EXPECT_LT(snapshots.render_cpu_seconds(), 1.0);
  EXPECT_LT(snapshot->full().size(), 2u << 20);
  EXPECT_LT(since.size(), 8u << 10);
  EXPECT_THAT(snapshot->full(), HasSubstr("\"other_jobs\":968,"));
}

}  // namespace
}  // namespace batchd::server
