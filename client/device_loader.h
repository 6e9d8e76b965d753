// DeviceLoader: the client's batches as the training step wants them, on
// the GPU when there is one and in host memory otherwise, through one API.
//
// It wraps a Loader (client/loader.h) and adds, when a CUDA device is usable:
//   - a pinned ring: the Loader's slots come from cudaHostAlloc
//     (NewPinnedAllocator), so received chunks are written straight into
//     page-locked memory;
//   - a copy engine (client/cuda/copy_engine.h): each batch is copied to one
//     of `depth` device slots with cudaMemcpyAsync on a dedicated copy
//     stream and normalised there (uint8 -> float32/float16/bfloat16, NCHW or
//     NHWC, per-channel mean/std) in one kernel (one launch per view for a
//     plan with Plan.views, each view with its own shape);
//   - events instead of host waits: a DeviceBatch carries the event that
//     completes when its data is ready (make the compute stream wait on it),
//     and releasing it records an event on the consumer's stream that the
//     next copy into that slot waits on.
// Without a device (or a CUDA build) the same calls hand out host batches
// normalised on the CPU with identical results (ready_event() is null).
// One line on stderr at Create() says which path is in use. docs/gpu.md
// explains the buffer model.
//
//   DeviceLoaderOptions options;
//   options.loader.endpoint = "localhost:7070";
//   options.loader.plan = plan;
//   options.normalize.dtype = cuda::DType::kFloat16;
//   options.normalize.mean = {0.485f, 0.456f, 0.406f};
//   options.normalize.std = {0.229f, 0.224f, 0.225f};
//   options.consumer_stream = compute_stream;
//   ASSIGN_OR_RETURN(auto loader, DeviceLoader::Create(std::move(options)));
//   RETURN_IF_ERROR(loader->StartEpoch(0));
//   for (;;) {
//     absl::StatusOr<DeviceBatch> batch = loader->Next();
//     if (absl::IsOutOfRange(batch.status())) break;
//     if (!batch.ok()) return batch.status();
//     if (batch->ready_event()) cudaStreamWaitEvent(compute_stream,
//                                                   batch->ready_event(), 0);
//     Step<<<..., compute_stream>>>(batch->data(), ...);
//   }  // each DeviceBatch releases its slot (after the queued step) when
//      // destroyed
//
// Thread-safety: as Loader: Next(), StartEpoch() and Restore() from one
// consumer thread at a time; Cancel() from any thread; a DeviceBatch may be
// released on any thread, also after its DeviceLoader is gone.
#ifndef BATCHD_CLIENT_DEVICE_LOADER_H_
#define BATCHD_CLIENT_DEVICE_LOADER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "batchd/v1/data.pb.h"
#include "client/buffer.h"
#include "client/cuda/normalize.h"
#include "client/cuda/runtime.h"
#include "client/cuda/status.h"
#include "client/diagnosis.h"
#include "client/loader.h"

namespace batchd::client {

namespace internal {
class DeviceLoaderCore;
}  // namespace internal

// batchd_cuda's Status as an absl::Status (same code, same message): the
// edge between the CUDA library and the rest of the client.
absl::Status FromCudaStatus(const cuda::Status& status);

// A BufferAllocator of pinned host memory (name "cuda-pinned"); without a
// usable device it hands out heap memory instead (name "heap").
std::unique_ptr<BufferAllocator> NewPinnedAllocator();

struct DeviceLoaderOptions {
  // The stream to read. `loader.allocator` must be null: the DeviceLoader
  // supplies pinned memory (or heap memory on the host path).
  LoaderOptions loader;
  // What each batch becomes. uint8 output in the wire layout is a plain
  // copy; uint8 in the other layout is a transpose.
  cuda::NormalizeSpec normalize;
  // Output slots: how many DeviceBatches may be held at once (2-3 keep one
  // batch copying while one is consumed).
  int depth = 3;
  // The stream the consumer's work runs on. Destroying a DeviceBatch (or
  // Release() without a stream) records its release event here; null is
  // the legacy default stream.
  cuda::StreamHandle consumer_stream = nullptr;
  // Use the host path even when a device is usable.
  bool force_host = false;
};

// One batch in its final dtype and layout, leasing an output slot until
// destroyed, moved-from or Release()d. Move-only.
class DeviceBatch : public BatchInfo {
 public:
  // [n, c, h, w] for NCHW or [n, h, w, c] for NHWC. With Plan.views, the
  // flat [elements] of all views, and BatchInfo::views gives each view's
  // output: its shape in `layout` and the byte offset of its values within
  // data() (the views one after another, as in the received batch).
  std::vector<uint64_t> shape;
  cuda::DType dtype = cuda::DType::kUint8;
  cuda::Layout layout = cuda::Layout::kNCHW;
  // With Pipeline.mix: the soft labels, [n, num_classes] row-major (the
  // pixels are mixed to match); empty otherwise (use `labels`).
  std::vector<float> soft_labels;
  uint32_t num_classes = 0;

