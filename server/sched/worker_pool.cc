#include "server/sched/worker_pool.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <deque>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace batchd::server {
namespace {

// Linux limits thread names to 15 bytes plus the terminating NUL.
constexpr size_t kMaxThreadNameLength = 15;

// Monotonic time, as a Duration since an arbitrary epoch: busy/alive
// accounting must not jump when the wall clock is set.
absl::Duration MonotonicNow() {
  return absl::FromChrono(std::chrono::steady_clock::now().time_since_epoch());
}

void SetCurrentThreadName(const std::string& name) {
  const std::string truncated = name.substr(0, kMaxThreadNameLength);
  pthread_setname_np(pthread_self(), truncated.c_str());
}

}  // namespace

struct WorkerPool::Impl {
  // One thread of the pool. Lives in `workers_`; every field is protected by
  // `mu_` (the annotation sits on `workers_`).
  struct Worker {
    enum class State {
      kFree,     // Slot unused: no thread, or its thread exited and was
                 // handed to a caller to join.
      kRunning,  // Thread is serving tasks; counted in `live_workers_`.
      kExited,   // Thread has left its loop and awaits a join.
    };
    State state = State::kFree;
    std::thread thread;
    // When the thread was started (MonotonicNow()); valid while kRunning.
    absl::Duration alive_since;
    // When the current task started; valid while `busy`.
    bool busy = false;
    absl::Duration busy_since;
  };

  explicit Impl(std::string name) : name_(std::move(name)) {}

  // Moves the threads of exited workers into `to_join` and frees their
  // slots, then starts threads in the lowest free slots until
  // `live_workers_` reaches `target_workers_`. The caller joins `to_join`
  // after releasing `mu_` (an exited worker has released `mu_` for the last
  // time, so the joins are short).
  void ResizeLocked(std::vector<std::thread>* to_join)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Body of worker thread `slot`.
  void WorkerLoop(size_t slot) ABSL_LOCKS_EXCLUDED(mu_);

  // Removes and returns the next task in round-robin order.
  // REQUIRES: !rotation_.empty().
  Task PopLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Wake-up condition of an idle worker: there is work, or it must exit.
  bool WorkerShouldWake() const ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return stopping_ || live_workers_ > target_workers_ || !rotation_.empty();
  }

  // Constant after construction.
  const std::string name_;

  mutable absl::Mutex mu_;
  // Queued tasks per job. Invariant: a job is present iff its queue is
  // non-empty, and then it appears exactly once in `rotation_`.
  std::unordered_map<std::string, std::deque<Task>> queues_
      ABSL_GUARDED_BY(mu_);
  // Jobs with queued tasks, in the order they will be served next.
  std::deque<std::string> rotation_ ABSL_GUARDED_BY(mu_);
  // Sum of the sizes of `queues_`.
  uint64_t queued_ ABSL_GUARDED_BY(mu_) = 0;
  // Requested number of threads (>= 1).
  int target_workers_ ABSL_GUARDED_BY(mu_) = 0;
  // Threads in state kRunning. May exceed `target_workers_` after a shrink
  // until the surplus workers finish their current task.
  int live_workers_ ABSL_GUARDED_BY(mu_) = 0;
  // Set by the destructor: workers exit, Submit discards.
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Indexed by slot; a thread is named "<name_>-<slot>". Growing fills the
  // lowest free slots, including those of workers that exited.
  std::vector<Worker> workers_ ABSL_GUARDED_BY(mu_);
  // Busy time of finished tasks, and alive time of exited workers. Time of
  // running tasks and live workers is added on read.
  absl::Duration busy_done_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
  absl::Duration alive_done_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
};

void WorkerPool::Impl::ResizeLocked(std::vector<std::thread>* to_join) {
  for (Worker& worker : workers_) {
    if (worker.state == Worker::State::kExited) {
      to_join->push_back(std::move(worker.thread));
      worker.state = Worker::State::kFree;
    }
  }
  size_t slot = 0;
  while (live_workers_ < target_workers_) {
    while (slot < workers_.size() &&
           workers_[slot].state != Worker::State::kFree) {
      ++slot;
    }
    if (slot == workers_.size()) workers_.emplace_back();
    Worker& worker = workers_[slot];
    worker.state = Worker::State::kRunning;
    worker.alive_since = MonotonicNow();
    worker.busy = false;
    // The new thread blocks on `mu_` until the caller releases it, so it
    // cannot observe the slot before this assignment.
    worker.thread = std::thread([this, slot] { WorkerLoop(slot); });
    ++live_workers_;
  }
}

