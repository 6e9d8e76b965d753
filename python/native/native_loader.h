// FetchingLoader and NativeBatch: the C++ side of the `batchd` Python
// package (module `batchd._native`). They wrap a client loader
// (client::Loader from client/loader.h, or client::DeviceLoader from
// client/device_loader.h when that is built) with what Python needs and C++
// does not:
//
// - NativeBatch owns one batch (a lease on a ring or output slot) and the
//   bindings export its memory without copying (buffer protocol or DLPack),
//   so torch wraps the slot. The slot goes back to its loader when the last
//   Python object holding the NativeBatch dies, or on Release().
// - FetchingLoader runs the loader's Next() on a fetch thread and waits for
//   it in short slices with the GIL released, checking for signals between
//   slices, so Ctrl-C interrupts a wait for data at once. An interrupted
//   fetch stays in flight; its batch is kept and returned by the next
//   Next(), so no batch is skipped.
//
// No Python here: errors are absl::Status, and the bindings (module.cc)
// turn them into Python exceptions.
//
// Thread-safety: a FetchingLoader is used by one Python thread at a time
// (the bindings hold the GIL when they enter it), except that Close() may
// be called from another thread while Next() or StartEpoch() waits: the
// wait ends with CANCELLED. Stats(), Diagnose(), EpochDiagnosis() and
// LiveBatches() may be called from any thread. A NativeBatch may be released on any
// thread, also after its loader is closed.
#ifndef BATCHD_PYTHON_NATIVE_NATIVE_LOADER_H_
#define BATCHD_PYTHON_NATIVE_NATIVE_LOADER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "batchd/v1/data.pb.h"
#include "client/diagnosis.h"
#include "client/loader.h"
#include "client/step_timeline.h"

namespace batchd::python {

// The plain client::Loader under a loader type: itself, or (specialised
// next to its bindings) the Loader a DeviceLoader wraps.
template <typename LoaderT>
struct LoaderTraits {
  static const client::Loader& Base(const LoaderT& loader) { return loader; }
};

// One batch handed to Python: client::Batch or client::DeviceBatch.
// Move-only; see the file comment.
template <typename BatchT>
class NativeBatch {
 public:
  NativeBatch(BatchT batch, std::shared_ptr<std::atomic<int64_t>> live)
      : batch_(std::move(batch)), live_(std::move(live)) {
    live_->fetch_add(1);
  }
  NativeBatch(const NativeBatch&) = delete;
  NativeBatch& operator=(const NativeBatch&) = delete;
  ~NativeBatch() { Release(); }

  const BatchT& batch() const { return batch_; }
  // The batch's memory; nullptr after Release().
  void* data() const { return const_cast<void*>(static_cast<const void*>(
      batch_.data())); }
  size_t size() const { return batch_.size(); }
  bool released() const { return batch_.data() == nullptr; }
  // Returns the slot now. Idempotent. Views of the memory taken before
  // must not be used afterwards.
  void Release() {
    if (batch_.data() == nullptr) return;
    batch_.Release();
    live_->fetch_sub(1);
  }

 private:
  BatchT batch_;
  // Count of unreleased NativeBatches of one loader; shared with it.
  std::shared_ptr<std::atomic<int64_t>> live_;
};

// Runs `f` with the GIL released (supplied by the bindings).
using WithoutGil = std::function<void(const std::function<void()>&)>;
// Called between waiting slices with the GIL held; a non-OK status (for
// example CANCELLED for a pending KeyboardInterrupt) ends the wait. The
// fetch stays in flight.
using InterruptCheck = std::function<absl::Status()>;

// Streams one plan through a LoaderT (client::Loader or
// client::DeviceLoader) whose Next() returns BatchT. See the file comment.
template <typename LoaderT, typename BatchT>
class FetchingLoader {
 public:
  using Batch = NativeBatch<BatchT>;

  explicit FetchingLoader(std::unique_ptr<LoaderT> loader)
      : opened_(LoaderTraits<LoaderT>::Base(*loader).opened()),
        window_(LoaderTraits<LoaderT>::Base(*loader).window()),
        loader_(std::move(loader)),
        result_(absl::UnknownError("no batch fetched")) {
    fetcher_ = std::thread([this] { FetchLoop(); });
  }
  FetchingLoader(const FetchingLoader&) = delete;
  FetchingLoader& operator=(const FetchingLoader&) = delete;
  // Close().
  ~FetchingLoader() { Close(); }

  const batchd::v1::PlanOpened& opened() const { return opened_; }
  uint32_t window() const { return window_; }
  // The wrapped loader, for type-specific queries; null once closed.
  // REQUIRES: no other thread closes the loader meanwhile.
  const LoaderT* loader() const {
    absl::MutexLock lock(&mu_);
    return loader_.get();
  }

  // LoaderT::StartEpoch. First waits for a fetch still in flight (after an
  // interrupted Next()) and drops its batch.
  absl::Status StartEpoch(uint64_t epoch, uint64_t first_batch,
                          const WithoutGil& without_gil,
                          const InterruptCheck& check);

