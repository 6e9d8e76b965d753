#include "server/sched/worker_pool.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace batchd::server {
namespace {

using ::testing::ElementsAreArray;
using ::testing::UnorderedElementsAre;

// In every test the pool is declared after the objects its tasks use, so that
// its destructor joins the workers before those objects are destroyed.

// Guards against a hang turning into a stuck test binary: a correct pool
// reaches every awaited state almost at once, so this limit never decides a
// passing run.
constexpr absl::Duration kHangGuard = absl::Seconds(30);

// A counter that tests can wait on.
class Counter {
 public:
  void Add(int delta) {
    absl::MutexLock lock(&mu_);
    value_ += delta;
    max_ = std::max(max_, value_);
  }
  int value() const {
    absl::MutexLock lock(&mu_);
    return value_;
  }
  // Highest value seen since construction or the last ResetMax().
  int max() const {
    absl::MutexLock lock(&mu_);
    return max_;
  }
  void ResetMax() {
    absl::MutexLock lock(&mu_);
    max_ = value_;
  }
  // Waits until value() >= `target`; false if that takes absurdly long.
  bool AwaitAtLeast(int target) const {
    absl::MutexLock lock(&mu_);
    auto reached = [this, target]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return value_ >= target;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&reached), kHangGuard);
  }

 private:
  mutable absl::Mutex mu_;
  int value_ ABSL_GUARDED_BY(mu_) = 0;
  int max_ ABSL_GUARDED_BY(mu_) = 0;
};

// Records the order in which tasks ran.
class OrderLog {
 public:
  void Append(std::string entry) {
    absl::MutexLock lock(&mu_);
    entries_.push_back(std::move(entry));
  }
  std::vector<std::string> entries() const {
    absl::MutexLock lock(&mu_);
    return entries_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<std::string> entries_ ABSL_GUARDED_BY(mu_);
};

// Occupies a pool's only worker until Release(): lets a test queue tasks
// whose relative order is then decided by the scheduler alone.
class Blocker {
 public:
  void Submit(WorkerPool& pool) {
    pool.Submit("blocker", [this] {
      started_.Notify();
      release_.WaitForNotification();
    });
    // Wait until the worker holds the blocker, so that it is no longer queued.
    ASSERT_TRUE(started_.WaitForNotificationWithTimeout(kHangGuard));
  }
  void Release() { release_.Notify(); }

