// NativeLoader and NativeBatch: the C++ side of the `batchd` Python package
// (module `batchd._native`). They wrap client::Loader and client::Batch
// (client/loader.h) with what Python needs and C++ does not:
//
// - NativeBatch owns one client::Batch (a lease on a ring slot) and exports
//   its pixels through the buffer protocol, so torch.frombuffer() wraps the
//   slot without copying. The slot goes back to the ring when the last
//   Python object that holds the NativeBatch (a tensor's storage, a
//   memoryview) dies, or on Release().
// - NativeLoader runs client::Loader::Next() on a fetch thread and waits for
//   it in short slices with the GIL released, checking for signals between
//   slices, so Ctrl-C interrupts a wait for data at once. An interrupted
//   fetch stays in flight; its batch is kept and returned by the next
//   Next(), so no batch is skipped.
//
// No Python here: errors are absl::Status, and the bindings (module.cc)
// turn them into Python exceptions.
//
// Thread-safety: a NativeLoader is used by one Python thread at a time (the
// bindings hold the GIL when they enter it). Stats() and LiveBatches() may be
// called from any thread. A NativeBatch may be released on any thread, also
// after its loader is closed.
#ifndef BATCHD_PYTHON_NATIVE_NATIVE_LOADER_H_
#define BATCHD_PYTHON_NATIVE_NATIVE_LOADER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "batchd/v1/data.pb.h"
#include "client/loader.h"

namespace batchd::python {

// One batch handed to Python. Move-only; see the file comment.
class NativeBatch {
 public:
  NativeBatch(client::Batch batch, std::shared_ptr<std::atomic<int64_t>> live);
  NativeBatch(const NativeBatch&) = delete;
  NativeBatch& operator=(const NativeBatch&) = delete;
  ~NativeBatch();

  const client::Batch& batch() const { return batch_; }
  // Pixels; nullptr after Release().
  uint8_t* data() const { return const_cast<uint8_t*>(batch_.data()); }
  size_t size() const { return batch_.size(); }
  bool released() const { return batch_.data() == nullptr; }
  // Returns the slot to the ring now. Idempotent. Any view of the pixels
  // taken before must not be used afterwards.
  void Release();

 private:
  client::Batch batch_;
  // Count of unreleased NativeBatches of one loader; shared with it.
  std::shared_ptr<std::atomic<int64_t>> live_;
};

// Everything that decides a batch (client::LoaderOptions in Python terms).
struct NativeLoaderOptions {
  std::string endpoint;
  batchd::v1::Plan plan;
  uint32_t prefetch = 4;
  absl::Duration connect_timeout = absl::Seconds(10);
};

// Streams one plan. See the file comment.
class NativeLoader {
 public:
  // Called between waiting slices with the GIL held; a non-OK status (for
  // example CANCELLED for a pending KeyboardInterrupt) ends the wait and is
  // returned by Next(). The fetch stays in flight.
  using InterruptCheck = std::function<absl::Status()>;

  // Connects and opens the plan (client::Loader::Create). Blocks up to
  // 2 x `options.connect_timeout`.
  static absl::StatusOr<std::unique_ptr<NativeLoader>> Create(
      NativeLoaderOptions options);
  NativeLoader(const NativeLoader&) = delete;
  NativeLoader& operator=(const NativeLoader&) = delete;
  // Close().
  ~NativeLoader();

  const batchd::v1::PlanOpened& opened() const { return opened_; }
  uint32_t window() const { return window_; }

  // client::Loader::StartEpoch. First waits for a fetch still in flight
  // (after an interrupted Next()) and drops its batch. `without_gil` and
  // `check` as for Next().
  absl::Status StartEpoch(uint64_t epoch, uint64_t first_batch,
                          const std::function<void(std::function<void()>)>&
                              without_gil,
                          const InterruptCheck& check);

  // The next batch of the epoch, or nullptr at its end (OUT_OF_RANGE).
  // Blocks until it has arrived. `without_gil(f)` runs f with the GIL
  // released; `check` runs between slices of kWaitSlice with the GIL held.
  absl::StatusOr<std::unique_ptr<NativeBatch>> Next(
      const std::function<void(std::function<void()>)>& without_gil,
      const InterruptCheck& check);

  client::Loader::Stats Stats() const;
  // NativeBatches of this loader alive and not released.
  int64_t LiveBatches() const { return live_->load(); }

  // Ends the stream and joins the fetch thread. Batches already handed out
  // stay valid. If a fetch is in flight (an interrupted Next()), waits up to
  // kCloseGrace for it; its batch is dropped. Idempotent. Blocks; call
  // without the GIL.
  void Close();
  bool closed() const;

  // How long one waiting slice lasts: the latency of Ctrl-C.
  static constexpr absl::Duration kWaitSlice = absl::Milliseconds(50);
  static constexpr absl::Duration kCloseGrace = absl::Seconds(1);

 private:
  explicit NativeLoader(std::unique_ptr<client::Loader> loader);
  void FetchLoop();
  // Waits for the fetch in flight to finish, in slices.
  absl::Status AwaitFetch(
      const std::function<void(std::function<void()>)>& without_gil,
      const InterruptCheck& check);

  // Constant after construction.
  batchd::v1::PlanOpened opened_;
  uint32_t window_ = 0;
  std::shared_ptr<std::atomic<int64_t>> live_ =
      std::make_shared<std::atomic<int64_t>>(0);

  mutable absl::Mutex mu_;
  // The loader; moved out and destroyed by Close(). The fetch thread calls
  // its Next() and the consumer its StartEpoch(), never both at once: the
  // consumer waits for a fetch in flight first.
  std::unique_ptr<client::Loader> loader_ ABSL_GUARDED_BY(mu_);
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  // A Next() was asked of the fetch thread and has not been collected.
  bool requested_ ABSL_GUARDED_BY(mu_) = false;
  // The fetch thread has finished the request; `result_` holds its answer.
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::StatusOr<client::Batch> result_ ABSL_GUARDED_BY(mu_);
  std::thread fetcher_;
};

// ListDatasets on the daemon at `endpoint`.
absl::StatusOr<batchd::v1::ListDatasetsResponse> ListDatasets(
    const std::string& endpoint, absl::Duration timeout);

}  // namespace batchd::python

#endif  // BATCHD_PYTHON_NATIVE_NATIVE_LOADER_H_
