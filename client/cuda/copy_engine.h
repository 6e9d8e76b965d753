// The copy engine: moves batches from host memory to the GPU on a dedicated
// copy stream, normalising them on the way, while the consumer's previous
// step computes on its own stream.
//
// It owns `depth` slots. Each slot has device memory for the raw bytes and
// for the normalised output, and three events:
//   input_consumed  recorded after the H2D copy: the host buffer may be
//                   overwritten once it completes;
//   ready           recorded after the normalisation: the consumer's stream
//                   waits on it (cudaStreamWaitEvent), the host does not;
//   consumer_done   recorded by Release() on the consumer's stream; the next
//                   copy into the slot waits on it on the copy stream, so a
//                   slot is never overwritten while the consumer still reads
//                   it, again without a host-side synchronize.
//
//   std::unique_ptr<CopyEngine> engine;
//   BATCHD_CUDA_RETURN_IF_ERROR(CopyEngine::Create(options, &engine));
//   CopyTicket ticket;
//   BATCHD_CUDA_RETURN_IF_ERROR(
//       engine->Submit(pinned->data(), bytes, &params, &ticket));
//   cudaStreamWaitEvent(compute, ticket.ready, 0);
//   Train<<<..., compute>>>(ticket.output);
//   engine->Release(ticket.slot, compute);
//
// Built without CUDA, Create() returns UNAVAILABLE.
//
// Thread-safety: Submit() is called by one thread at a time; Release() and
// the accessors may be called from any thread.
#ifndef BATCHD_CLIENT_CUDA_COPY_ENGINE_H_
#define BATCHD_CLIENT_CUDA_COPY_ENGINE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "client/cuda/erase_mix.h"
#include "client/cuda/normalize.h"
#include "client/cuda/runtime.h"
#include "client/cuda/status.h"

namespace batchd::cuda {

struct CopyEngineOptions {
  // Slots; 2-3 keep one batch in flight while one is consumed.
  int depth = 3;
  // Largest host input and normalised output a slot holds, in bytes.
  size_t max_input_bytes = 0;
  size_t max_output_bytes = 0;
  // Also record a timing event when each copy starts (CopyTicket::started),
  // for benchmarks and overlap tests. Off on the hot path.
  bool timing_events = false;
};

// One submitted batch; valid until Release(slot).
struct CopyTicket {
  int slot = -1;
  // Device memory: the normalised output (the parts one after another), or
  // the raw copy when no normalisation was asked for.
  const void* output = nullptr;
  size_t output_bytes = 0;
  // Completes when `output` is ready.
  EventHandle ready = nullptr;
  // Completes when the host input may be overwritten.
  EventHandle input_consumed = nullptr;
  // With timing_events: recorded when the copy starts; else null.
  EventHandle started = nullptr;
};

class CopyEngine {
 public:
  // Uses the current device. INVALID_ARGUMENT for depth < 1; UNAVAILABLE
  // without a device; RESOURCE_EXHAUSTED when device memory is short.
  static Status Create(const CopyEngineOptions& options,
                       std::unique_ptr<CopyEngine>* out);
  // Waits for the copy stream to drain, then frees the slots. Tickets not
  // released are invalid afterwards.
  ~CopyEngine();
  CopyEngine(const CopyEngine&) = delete;
  CopyEngine& operator=(const CopyEngine&) = delete;

  // Enqueues on the copy stream: wait for the slot's previous consumer,
  // copy `input_bytes` bytes from `host_input` (pinned for an asynchronous
  // copy; pageable memory works but the copy is synchronous), then normalise
  // each of `parts` (a multi-view batch has one per view; MakeNormalizeParts
  // lays them out) unless there are none, when the output is the raw copy;
  // with an active `erase_mix` (and one part), erase and mix in the same
  // kernel (erase_mix.h; its rectangles are copied to the slot's device
  // table first). Returns without waiting for the GPU. FAILED_PRECONDITION
  // when every slot is leased (release one); INVALID_ARGUMENT when the
  // input or output exceeds the slot size, the parts do not cover exactly
  // `input_bytes`, an active `erase_mix` comes with other than one part, or
  // CheckEraseMix refuses `erase_mix`.
  Status Submit(const uint8_t* host_input, size_t input_bytes,
                const std::vector<NormalizePart>& parts, CopyTicket* ticket,
                const EraseMix* erase_mix = nullptr);
  // The same with the whole batch as one part, `normalize` (none when
  // null).
  Status Submit(const uint8_t* host_input, size_t input_bytes,
                const NormalizeParams* normalize, CopyTicket* ticket,
                const EraseMix* erase_mix = nullptr) {
    std::vector<NormalizePart> parts;
    if (normalize != nullptr) parts.push_back({0, 0, *normalize});
    return Submit(host_input, input_bytes, parts, ticket, erase_mix);
  }

  // Returns `slot` to the engine once the work enqueued so far on
  // `consumer_stream` completes (an event is recorded there; nothing
  // waits). FAILED_PRECONDITION when `slot` is not leased.
  Status Release(int slot, StreamHandle consumer_stream);

  StreamHandle copy_stream() const;
  int depth() const;
  int free_slots() const;
  // How many submissions had to wait on the GPU for a consumer's event
  // (their slot was reused before the consumer had been seen to finish).
  uint64_t waits_on_consumer() const;

  class Impl;

 private:
  explicit CopyEngine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace batchd::cuda

#endif  // BATCHD_CLIENT_CUDA_COPY_ENGINE_H_
