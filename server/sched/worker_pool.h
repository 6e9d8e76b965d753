// WorkerPool: a resizable pool of named threads shared by every stream, with
// per-job FIFO queues served round-robin, so that one greedy job cannot
// starve another.
//
// Scheduling: each worker takes the next task from the next job (in
// round-robin order over the jobs that have queued tasks); within a job,
// tasks run in submission order.
//
// Thread-safe. The destructor stops the pool: queued tasks are discarded
// (destroyed without running), running tasks finish, threads are joined.
//
//   WorkerPool pool(/*num_workers=*/4, "decode");
//   pool.Submit("job-a", [] { DecodeOne(); });
#ifndef BATCHD_SERVER_SCHED_WORKER_POOL_H_
#define BATCHD_SERVER_SCHED_WORKER_POOL_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/functional/any_invocable.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace batchd::server {

class WorkerPool {
 public:
  using Task = absl::AnyInvocable<void() &&>;

  // Starts `num_workers` (>= 1) threads named "<name>-<i>".
  WorkerPool(int num_workers, std::string name);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Queues `task` for `job`. Never blocks on other tasks (bounding the
  // amount of queued work is the caller's job: streams have windows).
  void Submit(absl::string_view job, Task task);

  // Changes the number of threads. Growing starts threads at once;
  // shrinking lets surplus workers exit after their current task. No task
  // is dropped or run twice. REQUIRES: num_workers >= 1.
  void SetNumWorkers(int num_workers);

  int num_workers() const;
  // Tasks queued and not yet started.
  uint64_t queued() const;

  // Total time workers spent running tasks, and total time workers existed,
  // since the pool started; busy fraction over an interval is the ratio of
  // the two deltas.
  absl::Duration busy_time() const;
  absl::Duration alive_time() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace batchd::server

#endif  // BATCHD_SERVER_SCHED_WORKER_POOL_H_
