// Reuses the daemon's batch buffers.
//
// Every batch of a plan has the same size (the last one of an epoch may be
// smaller), and a finished batch's buffer is released as soon as gRPC has
// sent its last chunk. Reusing those buffers keeps the kernel from zeroing
// and faulting in ~10 MB of fresh pages per batch: without the pool a
// 1-worker daemon took ~28,000 page faults per 3,000 images, most of them in
// the resize writing into new batch memory (BENCHMARKS.md).
//
// Buffers are huge-page mappings (common/large_buffer.h). Released buffers
// stay idle up to `max_idle_bytes`; beyond that the oldest are unmapped.
// Buffers may outlive the pool's owner: each holds the pool alive.
//
// Thread-safe.
#ifndef BATCHD_SERVER_PIPELINE_BATCH_BUFFER_POOL_H_
#define BATCHD_SERVER_PIPELINE_BATCH_BUFFER_POOL_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/large_buffer.h"

namespace batchd::server {

class BatchBufferPool;

// A batch's pixel memory. Move-only; gives its memory back to the pool it
// came from when destroyed. Or memory someone else provides (a client's
// shared-memory slot): then `owner` keeps it mapped while the buffer lives.
class BatchBuffer {
 public:
  BatchBuffer() = default;
  BatchBuffer(uint8_t* external, size_t size,
              std::shared_ptr<const void> owner)
      : external_(external), size_(size), owner_(std::move(owner)) {}
  BatchBuffer(BatchBuffer&& other) noexcept
      : memory_(std::move(other.memory_)),
        external_(std::exchange(other.external_, nullptr)),
        size_(other.size_),
        pool_(std::move(other.pool_)),
        owner_(std::move(other.owner_)) {}
  BatchBuffer& operator=(BatchBuffer&& other);
  ~BatchBuffer();

  uint8_t* data() const {
    return external_ != nullptr ? external_ : memory_.get();
  }
  size_t size() const { return size_; }
  // Whether the memory is someone else's (the constructor above).
  bool external() const { return external_ != nullptr; }

 private:
  friend class BatchBufferPool;
  BatchBuffer(common::LargeBuffer memory, size_t size,
              std::shared_ptr<BatchBufferPool> pool)
      : memory_(std::move(memory)), size_(size), pool_(std::move(pool)) {}
  void Release();

  common::LargeBuffer memory_;
  uint8_t* external_ = nullptr;
  size_t size_ = 0;
  std::shared_ptr<BatchBufferPool> pool_;
  std::shared_ptr<const void> owner_;
};

class BatchBufferPool : public std::enable_shared_from_this<BatchBufferPool> {
 public:
  static std::shared_ptr<BatchBufferPool> Create(uint64_t max_idle_bytes);

  // A buffer of exactly `bytes` usable bytes, contents unspecified: an idle
  // one of that size if there is one, else a new mapping.
  // RESOURCE_EXHAUSTED when the kernel refuses a new mapping.
  absl::StatusOr<BatchBuffer> Acquire(size_t bytes);

  // Bytes held by idle buffers, counted in whole mapped pages.
  uint64_t idle_bytes() const;

 private:
  friend class BatchBuffer;
  explicit BatchBufferPool(uint64_t max_idle_bytes)
      : max_idle_bytes_(max_idle_bytes) {}
  void Return(common::LargeBuffer memory, size_t size);

  struct Idle {
    common::LargeBuffer memory;
    size_t size;
  };
  const uint64_t max_idle_bytes_;
  mutable absl::Mutex mu_;
  std::deque<Idle> idle_ ABSL_GUARDED_BY(mu_);  // oldest first
  uint64_t idle_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace batchd::server

#endif  // BATCHD_SERVER_PIPELINE_BATCH_BUFFER_POOL_H_