WorkerPool::Task WorkerPool::Impl::PopLocked() {
  std::string job = std::move(rotation_.front());
  rotation_.pop_front();
  auto it = queues_.find(job);
  Task task = std::move(it->second.front());
  it->second.pop_front();
  --queued_;
  if (it->second.empty()) {
    // The job leaves the rotation; it rejoins at the end on its next Submit.
    queues_.erase(it);
  } else {
    rotation_.push_back(std::move(job));
  }
  return task;
}

void WorkerPool::Impl::WorkerLoop(size_t slot) {
  SetCurrentThreadName(name_ + "-" + std::to_string(slot));

  mu_.Lock();
  while (true) {
    mu_.Await(absl::Condition(this, &Impl::WorkerShouldWake));
    if (stopping_ || live_workers_ > target_workers_) break;
    Task task = PopLocked();
    workers_[slot].busy = true;
    workers_[slot].busy_since = MonotonicNow();
    mu_.Unlock();

    std::move(task)();
    // Destroy the task's captures outside the lock too: they may do
    // arbitrary work, including calling Submit.
    task = nullptr;

    mu_.Lock();
    Worker& worker = workers_[slot];
    busy_done_ += MonotonicNow() - worker.busy_since;
    worker.busy = false;
  }
  Worker& worker = workers_[slot];
  alive_done_ += MonotonicNow() - worker.alive_since;
  worker.state = Worker::State::kExited;
  --live_workers_;
  mu_.Unlock();
}

WorkerPool::WorkerPool(int num_workers, std::string name)
    : impl_(std::make_unique<Impl>(std::move(name))) {
  std::vector<std::thread> to_join;  // Stays empty: no worker exited yet.
  absl::MutexLock lock(&impl_->mu_);
  impl_->target_workers_ = std::max(num_workers, 1);
  impl_->ResizeLocked(&to_join);
}

WorkerPool::~WorkerPool() {
  std::unordered_map<std::string, std::deque<Task>> discarded;
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&impl_->mu_);
    impl_->stopping_ = true;
    discarded.swap(impl_->queues_);
    impl_->rotation_.clear();
    impl_->queued_ = 0;
    for (Impl::Worker& worker : impl_->workers_) {
      if (worker.state != Impl::Worker::State::kFree) {
        threads.push_back(std::move(worker.thread));
      }
    }
  }
  // Queued tasks are destroyed without running, outside the lock (their
  // destructors may call Submit, which now discards).
  discarded.clear();
  // Running tasks finish; then every worker sees `stopping_` and exits.
  for (std::thread& thread : threads) thread.join();
}

void WorkerPool::Submit(absl::string_view job, Task task) {
  if (!task) return;  // Nothing to run.
  {
    absl::MutexLock lock(&impl_->mu_);
    if (!impl_->stopping_) {
      auto [it, inserted] = impl_->queues_.try_emplace(std::string(job));
      if (inserted) impl_->rotation_.push_back(it->first);
      it->second.push_back(std::move(task));
      ++impl_->queued_;
      return;
    }
  }
  // The pool is stopping: discard the task, destroying it outside the lock
  // (its destructor may call Submit).
  task = nullptr;
}

void WorkerPool::SetNumWorkers(int num_workers) {
  std::vector<std::thread> to_join;
  {
    absl::MutexLock lock(&impl_->mu_);
    // Surplus workers notice the new target when `mu_` is released (their
    // wait condition is re-evaluated) or when their current task ends.
    impl_->target_workers_ = std::max(num_workers, 1);
    impl_->ResizeLocked(&to_join);
  }
  for (std::thread& thread : to_join) thread.join();
}

int WorkerPool::num_workers() const {
  absl::MutexLock lock(&impl_->mu_);
  return impl_->target_workers_;
}

uint64_t WorkerPool::queued() const {
  absl::MutexLock lock(&impl_->mu_);
  return impl_->queued_;
}

absl::Duration WorkerPool::busy_time() const {
  absl::MutexLock lock(&impl_->mu_);
  const absl::Duration now = MonotonicNow();
  absl::Duration total = impl_->busy_done_;
  for (const Impl::Worker& worker : impl_->workers_) {
    if (worker.busy) total += now - worker.busy_since;
  }
  return total;
}

absl::Duration WorkerPool::alive_time() const {
  absl::MutexLock lock(&impl_->mu_);
  const absl::Duration now = MonotonicNow();
  absl::Duration total = impl_->alive_done_;
  for (const Impl::Worker& worker : impl_->workers_) {
    if (worker.state == Impl::Worker::State::kRunning) {
      total += now - worker.alive_since;
    }
  }
  return total;
}

}  // namespace batchd::server
