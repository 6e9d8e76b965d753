#include "client/buffer.h"

#include <cstdlib>
#include <new>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace batchd::client {
namespace {

constexpr size_t kAlignmentBytes = 64;

// Heap memory from aligned_alloc, freed with free().
class HeapBuffer : public HostBuffer {
 public:
  HeapBuffer(uint8_t* data, size_t size) : data_(data), size_(size) {}
  ~HeapBuffer() override { std::free(data_); }
  HeapBuffer(const HeapBuffer&) = delete;
  HeapBuffer& operator=(const HeapBuffer&) = delete;

  uint8_t* data() override { return data_; }
  size_t size() const override { return size_; }

 private:
  uint8_t* const data_;  // owned
  const size_t size_;
};

class HeapAllocator : public BufferAllocator {
 public:
  absl::StatusOr<std::unique_ptr<HostBuffer>> Allocate(size_t bytes) override {
    // aligned_alloc needs a size that is a multiple of the alignment.
    if (bytes > SIZE_MAX - kAlignmentBytes) {
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot allocate ", bytes, " bytes"));
    }
    size_t rounded = (bytes + kAlignmentBytes - 1) / kAlignmentBytes *
                     kAlignmentBytes;
    if (rounded == 0) rounded = kAlignmentBytes;
    void* memory = std::aligned_alloc(kAlignmentBytes, rounded);
    if (memory == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("out of memory allocating a ", bytes,
                       "-byte batch buffer"));
    }
    return std::unique_ptr<HostBuffer>(
        new HeapBuffer(static_cast<uint8_t*>(memory), bytes));
  }
  const char* name() const override { return "heap"; }
};

}  // namespace

std::unique_ptr<BufferAllocator> NewHeapAllocator() {
  return std::make_unique<HeapAllocator>();
}

}  // namespace batchd::client