 private:
  absl::Notification started_;
  absl::Notification release_;
};

// Increments `*count` when destroyed; used to observe that a task (holding
// the only reference) was destroyed.
struct DestructionCounter {
  explicit DestructionCounter(std::atomic<int>* count) : count(count) {}
  ~DestructionCounter() { count->fetch_add(1); }
  std::atomic<int>* count;
};

std::string CurrentThreadName() {
  char name[16] = {};
  pthread_getname_np(pthread_self(), name, sizeof(name));
  return name;
}

TEST(WorkerPoolTest, RunsEveryTaskExactlyOnce) {
  constexpr int kJobs = 8;
  constexpr int kTasksPerJob = 1000;
  std::vector<std::atomic<int>> runs(kJobs * kTasksPerJob);
  absl::BlockingCounter done(kJobs * kTasksPerJob);
  {
    WorkerPool pool(/*num_workers=*/4, "exactly");
    // Submit from several threads at once.
    std::vector<std::thread> submitters;
    for (int job = 0; job < kJobs; ++job) {
      submitters.emplace_back([&, job] {
        for (int i = 0; i < kTasksPerJob; ++i) {
          const int index = job * kTasksPerJob + i;
          pool.Submit("job-" + std::to_string(job), [&runs, &done, index] {
            runs[index].fetch_add(1);
            done.DecrementCount();
          });
        }
      });
    }
    for (std::thread& t : submitters) t.join();
    done.Wait();
    EXPECT_EQ(pool.queued(), 0u);
  }
  for (size_t i = 0; i < runs.size(); ++i) {
    ASSERT_EQ(runs[i].load(), 1) << "task " << i;
  }
}

TEST(WorkerPoolTest, RunsTasksOfOneJobInSubmissionOrder) {
  OrderLog log;
  absl::BlockingCounter done(100);
  Blocker blocker;
  WorkerPool pool(/*num_workers=*/1, "fifo");
  blocker.Submit(pool);
  std::vector<std::string> expected;
  for (int i = 0; i < 100; ++i) {
    expected.push_back(std::to_string(i));
    pool.Submit("job", [&log, &done, i] {
      log.Append(std::to_string(i));
      done.DecrementCount();
    });
  }
  EXPECT_EQ(pool.queued(), 100u);
  blocker.Release();
  done.Wait();
  EXPECT_THAT(log.entries(), ElementsAreArray(expected));
}

TEST(WorkerPoolTest, GreedyJobDoesNotStarveSmallJob) {
  OrderLog log;
  absl::BlockingCounter done(110);
  Blocker blocker;
  WorkerPool pool(/*num_workers=*/1, "fair");
  blocker.Submit(pool);
  for (int i = 0; i < 100; ++i) {
    pool.Submit("a", [&log, &done] {
      log.Append("a");
      done.DecrementCount();
    });
  }
  for (int i = 0; i < 10; ++i) {
    pool.Submit("b", [&log, &done] {
      log.Append("b");
      done.DecrementCount();
    });
  }
  blocker.Release();
  done.Wait();

  // A and B alternate until B runs out, then A's remaining 90 run.
  std::vector<std::string> expected;
  for (int i = 0; i < 10; ++i) {
    expected.push_back("a");
    expected.push_back("b");
  }
  expected.insert(expected.end(), 90, "a");
  EXPECT_THAT(log.entries(), ElementsAreArray(expected));
}

TEST(WorkerPoolTest, ServesThreeJobsRoundRobin) {
  OrderLog log;
  absl::BlockingCounter done(3 * 5);
  Blocker blocker;
  WorkerPool pool(/*num_workers=*/1, "rr");
  blocker.Submit(pool);
  for (const std::string job : {"x", "y", "z"}) {
    for (int i = 0; i < 5; ++i) {
      pool.Submit(job, [&log, &done, job, i] {
        log.Append(job + std::to_string(i));
        done.DecrementCount();
      });
    }
  }
  blocker.Release();
  done.Wait();
  std::vector<std::string> expected;
  for (int i = 0; i < 5; ++i) {
    for (const std::string job : {"x", "y", "z"}) {
      expected.push_back(job + std::to_string(i));
    }
  }
  EXPECT_THAT(log.entries(), ElementsAreArray(expected));
}

TEST(WorkerPoolTest, JobThatRunsDryRejoinsAtTheEnd) {
  OrderLog log;
  absl::BlockingCounter done(6);
  Blocker blocker;
  WorkerPool pool(/*num_workers=*/1, "rejoin");
  blocker.Submit(pool);
  auto append = [&log, &done](std::string entry) {
    return [&log, &done, entry] {
      log.Append(entry);
      done.DecrementCount();
    };
  };
  pool.Submit("a", append("a0"));
  pool.Submit("b", append("b0"));
  pool.Submit("b", append("b1"));
  pool.Submit("c", append("c0"));
  pool.Submit("c", append("c1"));
  // "a" has one task; after it runs, "a" leaves the rotation. A later task
  // for "a" queues behind "b" and "c".
  pool.Submit("a", append("a1"));
  blocker.Release();
  done.Wait();
  EXPECT_THAT(log.entries(),
              ElementsAreArray({"a0", "b0", "c0", "a1", "b1", "c1"}));
}

TEST(WorkerPoolTest, NamesItsThreads) {
  OrderLog names;
  Counter started;
  absl::Notification release;
  WorkerPool pool(/*num_workers=*/2, "sched");
  for (int i = 0; i < 2; ++i) {
    pool.Submit("job", [&] {
      names.Append(CurrentThreadName());
      started.Add(1);
      release.WaitForNotification();
    });
  }
  // Both workers hold a task at once, so both names are seen.
  ASSERT_TRUE(started.AwaitAtLeast(2));
  release.Notify();
  EXPECT_THAT(names.entries(), UnorderedElementsAre("sched-0", "sched-1"));
}

TEST(WorkerPoolTest, TruncatesLongThreadNames) {
  absl::Notification done;
  std::string name;
  WorkerPool pool(/*num_workers=*/1, "a-very-long-pool-name");
  pool.Submit("job", [&] {
    name = CurrentThreadName();
    done.Notify();
  });
  done.WaitForNotification();
  EXPECT_EQ(name, "a-very-long-poo");
}

TEST(WorkerPoolTest, GrowingStartsWorkersAtOnce) {
  Counter running;
  absl::Notification release;
  absl::BlockingCounter done(4);
  WorkerPool pool(/*num_workers=*/1, "grow");
  for (int i = 0; i < 4; ++i) {
    pool.Submit("job-" + std::to_string(i % 2), [&] {
      running.Add(1);
      release.WaitForNotification();
      running.Add(-1);
      done.DecrementCount();
    });
  }
  ASSERT_TRUE(running.AwaitAtLeast(1));
  EXPECT_EQ(running.max(), 1);  // One worker: the others stay queued.
  EXPECT_EQ(pool.queued(), 3u);

  pool.SetNumWorkers(4);
  EXPECT_EQ(pool.num_workers(), 4);
  // All four blocking tasks run at the same time, which needs four threads.
  ASSERT_TRUE(running.AwaitAtLeast(4));
  EXPECT_EQ(pool.queued(), 0u);
  release.Notify();
  done.Wait();
}

TEST(WorkerPoolTest, ShrinkingKeepsEveryTaskAndLimitsConcurrency) {
  constexpr int kPhase1Tasks = 4000;
  constexpr int kPhase2Tasks = 2000;
  std::vector<std::atomic<int>> runs(kPhase1Tasks + kPhase2Tasks);
  Counter running;

  auto make_task = [&](int index, absl::BlockingCounter* done) {
    return [&, index, done] {
      running.Add(1);
      runs[index].fetch_add(1);
      // A little work, so that tasks overlap.
      volatile int sink = 0;
      for (int i = 0; i < 2000; ++i) sink += i;
      running.Add(-1);
      done->DecrementCount();
    };
  };

  // Phase 1: shrink from 4 to 2 while a stream of tasks is being submitted.
  absl::BlockingCounter phase1_done(kPhase1Tasks);
  absl::BlockingCounter phase2_done(kPhase2Tasks);
  absl::Notification halfway;
  WorkerPool pool(/*num_workers=*/4, "shrink");
  std::thread submitter([&] {
    for (int i = 0; i < kPhase1Tasks; ++i) {
      pool.Submit("job-" + std::to_string(i % 3), make_task(i, &phase1_done));
      if (i == kPhase1Tasks / 2) halfway.Notify();
    }
  });
  halfway.WaitForNotification();
  pool.SetNumWorkers(2);
  EXPECT_EQ(pool.num_workers(), 2);
  submitter.join();
  phase1_done.Wait();

  // Phase 2: every surplus worker has finished its last task by now and
  // will exit instead of taking another, so at most two tasks overlap.
  running.ResetMax();
  for (int i = 0; i < kPhase2Tasks; ++i) {
    pool.Submit("job-" + std::to_string(i % 3),
                make_task(kPhase1Tasks + i, &phase2_done));
  }
  phase2_done.Wait();
  EXPECT_LE(running.max(), 2);
  EXPECT_GE(running.max(), 1);
  EXPECT_EQ(pool.num_workers(), 2);

  for (size_t i = 0; i < runs.size(); ++i) {
    ASSERT_EQ(runs[i].load(), 1) << "task " << i;
  }
}

TEST(WorkerPoolTest, ShrinkThenGrowReusesThreadNames) {
  OrderLog names;
  Counter started;
  absl::Notification release;
  WorkerPool pool(/*num_workers=*/3, "reuse");
  pool.SetNumWorkers(1);
  pool.SetNumWorkers(3);
  EXPECT_EQ(pool.num_workers(), 3);
  for (int i = 0; i < 3; ++i) {
    pool.Submit("job", [&] {
      names.Append(CurrentThreadName());
      started.Add(1);
      release.WaitForNotification();
    });
  }
  ASSERT_TRUE(started.AwaitAtLeast(3));
  release.Notify();
  // Three distinct threads, named from the lowest free slots: growing back
  // reuses the names of the workers that left (or kept them running).
  EXPECT_THAT(names.entries(),
              UnorderedElementsAre("reuse-0", "reuse-1", "reuse-2"));
}

TEST(WorkerPoolTest, ClampsWorkerCountToOne) {
  absl::Notification ran;
  WorkerPool pool(/*num_workers=*/0, "clamp");
  EXPECT_EQ(pool.num_workers(), 1);
  pool.SetNumWorkers(-3);
  EXPECT_EQ(pool.num_workers(), 1);
  pool.Submit("job", [&] { ran.Notify(); });
  EXPECT_TRUE(ran.WaitForNotificationWithTimeout(kHangGuard));
}

TEST(WorkerPoolTest, IgnoresEmptyTask) {
  absl::Notification ran;
  WorkerPool pool(/*num_workers=*/1, "empty");
  pool.Submit("job", WorkerPool::Task());
  EXPECT_EQ(pool.queued(), 0u);
  pool.Submit("job", [&] { ran.Notify(); });
  EXPECT_TRUE(ran.WaitForNotificationWithTimeout(kHangGuard));
}

TEST(WorkerPoolTest, DestructorDiscardsQueuedTasksAndWaitsForRunningOnes) {
  constexpr int kQueued = 10;
  std::atomic<int> destroyed{0};
  std::atomic<int> ran{0};
  std::atomic<bool> running_task_finished{false};
  absl::Notification running_started;
  absl::Notification release;

  auto pool = std::make_unique<WorkerPool>(/*num_workers=*/1, "dtor");
  pool->Submit("job", [&] {
    running_started.Notify();
    release.WaitForNotification();
    running_task_finished = true;
  });
  ASSERT_TRUE(running_started.WaitForNotificationWithTimeout(kHangGuard));
  for (int i = 0; i < kQueued; ++i) {
    auto token = std::make_shared<DestructionCounter>(&destroyed);
    pool->Submit("job", [token, &ran] { ran.fetch_add(1); });
  }
  EXPECT_EQ(pool->queued(), static_cast<uint64_t>(kQueued));

  std::thread destroyer([&] { pool.reset(); });
  // The destructor discards the queue first (destroying each task's
  // captures), then waits for the running task.
  const absl::Time deadline = absl::Now() + kHangGuard;
  while (destroyed.load() < kQueued && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  const int destroyed_before_release = destroyed.load();
  EXPECT_FALSE(running_task_finished.load());
  release.Notify();
  destroyer.join();

  EXPECT_EQ(destroyed_before_release, kQueued);

  EXPECT_TRUE(running_task_finished.load());
  EXPECT_EQ(ran.load(), 0);
  EXPECT_EQ(destroyed.load(), kQueued);
}

TEST(WorkerPoolTest, TaskCanSubmitTasks) {
  for (int num_workers : {1, 3}) {
    constexpr int kDepth = 200;
    Counter ran;
    absl::Notification done;
    std::function<void(int)> step;
    WorkerPool pool(num_workers, "nested");
    // Each task submits the next, alternating jobs; the last one notifies.
    step = [&](int depth) {
      ran.Add(1);
      if (depth == kDepth) {
        done.Notify();
        return;
      }
      pool.Submit(depth % 2 == 0 ? "even" : "odd",
                  [&step, depth] { step(depth + 1); });
    };
    pool.Submit("even", [&step] { step(1); });
    ASSERT_TRUE(done.WaitForNotificationWithTimeout(kHangGuard));
    EXPECT_EQ(ran.value(), kDepth);
  }
}

TEST(WorkerPoolTest, BusyTimeGrowsWhileTaskRunsAndNeverExceedsAliveTime) {
  absl::Notification started;
  absl::Notification release;
  absl::Notification finished;
  WorkerPool pool(/*num_workers=*/2, "busy");
  EXPECT_LE(pool.busy_time(), pool.alive_time());

  pool.Submit("job", [&] {
    started.Notify();
    release.WaitForNotification();
    finished.Notify();
  });
  ASSERT_TRUE(started.WaitForNotificationWithTimeout(kHangGuard));

  // The running task's time counts before it finishes.
  const absl::Duration busy_before = pool.busy_time();
  const absl::Time deadline = absl::Now() + kHangGuard;
  while (pool.busy_time() <= busy_before && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  const absl::Duration busy_mid = pool.busy_time();
  EXPECT_GT(busy_mid, busy_before);
  EXPECT_LE(busy_mid, pool.alive_time());
  // Two workers alive, one busy: alive time grows at least as fast.
  EXPECT_GT(pool.alive_time(), busy_mid);

  release.Notify();
  finished.WaitForNotification();
  const absl::Duration busy_after = pool.busy_time();
  EXPECT_GE(busy_after, busy_mid);
  EXPECT_LE(busy_after, pool.alive_time());
}

TEST(WorkerPoolTest, AccountsTimeOfExitedWorkers) {
  absl::BlockingCounter done(8);
  WorkerPool pool(/*num_workers=*/4, "exited");
  for (int i = 0; i < 8; ++i) {
    pool.Submit("job", [&] { done.DecrementCount(); });
  }
  done.Wait();
  const absl::Duration busy = pool.busy_time();
  const absl::Duration alive = pool.alive_time();
  pool.SetNumWorkers(1);
  pool.SetNumWorkers(1);  // Joins the workers that exited meanwhile.
  // Time already counted is never lost when workers exit.
  EXPECT_GE(pool.busy_time(), busy);
  EXPECT_GE(pool.alive_time(), alive);
  EXPECT_LE(pool.busy_time(), pool.alive_time());
}

}  // namespace
}  // namespace batchd::server