  // The next batch of the epoch, or nullptr at its end (OUT_OF_RANGE).
  // Blocks until it has arrived, in slices of kWaitSlice without the GIL,
  // running `check` between them.
  absl::StatusOr<std::unique_ptr<Batch>> Next(const WithoutGil& without_gil,
                                              const InterruptCheck& check);

  client::Loader::Stats Stats() const {
    absl::MutexLock lock(&mu_);
    if (loader_ == nullptr) return client::Loader::Stats();
    return LoaderTraits<LoaderT>::Base(*loader_).stats();
  }
  std::vector<client::TimelineStep> Timeline() const {
    absl::MutexLock lock(&mu_);
    if (loader_ == nullptr) return {};
    return LoaderTraits<LoaderT>::Base(*loader_).timeline();
  }
  // LoaderT::Diagnose(): the current epoch so far, with the daemon's status
  // (fetched now, up to 2 s). FAILED_PRECONDITION once closed. Blocks; call
  // without the GIL.
  absl::StatusOr<client::Diagnosis> Diagnose() {
    // Close() waits for this reader before destroying the loader.
    absl::ReaderMutexLock life(&lifetime_mu_);
    LoaderT* loader;
    {
      absl::MutexLock lock(&mu_);
      loader = loader_.get();
    }
    if (loader == nullptr) {
      return absl::FailedPreconditionError("the loader is closed");
    }
    return loader->Diagnose();
  }
  // The last ended epoch's diagnosis line; "" if none has ended or closed.
  std::string EpochDiagnosis() const {
    absl::MutexLock lock(&mu_);
    return loader_ == nullptr ? std::string() : loader_->epoch_diagnosis();
  }
  // Batches of this loader alive and not released.
  int64_t LiveBatches() const { return live_->load(); }

  // Ends the stream and joins the fetch thread. Batches already handed out
  // stay valid. A fetch in flight (an interrupted Next(), or one on another
  // thread) is cancelled (LoaderT::Cancel()) and its batch, if any, dropped;
  // the loader is destroyed only after the fetch thread has been joined, so
  // destruction never overlaps its Next(). Idempotent. Blocks briefly; call
  // without the GIL.
  void Close();
  bool closed() const {
    absl::MutexLock lock(&mu_);
    return closing_;
  }

  // How long one waiting slice lasts: the latency of Ctrl-C.
  static constexpr absl::Duration kWaitSlice = absl::Milliseconds(50);

 private:
  void FetchLoop();
  // Waits for the fetch in flight to finish, in slices. CANCELLED when
  // Close() is called meanwhile.
  absl::Status AwaitFetch(const WithoutGil& without_gil,
                          const InterruptCheck& check);

  // Constant after construction.
  const batchd::v1::PlanOpened opened_;
  const uint32_t window_;
  const std::shared_ptr<std::atomic<int64_t>> live_ =
      std::make_shared<std::atomic<int64_t>>(0);

  // Held shared by Diagnose() (a status RPC, too long to hold mu_ for) and
  // exclusively by Close() while it takes the loader away.
  absl::Mutex lifetime_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  mutable absl::Mutex mu_;
  // The loader; moved out and destroyed by Close(). The fetch thread calls
  // its Next() and the consumer its StartEpoch(), never both at once: the
  // consumer waits for a fetch in flight first.
  std::unique_ptr<LoaderT> loader_ ABSL_GUARDED_BY(mu_);
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  // A Next() was asked of the fetch thread and has not been collected.
  bool requested_ ABSL_GUARDED_BY(mu_) = false;
  // The fetch thread has finished the request; `result_` holds its answer.
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::StatusOr<BatchT> result_ ABSL_GUARDED_BY(mu_);
  std::thread fetcher_;
};

// ListDatasets on the daemon at `endpoint`.
absl::StatusOr<batchd::v1::ListDatasetsResponse> ListDatasets(
    const std::string& endpoint, const client::SecurityOptions& security,
    absl::Duration timeout);

// ---- Implementation ----

template <typename LoaderT, typename BatchT>
void FetchingLoader<LoaderT, BatchT>::FetchLoop() {
  for (;;) {
    LoaderT* loader = nullptr;
    {
      absl::MutexLock lock(&mu_);
      auto has_work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return closing_ || (requested_ && !done_);
      };
      mu_.Await(absl::Condition(&has_work));
      if (closing_) {
        if (requested_ && !done_) {
          result_ = absl::CancelledError("the loader is closed");
          done_ = true;
        }
        return;
      }
      loader = loader_.get();
    }
    // Close() destroys the loader only after this thread has been joined,
    // so the loader outlives this call; for a daemon that stopped
    // answering, Close() wakes it with LoaderT::Cancel().
    absl::StatusOr<BatchT> batch = loader->Next();
    absl::MutexLock lock(&mu_);
    result_ = std::move(batch);
    done_ = true;
  }
}