  // Device memory when on_device(), host memory otherwise; `size()` bytes.
  // nullptr for an empty DeviceBatch.
  const void* data() const { return data_; }
  size_t size() const { return size_; }
  // View `view`'s values (REQUIRES: view < views.size()).
  const void* view_data(size_t view) const {
    return static_cast<const uint8_t*>(data_) + views[view].offset();
  }
  bool on_device() const { return on_device_; }
  // On the device: completes when data() holds the batch; make the compute
  // stream wait on it (cudaStreamWaitEvent). Null on the host path, where
  // data() is ready on return from Next().
  cuda::EventHandle ready_event() const { return ready_; }

  DeviceBatch() = default;
  DeviceBatch(DeviceBatch&& other) noexcept;
  DeviceBatch& operator=(DeviceBatch&& other) noexcept;
  DeviceBatch(const DeviceBatch&) = delete;
  DeviceBatch& operator=(const DeviceBatch&) = delete;
  // Release() on the loader's consumer stream.
  ~DeviceBatch();

  // Returns the slot: on the device, it is reused only after the work
  // enqueued so far on `stream` completes (the host does not wait); data()
  // becomes nullptr. Idempotent.
  void Release();
  void Release(cuda::StreamHandle stream);

 private:
  friend class internal::DeviceLoaderCore;

  std::shared_ptr<internal::DeviceLoaderCore> core_;  // null when empty
  int slot_ = -1;
  const void* data_ = nullptr;
  size_t size_ = 0;
  bool on_device_ = false;
  cuda::EventHandle ready_ = nullptr;
};

class DeviceLoader {
 public:
  // Probes the device (unless `force_host`), creates the Loader with pinned
  // or heap slots and the output slots. Errors: the Loader's errors;
  // INVALID_ARGUMENT for a normalisation the batches cannot take (bad
  // mean/std, more than 4 channels), `depth` outside 1..64, a non-null
  // `loader.allocator`, or a plan with Pipeline.erasing or Pipeline.mix
  // and a uint8 output (they work on the normalised floats);
  // RESOURCE_EXHAUSTED when memory is short.
  //
  // With Plan.views, each view is normalised on its own (its shape, the
  // same mean/std, dtype and layout) into one output slot, the views one
  // after another (DeviceBatch::views); Pipeline.erasing and Pipeline.mix
  // do not go with views (INVALID_ARGUMENT).
  //
  // With Pipeline.erasing or Pipeline.mix, every batch is normalised,
  // erased and mixed in one pass (client/cuda/erase_mix.h; the same bits
  // on the device and the host), and DeviceBatch.soft_labels holds its
  // labels.
  static absl::StatusOr<std::unique_ptr<DeviceLoader>> Create(
      DeviceLoaderOptions options);

  DeviceLoader(const DeviceLoader&) = delete;
  DeviceLoader& operator=(const DeviceLoader&) = delete;
  // Stops the Loader. DeviceBatches still held stay valid.
  ~DeviceLoader();

  // As Loader::StartEpoch / Restore / state.
  absl::Status StartEpoch(uint64_t epoch, uint64_t first_batch = 0);
  absl::Status Restore(const LoaderState& state);
  LoaderState state() const;

  // Blocks until the next batch is received, then starts its copy and
  // normalisation (device) or normalises it (host) and returns it; on the
  // device it returns before the copy completes. OUT_OF_RANGE at the end
  // of the epoch and the Loader's other errors; FAILED_PRECONDITION, with
  // nothing consumed, when all `depth` output slots are held (release a
  // DeviceBatch). A CUDA error while enqueueing the copy is returned with
  // its code (RESOURCE_EXHAUSTED, INTERNAL, ...); that batch counts as
  // consumed: Restore() to a checkpoint to read it again.
  // Its copy work is reported to the Loader's stall accounting
  // (Loader::RecordCopy(), so stats().copy and the client-bound diagnosis
  // include it): on the host path the CPU normalisation into the output
  // slot; on the device the time to enqueue the copy and kernel (their
  // completion is not waited for).
  absl::StatusOr<DeviceBatch> Next();

  // Loader::Cancel(): every blocked and later Next() returns CANCELLED
  // promptly. The owner still destroys the DeviceLoader, once no thread is
  // inside Next(). Any thread.
  void Cancel() { loader_->Cancel(); }
  // Loader::Diagnose() and Loader::epoch_diagnosis() of the wrapped Loader,
  // whose copy time includes this loader's (see Next()). Any thread.
  Diagnosis Diagnose() { return loader_->Diagnose(); }
  std::string epoch_diagnosis() const { return loader_->epoch_diagnosis(); }

  // True when batches are on the GPU.
  bool on_device() const;
  // "cuda" or "host".
  const char* path() const;
  // The wrapped Loader (opened(), stats(), window()).
  const Loader& loader() const { return *loader_; }
  int depth() const;

 private:
  DeviceLoader(std::shared_ptr<internal::DeviceLoaderCore> core,
               std::unique_ptr<Loader> loader);

  // Shared with the DeviceBatches it returned; outlives loader_.
  const std::shared_ptr<internal::DeviceLoaderCore> core_;
  std::unique_ptr<Loader> loader_;
};

}  // namespace batchd::client

#endif  // BATCHD_CLIENT_DEVICE_LOADER_H_
