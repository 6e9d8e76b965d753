// The CUDA runtime as the rest of batchd sees it: device probing, events,
// streams and pinned host memory, behind a header that needs no CUDA headers.
// Built with CUDA (runtime_cuda.cc) these call the CUDA runtime; built
// without it (cpu_only.cc) they report UNAVAILABLE, so callers have one code
// path and choose the host fallback at run time.
//
// Streams and events are passed as the CUDA runtime's own handle types
// (cudaStream_t is CUstream_st*, cudaEvent_t is CUevent_st*), so a caller
// that does include cuda_runtime.h passes its handles unchanged. A null
// stream is the legacy default stream.
//
// Thread-safety: every function is thread-safe.
#ifndef BATCHD_CLIENT_CUDA_RUNTIME_H_
#define BATCHD_CLIENT_CUDA_RUNTIME_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "client/cuda/status.h"

struct CUstream_st;
struct CUevent_st;

namespace batchd::cuda {

using StreamHandle = CUstream_st*;
using EventHandle = CUevent_st*;

// True when this library was compiled with the CUDA toolkit.
bool BuiltWithCuda();

struct DeviceInfo {
  int device = -1;
  std::string name;
  int compute_major = 0;
  int compute_minor = 0;
  size_t total_memory_bytes = 0;
  // From cudaDevAttrGlobalMemoryBusWidth / cudaDevAttrMemoryClockRate; 0
  // when the driver does not report them.
  int memory_bus_width_bits = 0;
  int memory_clock_khz = 0;
  // Theoretical DRAM bandwidth (2 transfers per clock), bytes/s; 0 when
  // unknown.
  double PeakMemoryBandwidth() const;
};

// OK when a CUDA device can be used from this process; fills `info` (if not
// null) for the current device. UNAVAILABLE, with the reason ("built without
// CUDA", "no CUDA device", the driver's message), otherwise. The first call
// initialises the runtime; the answer is cached.
Status ProbeDevice(DeviceInfo* info = nullptr);

// Sets `*done` to whether all work captured by `event` has completed.
Status QueryEvent(EventHandle event, bool* done);
// Blocks the calling thread until `event` has completed.
Status SynchronizeEvent(EventHandle event);
// Makes future work on `stream` wait for `event`; the host does not wait.
Status StreamWaitEvent(StreamHandle stream, EventHandle event);
// Blocks the calling thread until all work on `stream` has completed.
Status SynchronizeStream(StreamHandle stream);

// Copies `bytes` bytes of device memory to host memory and waits for the
// copy (after all work on the legacy default stream). For checks and
// debugging, not the hot path.
Status CopyToHost(void* host_dst, const void* device_src, size_t bytes);

// Page-locked host memory from cudaHostAlloc, freed by the destructor.
// The copy engine reads it with asynchronous DMA, so the network writes
// received bytes straight into it with no staging copy.
class PinnedBuffer {
 public:
  // RESOURCE_EXHAUSTED when the memory cannot be pinned; UNAVAILABLE
  // without a device.
  static Status Allocate(size_t bytes, std::unique_ptr<PinnedBuffer>* out);
  ~PinnedBuffer();
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

  // Pinned buffers alive in this process and their bytes (for leak checks).
  static size_t LiveCount();
  static size_t LiveBytes();

 private:
  PinnedBuffer(uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t* const data_;  // owned
  const size_t size_;
};

// Host memory someone else allocated (a shared-memory ring the daemon
// writes into), page-locked with cudaHostRegister for as long as this
// object lives, so that the copy engine DMAs from it as from a
// PinnedBuffer. The memory must outlive the registration.
class HostRegistration {
 public:
  // RESOURCE_EXHAUSTED when the memory cannot be pinned; UNAVAILABLE
  // without a device.
  static Status Register(void* data, size_t bytes,
                         std::unique_ptr<HostRegistration>* out);
  ~HostRegistration();
  HostRegistration(const HostRegistration&) = delete;
  HostRegistration& operator=(const HostRegistration&) = delete;

  // Whether the CUDA runtime sees `data` as page-locked host memory.
  static bool IsRegistered(const void* data);

 private:
  explicit HostRegistration(void* data) : data_(data) {}
  void* const data_;
};

}  // namespace batchd::cuda

#endif  // BATCHD_CLIENT_CUDA_RUNTIME_H_