template <typename LoaderT, typename BatchT>
absl::Status FetchingLoader<LoaderT, BatchT>::AwaitFetch(
    const WithoutGil& without_gil, const InterruptCheck& check) {
  for (;;) {
    bool done = false;
    bool closed = false;
    without_gil([this, &done, &closed] {
      absl::MutexLock lock(&mu_);
      auto finished = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return done_ || closing_;
      };
      mu_.AwaitWithTimeout(absl::Condition(&finished), kWaitSlice);
      done = done_;
      closed = closing_;
    });
    // Close() on another thread cancelled the fetch and drops its result.
    if (closed) return absl::CancelledError("the loader was closed");
    if (done) return absl::OkStatus();
    absl::Status status = check();
    if (!status.ok()) return status;
  }
}

template <typename LoaderT, typename BatchT>
absl::Status FetchingLoader<LoaderT, BatchT>::StartEpoch(
    uint64_t epoch, uint64_t first_batch, const WithoutGil& without_gil,
    const InterruptCheck& check) {
  bool in_flight = false;
  {
    absl::MutexLock lock(&mu_);
    if (closing_) return absl::FailedPreconditionError("the loader is closed");
    in_flight = requested_;
  }
  if (in_flight) {
    // An interrupted Next() left a fetch running; the new range replaces it.
    absl::Status status = AwaitFetch(without_gil, check);
    if (!status.ok()) return status;
    absl::StatusOr<BatchT> dropped(absl::UnknownError(""));
    {
      absl::MutexLock lock(&mu_);
      dropped = std::move(result_);
      result_ = absl::UnknownError("no batch fetched");
      requested_ = false;
      done_ = false;
    }
    without_gil([&dropped] { dropped = absl::UnknownError(""); });
  }
  absl::Status status;
  without_gil([this, epoch, first_batch, &status] {
    LoaderT* loader;
    {
      absl::MutexLock lock(&mu_);
      loader = loader_.get();
    }
    status = loader == nullptr
                 ? absl::FailedPreconditionError("the loader is closed")
                 : loader->StartEpoch(epoch, first_batch);
  });
  return status;
}

template <typename LoaderT, typename BatchT>
absl::StatusOr<std::unique_ptr<NativeBatch<BatchT>>>
FetchingLoader<LoaderT, BatchT>::Next(const WithoutGil& without_gil,
                                      const InterruptCheck& check) {
  {
    absl::MutexLock lock(&mu_);
    if (closing_) return absl::FailedPreconditionError("the loader is closed");
    if (!requested_) {
      requested_ = true;
      done_ = false;
    }
  }
  absl::Status status = AwaitFetch(without_gil, check);
  if (!status.ok()) return status;
  absl::StatusOr<BatchT> result(absl::UnknownError(""));
  {
    absl::MutexLock lock(&mu_);
    result = std::move(result_);
    result_ = absl::UnknownError("no batch fetched");
    requested_ = false;
    done_ = false;
  }
  if (absl::IsOutOfRange(result.status())) return nullptr;
  if (!result.ok()) return result.status();
  return std::make_unique<Batch>(*std::move(result), live_);
}

template <typename LoaderT, typename BatchT>
void FetchingLoader<LoaderT, BatchT>::Close() {
  bool in_flight = false;
  {
    absl::MutexLock lock(&mu_);
    if (closing_) return;
    closing_ = true;
    in_flight = requested_ && !done_;
  }
  if (in_flight) {
    // The fetch thread may be inside Next(), perhaps on a daemon that
    // stopped answering; Cancel() wakes it with CANCELLED. The loader stays
    // alive (owned by loader_) until the thread is joined below.
    LoaderT* loader;
    {
      absl::MutexLock lock(&mu_);
      loader = loader_.get();
    }
    loader->Cancel();
  }
  // The fetch thread sees closing_ once idle and returns.
  if (fetcher_.joinable()) fetcher_.join();
  // No Next() is running now. The loader's destructor half-closes or
  // cancels the stream and joins its reader thread.
  std::unique_ptr<LoaderT> loader;
  absl::StatusOr<BatchT> dropped(absl::UnknownError(""));
  {
    absl::WriterMutexLock life(&lifetime_mu_);
    absl::MutexLock lock(&mu_);
    loader = std::move(loader_);
    dropped = std::move(result_);
    result_ = absl::CancelledError("the loader is closed");
    requested_ = false;
    done_ = false;
  }
  // A dropped batch returns its slot to the loader: release it first.
  dropped = absl::UnknownError("");
  loader.reset();
}

// The plain loader.
using NativeLoader = FetchingLoader<client::Loader, client::Batch>;

// Connects and opens the plan (client::Loader::Create).
absl::StatusOr<std::unique_ptr<NativeLoader>> CreateNativeLoader(
    client::LoaderOptions options);

}  // namespace batchd::python

#endif  // BATCHD_PYTHON_NATIVE_NATIVE_LOADER_H_
