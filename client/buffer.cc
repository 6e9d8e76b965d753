#include "client/buffer.h"

#include <utility>

#include "common/large_buffer.h"

namespace batchd::client {
namespace {

// Ring slots live as long as the stream and are rewritten for every batch:
// huge-page mappings make their first touch cheap (common/large_buffer.h).
class HeapBuffer : public HostBuffer {
 public:
  HeapBuffer(common::LargeBuffer memory, size_t size)
      : memory_(std::move(memory)), size_(size) {}

  uint8_t* data() override { return memory_.get(); }
  size_t size() const override { return size_; }

 private:
  const common::LargeBuffer memory_;
  const size_t size_;
};

class HeapAllocator : public BufferAllocator {
 public:
  absl::StatusOr<std::unique_ptr<HostBuffer>> Allocate(size_t bytes) override {
    absl::StatusOr<common::LargeBuffer> memory =
        common::AllocateLargeBuffer(bytes);
    if (!memory.ok()) return memory.status();
    return std::unique_ptr<HostBuffer>(
        new HeapBuffer(*std::move(memory), bytes));
  }
  const char* name() const override { return "heap"; }
};

}  // namespace

std::unique_ptr<BufferAllocator> NewHeapAllocator() {
  return std::make_unique<HeapAllocator>();
}

}  // namespace batchd::client
