// The CUDA build of the copy engine (see copy_engine.h).
#include <cuda_runtime.h>

#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "client/cuda/copy_engine.h"
#include "client/cuda/cuda_check.h"

namespace batchd::cuda {

class CopyEngine::Impl {
 public:
  struct Slot {
    DeviceMemory input;
    DeviceMemory output;
    UniqueEvent input_consumed;
    UniqueEvent ready;
    UniqueEvent consumer_done;
    UniqueEvent started;  // only with timing_events
    // EraseRects of the batch in the slot (erase_mix.h), grown on demand;
    // reused only after the slot's previous kernel (same stream).
    DeviceMemory rects;
    size_t rects_capacity = 0;  // EraseRects
    // Protected by mu_.
    bool leased = false;
    // True once a consumer released the slot: consumer_done is recorded
    // and the next copy must wait on it. Written by the lease holder only.
    bool released_before = false;
  };

  CopyEngineOptions options;
  UniqueStream stream;
  std::vector<Slot> slots;  // size fixed after Create

  mutable std::mutex mu;
  int next_slot = 0;    // guarded by mu: round-robin start
  int free_slots = 0;   // guarded by mu
  uint64_t waits = 0;   // guarded by mu
};

CopyEngine::CopyEngine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

CopyEngine::~CopyEngine() {
  if (impl_ && impl_->stream.get() != nullptr) {
    // Work still queued reads the slots' memory: drain before freeing.
    CheckInDestructor(cudaStreamSynchronize(impl_->stream.get()),
                      "cudaStreamSynchronize");
  }
}

Status CopyEngine::Create(const CopyEngineOptions& options,
                          std::unique_ptr<CopyEngine>* out) {
  if (options.depth < 1 || options.depth > 64) {
    return InvalidArgumentError("copy engine depth must be 1..64, got " +
                                std::to_string(options.depth));
  }
  BATCHD_CUDA_RETURN_IF_ERROR(ProbeDevice());
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  BATCHD_CUDA_RETURN_IF_ERROR(UniqueStream::Create(&impl->stream));
  impl->slots.resize(options.depth);
  for (Impl::Slot& slot : impl->slots) {
    BATCHD_CUDA_RETURN_IF_ERROR(
        DeviceMemory::Allocate(options.max_input_bytes, &slot.input));
    BATCHD_CUDA_RETURN_IF_ERROR(
        DeviceMemory::Allocate(options.max_output_bytes, &slot.output));
    BATCHD_CUDA_RETURN_IF_ERROR(UniqueEvent::Create(&slot.input_consumed));
    // The ready event also times the copy when asked to.
    BATCHD_CUDA_RETURN_IF_ERROR(
        UniqueEvent::Create(&slot.ready, options.timing_events));
    BATCHD_CUDA_RETURN_IF_ERROR(UniqueEvent::Create(&slot.consumer_done));
    if (options.timing_events) {
      BATCHD_CUDA_RETURN_IF_ERROR(
          UniqueEvent::Create(&slot.started, /*timing=*/true));
    }
  }
  impl->free_slots = options.depth;
  out->reset(new CopyEngine(std::move(impl)));
  return OkStatus();
}

Status CopyEngine::Submit(const uint8_t* host_input, size_t input_bytes,
                          const std::vector<NormalizePart>& parts,
                          CopyTicket* ticket, const EraseMix* erase_mix) {
  Impl& impl = *impl_;
  if (erase_mix != nullptr && !erase_mix->active()) erase_mix = nullptr;
  if (erase_mix != nullptr) {
    if (parts.size() != 1) {
      return InvalidArgumentError(
          "RandomErasing and MixUp/CutMix need a normalised float output of "
          "one part (not views), got " + std::to_string(parts.size()) +
          " parts");
    }
    BATCHD_CUDA_RETURN_IF_ERROR(CheckEraseMix(parts[0].params, *erase_mix));
  }
  if (input_bytes > impl.options.max_input_bytes) {
    return InvalidArgumentError(
        "batch of " + std::to_string(input_bytes) +
        " bytes exceeds the copy slot size of " +
        std::to_string(impl.options.max_input_bytes));
  }
  size_t covered = 0;
  size_t output_bytes = 0;
  for (const NormalizePart& part : parts) {
    // Laid out one after another (MakeNormalizeParts): each part starts
    // where the previous ended, in the input and in the output, so the
    // parts cover the batch once and the output is their sum.
    if (part.input_offset != covered || part.output_offset != output_bytes) {
      return InvalidArgumentError(
          "normalisation part at input byte " +
          std::to_string(part.input_offset) + ", output byte " +
          std::to_string(part.output_offset) + " where the previous ends at " +
          std::to_string(covered) + ", " + std::to_string(output_bytes));
    }
    covered += part.params.input_bytes();
    output_bytes += part.params.output_bytes();
  }
  if (!parts.empty()) {
    if (covered != input_bytes) {
      return InvalidArgumentError(
          "normalisation shape covers " + std::to_string(covered) +
          " bytes, batch has " + std::to_string(input_bytes));
    }
    if (output_bytes > impl.options.max_output_bytes) {
      return InvalidArgumentError(
          "normalised batch of " + std::to_string(output_bytes) +
          " bytes exceeds the output slot size of " +
          std::to_string(impl.options.max_output_bytes));
    }
  }
  int index = -1;
  {
    std::lock_guard<std::mutex> lock(impl.mu);
    const int depth = static_cast<int>(impl.slots.size());
    for (int i = 0; i < depth; ++i) {
      const int candidate = (impl.next_slot + i) % depth;
      if (!impl.slots[candidate].leased) {
        index = candidate;
        break;
      }
    }
    if (index < 0) {
      return FailedPreconditionError(
          "every copy slot is held by the consumer; release a batch first");
    }
    impl.slots[index].leased = true;
    --impl.free_slots;
    impl.next_slot = (index + 1) % depth;
  }
  Impl::Slot& slot = impl.slots[index];
  // CUDA calls run without the lock; the lease makes the slot ours.
  Status status = [&]() -> Status {
    cudaStream_t stream = impl.stream.get();
    if (slot.released_before) {
      bool done = false;
      BATCHD_CUDA_RETURN_IF_ERROR(
          QueryEvent(slot.consumer_done.get(), &done));
      if (!done) {
        std::lock_guard<std::mutex> lock(impl.mu);
        ++impl.waits;
      }
      BATCHD_CUDA_CALL(
          cudaStreamWaitEvent(stream, slot.consumer_done.get(), 0));
    }
    if (impl.options.timing_events) {
      BATCHD_CUDA_CALL(cudaEventRecord(slot.started.get(), stream));
    }
    if (input_bytes > 0) {
      BATCHD_CUDA_CALL(cudaMemcpyAsync(slot.input.get(), host_input,
                                       input_bytes, cudaMemcpyHostToDevice,
                                       stream));
    }
    BATCHD_CUDA_CALL(cudaEventRecord(slot.input_consumed.get(), stream));
    const uint8_t* device_input = static_cast<const uint8_t*>(slot.input.get());
    uint8_t* device_output = static_cast<uint8_t*>(slot.output.get());
    if (erase_mix != nullptr) {
      const EraseRect* device_rects = nullptr;
      const size_t count = erase_mix->rects.size();
      if (count > 0) {
        if (slot.rects_capacity < count) {
          // Grown once to the largest batch: a synchronous allocation.
          slot.rects = DeviceMemory();
          BATCHD_CUDA_RETURN_IF_ERROR(DeviceMemory::Allocate(
              count * sizeof(EraseRect), &slot.rects));
          slot.rects_capacity = count;
        }
        // From pageable memory: the call returns once the bytes are staged,
        // so `erase_mix` may go away after Submit.
        BATCHD_CUDA_CALL(cudaMemcpyAsync(
            slot.rects.get(), erase_mix->rects.data(),
            count * sizeof(EraseRect), cudaMemcpyHostToDevice, stream));
        device_rects = static_cast<const EraseRect*>(slot.rects.get());
      }
      BATCHD_CUDA_RETURN_IF_ERROR(NormalizeEraseMixOnDevice(
          device_input, device_output, parts[0].params, device_rects,
          erase_mix->mix, stream));
    } else {
      // One launch per part (per view); the kernels queue on the copy
      // stream behind the one H2D copy, and `ready` follows the last.
      for (const NormalizePart& part : parts) {
        BATCHD_CUDA_RETURN_IF_ERROR(NormalizeOnDevice(
            device_input + part.input_offset,
            device_output + part.output_offset, part.params, stream));
      }
    }
    BATCHD_CUDA_CALL(cudaEventRecord(slot.ready.get(), stream));
    return OkStatus();
  }();
  if (!status.ok()) {
    std::lock_guard<std::mutex> lock(impl.mu);
    slot.leased = false;
    ++impl.free_slots;
    return status;
  }
  ticket->slot = index;
  ticket->output = parts.empty() ? slot.input.get() : slot.output.get();
  ticket->output_bytes = parts.empty() ? input_bytes : output_bytes;
  ticket->ready = slot.ready.get();
  ticket->input_consumed = slot.input_consumed.get();
  ticket->started = impl.options.timing_events ? slot.started.get() : nullptr;
  return OkStatus();
}

Status CopyEngine::Release(int slot_index, StreamHandle consumer_stream) {
  Impl& impl = *impl_;
  if (slot_index < 0 || slot_index >= static_cast<int>(impl.slots.size())) {
    return FailedPreconditionError("no copy slot " +
                                   std::to_string(slot_index));
  }
  Impl::Slot& slot = impl.slots[slot_index];
  {
    std::lock_guard<std::mutex> lock(impl.mu);
    if (!slot.leased) {
      return FailedPreconditionError("copy slot " +
                                     std::to_string(slot_index) +
                                     " is not leased");
    }
  }
  // Still leased: only this caller touches the slot's events.
  BATCHD_CUDA_CALL(cudaEventRecord(slot.consumer_done.get(), consumer_stream));
  slot.released_before = true;
  std::lock_guard<std::mutex> lock(impl.mu);
  slot.leased = false;
  ++impl.free_slots;
  return OkStatus();
}

StreamHandle CopyEngine::copy_stream() const { return impl_->stream.get(); }
int CopyEngine::depth() const { return static_cast<int>(impl_->slots.size()); }
int CopyEngine::free_slots() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->free_slots;
}
uint64_t CopyEngine::waits_on_consumer() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->waits;
}

}  // namespace batchd::cuda
