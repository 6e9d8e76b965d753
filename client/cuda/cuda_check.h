// CUDA-only helpers for batchd_cuda's own sources: the macro that turns a
// cudaError_t into a Status, and RAII owners for streams, events and device
// memory (in the manner of DALI's UniqueHandle). Include only from files
// compiled with the CUDA toolkit.
//
// Destructors never throw and tolerate cudaErrorCudartUnloading (an owner
// destroyed from a static destructor after the runtime began unloading).
//
// Thread-safety: an owner is used by one thread at a time.
#ifndef BATCHD_CLIENT_CUDA_CUDA_CHECK_H_
#define BATCHD_CLIENT_CUDA_CUDA_CHECK_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "client/cuda/status.h"

namespace batchd::cuda {

// The Status for a failed CUDA call `what`: RESOURCE_EXHAUSTED for
// allocation failures, UNAVAILABLE for a missing device or driver,
// INVALID_ARGUMENT for invalid values, INTERNAL otherwise.
Status CudaErrorToStatus(cudaError_t error, const char* what);

// For destructors: ignores success and cudaErrorCudartUnloading, reports
// anything else on stderr (a destructor cannot return it).
void CheckInDestructor(cudaError_t error, const char* what);

}  // namespace batchd::cuda

// Evaluates `expr` (a cudaError_t) and returns a Status naming the call from
// the enclosing function when it is not cudaSuccess.
#define BATCHD_CUDA_CALL(expr)                                          \
  do {                                                                  \
    const cudaError_t batchd_cuda_error_ = (expr);                      \
    if (batchd_cuda_error_ != cudaSuccess) {                            \
      return ::batchd::cuda::CudaErrorToStatus(batchd_cuda_error_, #expr); \
    }                                                                   \
  } while (false)

namespace batchd::cuda {

// Owns a cudaStream_t (created non-blocking: it does not synchronise with
// the legacy default stream, so a consumer computing on stream 0 still
// overlaps with our copies).
class UniqueStream {
 public:
  UniqueStream() = default;
  static Status Create(UniqueStream* out) {
    cudaStream_t stream = nullptr;
    BATCHD_CUDA_CALL(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    out->Reset(stream);
    return OkStatus();
  }
  ~UniqueStream() { Reset(nullptr); }
  UniqueStream(UniqueStream&& other) noexcept : stream_(other.Take()) {}
  UniqueStream& operator=(UniqueStream&& other) noexcept {
    Reset(other.Take());
    return *this;
  }
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t Take() { return std::exchange(stream_, nullptr); }
  void Reset(cudaStream_t stream) {
    if (stream_ != nullptr) {
      CheckInDestructor(cudaStreamDestroy(stream_), "cudaStreamDestroy");
    }
    stream_ = stream;
  }
  cudaStream_t stream_ = nullptr;
};

// Owns a cudaEvent_t. `timing` false (the default) creates it with
// cudaEventDisableTiming, which makes record and wait cheaper.
class UniqueEvent {
 public:
  UniqueEvent() = default;
  static Status Create(UniqueEvent* out, bool timing = false) {
    cudaEvent_t event = nullptr;
    BATCHD_CUDA_CALL(cudaEventCreateWithFlags(
        &event, timing ? cudaEventDefault : cudaEventDisableTiming));
    out->Reset(event);
    return OkStatus();
  }
  ~UniqueEvent() { Reset(nullptr); }
  UniqueEvent(UniqueEvent&& other) noexcept : event_(other.Take()) {}
  UniqueEvent& operator=(UniqueEvent&& other) noexcept {
    Reset(other.Take());
    return *this;
  }
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t Take() { return std::exchange(event_, nullptr); }
  void Reset(cudaEvent_t event) {
    if (event_ != nullptr) {
      CheckInDestructor(cudaEventDestroy(event_), "cudaEventDestroy");
    }
    event_ = event;
  }
  cudaEvent_t event_ = nullptr;
};

// Owns device memory from cudaMalloc.
class DeviceMemory {
 public:
  DeviceMemory() = default;
  static Status Allocate(size_t bytes, DeviceMemory* out) {
    void* memory = nullptr;
    if (bytes > 0) BATCHD_CUDA_CALL(cudaMalloc(&memory, bytes));
    out->Reset(memory, bytes);
    return OkStatus();
  }
  ~DeviceMemory() { Reset(nullptr, 0); }
  DeviceMemory(DeviceMemory&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)),
        size_(std::exchange(other.size_, 0)) {}
  DeviceMemory& operator=(DeviceMemory&& other) noexcept {
    const size_t size = std::exchange(other.size_, 0);
    Reset(std::exchange(other.data_, nullptr), size);
    return *this;
  }
  void* get() const { return data_; }
  size_t size() const { return size_; }

 private:
  void Reset(void* data, size_t size) {
    if (data_ != nullptr) CheckInDestructor(cudaFree(data_), "cudaFree");
    data_ = data;
    size_ = size;
  }
  void* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace batchd::cuda

#endif  // BATCHD_CLIENT_CUDA_CUDA_CHECK_H_
