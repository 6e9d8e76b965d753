// The CUDA build of runtime.h and the CUDA error helpers of cuda_check.h.
#include <cuda_runtime.h>

#include <atomic>
#include <cstdio>
#include <mutex>
#include <string>

#include "client/cuda/cuda_check.h"
#include "client/cuda/runtime.h"

namespace batchd::cuda {

Status CudaErrorToStatus(cudaError_t error, const char* what) {
  std::string message = std::string(what) + ": " + cudaGetErrorName(error) +
                        " (" + cudaGetErrorString(error) + ")";
  switch (error) {
    case cudaErrorMemoryAllocation:
      return ResourceExhaustedError(std::move(message));
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorDevicesUnavailable:
    case cudaErrorInitializationError:
    case cudaErrorCudartUnloading:
      return UnavailableError(std::move(message));
    case cudaErrorInvalidValue:
      return InvalidArgumentError(std::move(message));
    default:
      return InternalError(std::move(message));
  }
}

void CheckInDestructor(cudaError_t error, const char* what) {
  if (error == cudaSuccess || error == cudaErrorCudartUnloading) return;
  std::fprintf(stderr, "batchd: %s failed in a destructor: %s\n", what,
               cudaGetErrorString(error));
}

bool BuiltWithCuda() { return true; }

double DeviceInfo::PeakMemoryBandwidth() const {
  return 2.0 * memory_clock_khz * 1e3 * (memory_bus_width_bits / 8.0);
}

namespace {

struct Probe {
  Status status;
  DeviceInfo info;
};

Probe RunProbe() {
  Probe probe;
  int count = 0;
  cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error state
    probe.status = UnavailableError(std::string("no CUDA device: ") +
                                    cudaGetErrorString(error));
    return probe;
  }
  if (count == 0) {
    probe.status = UnavailableError("no CUDA device");
    return probe;
  }
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) device = 0;
  cudaDeviceProp prop;
  error = cudaGetDeviceProperties(&prop, device);
  if (error != cudaSuccess) {
    probe.status = UnavailableError(std::string("CUDA device unusable: ") +
                                    cudaGetErrorString(error));
    return probe;
  }
  probe.info.device = device;
  probe.info.name = prop.name;
  probe.info.compute_major = prop.major;
  probe.info.compute_minor = prop.minor;
  probe.info.total_memory_bytes = prop.totalGlobalMem;
  int value = 0;
  if (cudaDeviceGetAttribute(&value, cudaDevAttrGlobalMemoryBusWidth,
                             device) == cudaSuccess) {
    probe.info.memory_bus_width_bits = value;
  }
  if (cudaDeviceGetAttribute(&value, cudaDevAttrMemoryClockRate, device) ==
      cudaSuccess) {
    probe.info.memory_clock_khz = value;
  }
  cudaGetLastError();
  return probe;
}

std::atomic<size_t> live_count{0};
std::atomic<size_t> live_bytes{0};

}  // namespace

Status ProbeDevice(DeviceInfo* info) {
  static const Probe* const probe = new Probe(RunProbe());
  if (info != nullptr && probe->status.ok()) *info = probe->info;
  return probe->status;
}

Status QueryEvent(EventHandle event, bool* done) {
  const cudaError_t error = cudaEventQuery(event);
  if (error == cudaSuccess) {
    *done = true;
    return OkStatus();
  }
  if (error == cudaErrorNotReady) {
    *done = false;
    return OkStatus();
  }
  return CudaErrorToStatus(error, "cudaEventQuery");
}

Status SynchronizeEvent(EventHandle event) {
  BATCHD_CUDA_CALL(cudaEventSynchronize(event));
  return OkStatus();
}

Status StreamWaitEvent(StreamHandle stream, EventHandle event) {
  BATCHD_CUDA_CALL(cudaStreamWaitEvent(stream, event, 0));
  return OkStatus();
}

Status SynchronizeStream(StreamHandle stream) {
  BATCHD_CUDA_CALL(cudaStreamSynchronize(stream));
  return OkStatus();
}

Status CopyToHost(void* host_dst, const void* device_src, size_t bytes) {
  if (bytes == 0) return OkStatus();
  BATCHD_CUDA_CALL(
      cudaMemcpy(host_dst, device_src, bytes, cudaMemcpyDeviceToHost));
  return OkStatus();
}

Status PinnedBuffer::Allocate(size_t bytes, std::unique_ptr<PinnedBuffer>* out) {
  BATCHD_CUDA_RETURN_IF_ERROR(ProbeDevice());
  void* memory = nullptr;
  // cudaHostAlloc rejects 0 bytes on some drivers; keep one byte instead.
  const cudaError_t error =
      cudaHostAlloc(&memory, bytes == 0 ? 1 : bytes, cudaHostAllocPortable);
  if (error != cudaSuccess) {
    cudaGetLastError();
    return ResourceExhaustedError("cannot pin " + std::to_string(bytes) +
                                  " bytes of host memory: " +
                                  cudaGetErrorString(error));
  }
  live_count.fetch_add(1);
  live_bytes.fetch_add(bytes);
  out->reset(new PinnedBuffer(static_cast<uint8_t*>(memory), bytes));
  return OkStatus();
}

PinnedBuffer::~PinnedBuffer() {
  CheckInDestructor(cudaFreeHost(data_), "cudaFreeHost");
  live_count.fetch_sub(1);
  live_bytes.fetch_sub(size_);
}

Status HostRegistration::Register(void* data, size_t bytes,
                                  std::unique_ptr<HostRegistration>* out) {
  BATCHD_CUDA_RETURN_IF_ERROR(ProbeDevice());
  const cudaError_t error =
      cudaHostRegister(data, bytes, cudaHostRegisterPortable);
  if (error != cudaSuccess) {
    cudaGetLastError();
    return ResourceExhaustedError("cannot pin " + std::to_string(bytes) +
                                  " bytes of shared memory: " +
                                  cudaGetErrorString(error));
  }
  out->reset(new HostRegistration(data));
  return OkStatus();
}

HostRegistration::~HostRegistration() {
  CheckInDestructor(cudaHostUnregister(data_), "cudaHostUnregister");
}

bool HostRegistration::IsRegistered(const void* data) {
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, data) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return attributes.type == cudaMemoryTypeHost;
}

size_t PinnedBuffer::LiveCount() { return live_count.load(); }
size_t PinnedBuffer::LiveBytes() { return live_bytes.load(); }

}  // namespace batchd::cuda
