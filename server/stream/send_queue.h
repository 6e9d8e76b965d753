// SendQueue: what one stream has yet to send, in order: small messages
// (PlanOpened, rejections, report answers) and built batches, each batch
// as its header and then chunks of at most kMaxChunkBytes, or as its
// header alone when its pixels are already in the client's shared memory.
// It counts the small messages queued, which bound how far the stream may
// read ahead of its client (StreamSession, kMaxQueuedMessages).
//
// Pure bookkeeping: no threads, no gRPC. Thread-compatible: StreamSession
// calls it under its own mutex.
#ifndef BATCHD_SERVER_STREAM_SEND_QUEUE_H_
#define BATCHD_SERVER_STREAM_SEND_QUEUE_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>

#include "batchd/v1/data.pb.h"
#include "server/pipeline/pipeline.h"
#include "server/stream/stream_ledger.h"

namespace batchd::server {

// Largest `data` of one BatchChunk, bytes: keeps every message within 4 MiB,
// which gRPC moves an order of magnitude faster than larger ones.
inline constexpr uint64_t kMaxChunkBytes = (uint64_t{4} << 20) - 1024;

// One message to write: `response`, or, when `batch` is set, a BatchChunk
// of `length` bytes of its pixels from `offset`.
struct OutgoingMessage {
  batchd::v1::StreamResponse response;
  // Shared with the chunk's slices, which gRPC may hold after the write.
  std::shared_ptr<const BuiltBatch> batch;
  uint64_t offset = 0;
  uint64_t length = 0;
};

class SendQueue {
 public:
  using Key = StreamLedger::Key;

  // The next message, and what it means for its batch, if any.
  struct Popped {
    OutgoingMessage message;
    // The message is this batch's header.
    std::optional<Key> header_of;
    // The message is the last of this batch.
    std::shared_ptr<const BuiltBatch> completed;
  };

  // Queues a message other than a batch.
  void PushMessage(batchd::v1::StreamResponse response);
  // Queues a built batch whose header says `layout`.
  void PushBatch(std::shared_ptr<const BuiltBatch> batch,
                 batchd::v1::Layout layout);
  // Takes batch `key` out if none of it was sent yet; returns whether it
  // was there.
  bool Withdraw(const Key& key);
  // The next message to write, taken off the queue; nullopt when empty.
  std::optional<Popped> Pop();
  void Clear();

  bool empty() const { return queue_.empty(); }
  // Messages queued that are not batches.
  uint32_t messages() const { return messages_; }

 private:
  struct Outgoing {
    std::optional<batchd::v1::StreamResponse> message;
    std::shared_ptr<const BuiltBatch> batch;
    batchd::v1::Layout layout = batchd::v1::LAYOUT_NHWC;
    bool header_sent = false;
    uint64_t offset = 0;
  };

  std::deque<Outgoing> queue_;
  uint32_t messages_ = 0;  // entries of queue_ with a `message`
};

}  // namespace batchd::server

#endif  // BATCHD_SERVER_STREAM_SEND_QUEUE_H_
