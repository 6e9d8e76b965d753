// Host memory that the client writes received batch bytes into.
//
// The loader allocates its ring of slots once, through a BufferAllocator, and
// reuses them for the whole stream. The default allocator hands out pageable
// memory on huge pages (common/large_buffer.h); a CUDA build plugs in page-locked (pinned)
// memory behind the same interface so the copy to the device can run
// asynchronously.
//
// Thread-safety: a HostBuffer is used by one thread at a time (the loader
// hands ownership of the bytes back and forth under its own lock).
// BufferAllocator::Allocate must be safe to call from any thread.
#ifndef BATCHD_CLIENT_BUFFER_H_
#define BATCHD_CLIENT_BUFFER_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"

namespace batchd::client {

// A host buffer the client writes received batch bytes into. Owns its memory;
// the memory is released by the destructor.
class HostBuffer {
 public:
  virtual ~HostBuffer() = default;
  // First byte of the buffer; at least size() bytes are writable.
  virtual uint8_t* data() = 0;
  // Usable bytes.
  virtual size_t size() const = 0;
};

// Makes HostBuffers. Not owned by the loader that uses it: it must outlive
// every buffer it allocated.
class BufferAllocator {
 public:
  virtual ~BufferAllocator() = default;
  // Returns a buffer of at least `bytes` bytes (a zero-byte request returns a
  // valid, possibly empty, buffer). RESOURCE_EXHAUSTED when memory is short.
  virtual absl::StatusOr<std::unique_ptr<HostBuffer>> Allocate(size_t bytes) = 0;
  // Short name for logs, e.g. "heap" or "cuda-pinned".
  virtual const char* name() const = 0;
  // Makes `bytes` of memory at `data`, which the loader got elsewhere (a
  // shared-memory ring), as good as this allocator's own buffers; the
  // returned handle undoes it when dropped, before the memory goes. The
  // CUDA allocator pins it (cudaHostRegister). The default does nothing.
  virtual absl::StatusOr<std::shared_ptr<void>> Register(uint8_t* /*data*/,
                                                         size_t /*bytes*/) {
    return std::shared_ptr<void>();
  }
};

// An allocator of pageable memory: buffers of 2 MiB and more on transparent
// huge pages where the kernel has them, smaller ones on ordinary pages
// (name "heap").
std::unique_ptr<BufferAllocator> NewHeapAllocator();

}  // namespace batchd::client

#endif  // BATCHD_CLIENT_BUFFER_H_
