#include "server/pipeline/batch_buffer_pool.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace batchd::server {

BatchBuffer& BatchBuffer::operator=(BatchBuffer&& other) {
  if (this != &other) {
    Release();
    memory_ = std::move(other.memory_);
    external_ = std::exchange(other.external_, nullptr);
    size_ = other.size_;
    pool_ = std::move(other.pool_);
    owner_ = std::move(other.owner_);
  }
  return *this;
}

BatchBuffer::~BatchBuffer() { Release(); }

void BatchBuffer::Release() {
  if (memory_ != nullptr && pool_ != nullptr) {
    pool_->Return(std::move(memory_), size_);
  }
  memory_.reset();
  pool_.reset();
  external_ = nullptr;
  owner_.reset();
}

std::shared_ptr<BatchBufferPool> BatchBufferPool::Create(
    uint64_t max_idle_bytes) {
  return std::shared_ptr<BatchBufferPool>(new BatchBufferPool(max_idle_bytes));
}

absl::StatusOr<BatchBuffer> BatchBufferPool::Acquire(size_t bytes) {
  {
    absl::MutexLock lock(&mu_);
    // Newest first: its pages are the likeliest to be in cache.
    for (auto it = idle_.rbegin(); it != idle_.rend(); ++it) {
      if (it->size != bytes) continue;
      common::LargeBuffer memory = std::move(it->memory);
      idle_bytes_ -= memory.get_deleter().mapped_bytes;
      idle_.erase(std::next(it).base());
      return BatchBuffer(std::move(memory), bytes, shared_from_this());
    }
  }
  absl::StatusOr<common::LargeBuffer> memory = common::AllocateLargeBuffer(bytes);
  if (!memory.ok()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "no memory for a batch: ", memory.status().message(),
        "; lower --max_buffer_bytes or the batch size"));
  }
  return BatchBuffer(*std::move(memory), bytes, shared_from_this());
}

uint64_t BatchBufferPool::idle_bytes() const {
  absl::MutexLock lock(&mu_);
  return idle_bytes_;
}

void BatchBufferPool::Return(common::LargeBuffer memory, size_t size) {
  std::deque<Idle> evicted;  // unmapped outside the lock
  absl::MutexLock lock(&mu_);
  // Counted as mapped, whole pages: what the idle buffers really hold.
  idle_bytes_ += memory.get_deleter().mapped_bytes;
  idle_.push_back(Idle{std::move(memory), size});
  while (idle_bytes_ > max_idle_bytes_ && !idle_.empty()) {
    idle_bytes_ -= idle_.front().memory.get_deleter().mapped_bytes;
    evicted.push_back(std::move(idle_.front()));
    idle_.pop_front();
  }
}

}  // namespace batchd::server
