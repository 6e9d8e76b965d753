#include "server/control/autoscale_policy.h"

#include <algorithm>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace batchd::server {
namespace {

using ::batchd::testing::StatusIs;
using ::testing::HasSubstr;
using Action = AutoscaleDecision::Action;

// A host and its trainers, one second at a time. Each worker decodes
// `per_worker` images/s while there are cores for it; past `cores`, the
// workers share them and every decode slows down by `oversubscription_cost`
// per extra worker (docs/observability.md, "Diagnosing a slow input
// pipeline", measured that on this machine). Each job's trainers would take `demand` images/s; the pool is
// shared fairly (max-min) between the jobs.
struct Host {
  int cores = 2;
  double per_worker = 100;
  double oversubscription_cost = 0.10;

  double Capacity(int workers) const {
    if (workers <= cores) return per_worker * workers;
    return per_worker * cores *
           std::max(0.1, 1 - oversubscription_cost * (workers - cores));
  }
};

struct JobDemand {
  std::string job;
  double demand = 0;  // images/s if the trainers never waited
};

// Shares `capacity` max-min fairly; returns what each job gets.
std::vector<double> Share(double capacity, const std::vector<JobDemand>& jobs) {
  std::vector<double> got(jobs.size(), 0);
  std::vector<size_t> open;
  for (size_t i = 0; i < jobs.size(); ++i) open.push_back(i);
  while (!open.empty() && capacity > 1e-9) {
    const double each = capacity / open.size();
    std::vector<size_t> still;
    for (size_t i : open) {
      const double take = std::min(each, jobs[i].demand - got[i]);
      got[i] += take;
      capacity -= take;
      if (jobs[i].demand - got[i] > 1e-9) still.push_back(i);
    }
    if (still.size() == open.size()) break;  // every job took a full share
    open = still;
  }
  return got;
}

struct Trace {
  std::vector<int> workers;  // at the end of each second
  std::vector<AutoscaleDecision> changes;
  int ChangesBetween(int from_second, int to_second) const {
    int count = 0;
    for (int s = std::max(1, from_second); s < to_second; ++s) {
      if (workers[s] != workers[s - 1]) ++count;
    }
    return count;
  }
};

// Runs `policy` for `seconds`, starting at `workers`. `jobs(t)` gives the
// demand at second t; `noise`, when set, perturbs the busy fraction and the
// wait ratios as measured.
Trace Simulate(AutoscalePolicy& policy, const Host& host, int workers,
               int seconds,
               const std::function<std::vector<JobDemand>(int)>& jobs,
               std::function<double()> noise = nullptr) {
  Trace trace;
  const absl::Time start = absl::FromUnixSeconds(1'000'000);
  for (int t = 0; t < seconds; ++t) {
    const std::vector<JobDemand> demand = jobs(t);
    const double capacity = host.Capacity(workers);
    const std::vector<double> got = Share(capacity, demand);
    AutoscaleObservation obs;
    obs.now = start + absl::Seconds(t + 1);
    obs.workers = workers;
    double delivered = 0;
    for (size_t i = 0; i < demand.size(); ++i) {
      delivered += got[i];
      const double wait =
          demand[i].demand > 0 ? 1 - got[i] / demand[i].demand : 0;
      obs.jobs.push_back({demand[i].job,
                          std::clamp(wait + (noise ? noise() : 0), 0.0, 1.0)});
    }
    obs.images_per_second = delivered;
    obs.busy_fraction =
        std::clamp(delivered / capacity + (noise ? noise() : 0), 0.0, 1.0);
    const AutoscaleDecision decision = policy.Observe(obs);
    if (decision.action != Action::kHold) {
      EXPECT_NE(decision.workers, workers) << decision.reason;
      EXPECT_FALSE(decision.reason.empty());
      trace.changes.push_back(decision);
    } else {
      EXPECT_EQ(decision.workers, workers);
    }
    workers = decision.workers;
    trace.workers.push_back(workers);
  }
  return trace;
}

AutoscalePolicyOptions Bounds(int min_workers, int max_workers) {
  AutoscalePolicyOptions options;
  options.min_workers = min_workers;
  options.max_workers = max_workers;
  return options;
}

std::function<std::vector<JobDemand>(int)> Steady(double demand) {
  return [demand](int) { return std::vector<JobDemand>{{"a", demand}}; };
}

// First second at which the trace holds `workers` until its end; -1 if not.
int SettledAt(const Trace& trace, int workers) {
  int settled = -1;
  for (size_t s = 0; s < trace.workers.size(); ++s) {
    if (trace.workers[s] != workers) {
      settled = -1;
    } else if (settled < 0) {
      settled = static_cast<int>(s);
    }
  }
  return settled;
}

TEST(AutoscalePolicyTest, FastTrainerGrowsToMax) {
  Host host;
  host.cores = 16;
  AutoscalePolicy policy(Bounds(1, 16));
  const Trace trace = Simulate(policy, host, 1, 120, Steady(1e6));
  EXPECT_EQ(trace.workers.back(), 16);
  // Steps of max(1, n/4), each after 2 s input-bound and 4 s of
  // judgement: 1 2 3 4 5 6 7 8 10 12 15 16 is 11 steps of ~6 s.
  EXPECT_GE(SettledAt(trace, 16), 0);
  EXPECT_LE(SettledAt(trace, 16), 80);
  for (const AutoscaleDecision& d : trace.changes) {
    EXPECT_EQ(d.action, Action::kGrow) << d.reason;
  }
  EXPECT_THAT(trace.changes.front().reason,
              HasSubstr("grow 1 -> 2: job \"a\" waits"));
}

TEST(AutoscalePolicyTest, OnTwoCoresAFastTrainerGetsTwoWithinTenSeconds) {
  Host host;  // 2 cores, as the end-to-end test's machine
  AutoscalePolicy policy(Bounds(1, 2));
  const Trace trace = Simulate(policy, host, 1, 30, Steady(1e6));
  EXPECT_EQ(trace.workers.back(), 2);
  EXPECT_LE(SettledAt(trace, 2), 10);
}

TEST(AutoscalePolicyTest, SlowTrainerShrinksToMin) {
  Host host;
  host.cores = 8;
  AutoscalePolicy policy(Bounds(1, 8));
  // 50 images/s is half of one worker.
  const Trace trace = Simulate(policy, host, 8, 60, Steady(50));
  EXPECT_EQ(trace.workers.back(), 1);
  // One step straight to the fewest that would be <= 60 % busy.
  ASSERT_EQ(trace.changes.size(), 1u);
  EXPECT_EQ(trace.changes[0].action, Action::kShrink);
  EXPECT_THAT(trace.changes[0].reason, HasSubstr("shrink 8 -> 1"));
  EXPECT_LE(SettledAt(trace, 1), 10);
}

TEST(AutoscalePolicyTest, ShrinksOnlyAsFarAsTheLoadAllows) {
  Host host;
  host.cores = 8;
  AutoscalePolicy policy(Bounds(1, 8));
  // 250 images/s: 3 workers would be 83 % busy (no), 5 would be 50 %.
  const Trace trace = Simulate(policy, host, 8, 60, Steady(250));
  EXPECT_EQ(trace.workers.back(), 5);
}

TEST(AutoscalePolicyTest, OversubscribedHostStepsBack) {
  // The host shows 8 cores to the process but other work leaves 2: a third
  // worker makes every decode slower.
  Host host;
  host.cores = 2;
  AutoscalePolicy policy(Bounds(1, 8));
  const Trace trace = Simulate(policy, host, 1, 180, Steady(1e6));
  ASSERT_GE(trace.changes.size(), 3u);
  EXPECT_EQ(trace.changes[0].action, Action::kGrow);   // 1 -> 2 helps
  EXPECT_EQ(trace.changes[1].action, Action::kGrow);   // 2 -> 3 does not
  EXPECT_EQ(trace.changes[2].action, Action::kStepBack);
  EXPECT_EQ(trace.changes[2].workers, 2);
  EXPECT_THAT(trace.changes[2].reason,
              HasSubstr("more workers are not more images"));
  // It probes again once a minute, and is at 2 most of the time.
  const long at_two = std::count(trace.workers.begin(), trace.workers.end(), 2);
  EXPECT_GE(at_two, 150);
  EXPECT_LE(trace.ChangesBetween(60, 180), 4);
}

TEST(AutoscalePolicyTest, TwoJobsGrowUntilTheHungryOneIsFed) {
  Host host;
  host.cores = 16;
  AutoscalePolicy policy(Bounds(1, 16));
  // "a" takes 150 images/s, "b" 650: 800 in all, 8 workers' worth.
  const Trace trace = Simulate(policy, host, 1, 120, [](int) {
    return std::vector<JobDemand>{{"a", 150}, {"b", 650}};
  });
  EXPECT_GE(trace.workers.back(), 8);
  EXPECT_LE(trace.workers.back(), 10);  // not to max: nobody waits at 8
  bool named_b = false;
  for (const AutoscaleDecision& d : trace.changes) {
    if (d.reason.find("job \"b\"") != std::string::npos) named_b = true;
  }
  EXPECT_TRUE(named_b);
}

TEST(AutoscalePolicyTest, NoisySignalDoesNotOscillate) {
  // Demand close to what 3 workers decode (3 x 100 = 300 for 290 asked),
  // with +-8 % noise on every measured ratio: the thresholds sit in it.
  Host host;
  host.cores = 8;
  AutoscalePolicy policy(Bounds(1, 8));
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> jitter(-0.08, 0.08);
  const Trace trace = Simulate(policy, host, 1, 600, Steady(290),
                               [&] { return jitter(rng); });
  // After the first minute: at most 2 changes a minute. A growth that does
  // not help is undone (2 changes) and not retried for 60 s; a growth that
  // helps moves the pool away from the grow threshold, and a shrink lands
  // at <= 60 % busy, below the 80 % growth needs; so noise alone can cause
  // at most one probe and its step back per retry period.
  EXPECT_LE(trace.ChangesBetween(60, 600), 2 * 9);
  for (int minute = 1; minute < 10; ++minute) {
    EXPECT_LE(trace.ChangesBetween(minute * 60, (minute + 1) * 60), 2)
        << "minute " << minute;
  }
  EXPECT_GE(trace.workers.back(), 3);
}

TEST(AutoscalePolicyTest, TrainerThatDisappearsShrinks) {
  Host host;
  host.cores = 4;
  AutoscalePolicy policy(Bounds(1, 4));
  const Trace trace = Simulate(policy, host, 1, 90, [](int t) {
    return t < 40 ? std::vector<JobDemand>{{"a", 1e6}}
                  : std::vector<JobDemand>{};
  });
  EXPECT_EQ(trace.workers[39], 4);
  EXPECT_EQ(trace.workers.back(), 1);
  EXPECT_THAT(trace.changes.back().reason, HasSubstr("no trainer reports"));
  // 8 s idle, after the 4 s cooldown at most.
  EXPECT_LE(SettledAt(trace, 1), 40 + 13);
}

TEST(AutoscalePolicyTest, InputBoundButIdleWorkersDoNotGrow) {
  // The trainers wait, but for something other than the workers (the
  // network, a small window): more workers would not help.
  AutoscalePolicy policy(Bounds(1, 8));
  const absl::Time start = absl::FromUnixSeconds(1'000'000);
  for (int t = 1; t <= 30; ++t) {
    AutoscaleObservation obs;
    obs.now = start + absl::Seconds(t);
    obs.workers = 4;
    obs.busy_fraction = 0.40;
    obs.images_per_second = 160;
    obs.jobs = {{"a", 0.5}};
    EXPECT_EQ(policy.Observe(obs).action, Action::kHold) << t;
  }
}

TEST(AutoscalePolicyTest, BringsAPoolOutsideItsBoundsBack) {
  AutoscalePolicy policy(Bounds(2, 4));
  AutoscaleObservation obs;
  obs.now = absl::FromUnixSeconds(1'000'000);
  obs.workers = 1;
  AutoscaleDecision d = policy.Observe(obs);
  EXPECT_EQ(d.action, Action::kGrow);
  EXPECT_EQ(d.workers, 2);
  EXPECT_THAT(d.reason, HasSubstr("below --min-workers"));
  obs.now += absl::Seconds(1);
  obs.workers = 9;  // set by SetWorkers
  d = policy.Observe(obs);
  EXPECT_EQ(d.workers, 4);
}

TEST(AutoscalePolicyTest, ValidatesOptions) {
  EXPECT_OK(ValidateAutoscalePolicyOptions(Bounds(1, 1)));
  EXPECT_THAT(ValidateAutoscalePolicyOptions(Bounds(0, 4)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--min-workers is 0")));
  EXPECT_THAT(ValidateAutoscalePolicyOptions(Bounds(5, 4)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("1 <= --min-workers <= --max-workers")));
  AutoscalePolicyOptions options = Bounds(1, 4);
  options.shrink_busy = 0.9;
  EXPECT_THAT(ValidateAutoscalePolicyOptions(options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("shrink_busy < saturated_busy")));
}

}  // namespace
}  // namespace batchd::server
