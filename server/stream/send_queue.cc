#include "server/stream/send_queue.h"

#include <algorithm>
#include <utility>

namespace batchd::server {

void SendQueue::PushMessage(batchd::v1::StreamResponse response) {
  Outgoing out;
  out.message = std::move(response);
  queue_.push_back(std::move(out));
  ++messages_;
}

void SendQueue::PushBatch(std::shared_ptr<const BuiltBatch> batch,
                          batchd::v1::Layout layout) {
  Outgoing out;
  out.batch = std::move(batch);
  out.layout = layout;
  queue_.push_back(std::move(out));
}

bool SendQueue::Withdraw(const Key& key) {
  auto queued = std::find_if(
      queue_.begin(), queue_.end(), [&key](const Outgoing& out) {
        return out.batch != nullptr && !out.header_sent &&
               Key{out.batch->epoch, out.batch->batch_index} == key;
      });
  if (queued == queue_.end()) return false;
  queue_.erase(queued);
  return true;
}

std::optional<SendQueue::Popped> SendQueue::Pop() {
  if (queue_.empty()) return std::nullopt;
  Outgoing& front = queue_.front();
  Popped popped;
  if (front.message) {
    popped.message.response = std::move(*front.message);
    queue_.pop_front();
    --messages_;
    return popped;
  }
  const BuiltBatch& batch = *front.batch;
  if (!front.header_sent) {
    batchd::v1::BatchHeader* header = popped.message.response.mutable_header();
    header->set_epoch(batch.epoch);
    header->set_batch_index(batch.batch_index);
    header->mutable_sample_indices()->Assign(batch.sample_indices.begin(),
                                             batch.sample_indices.end());
    header->mutable_repeats()->Assign(batch.repeats.begin(),
                                      batch.repeats.end());
    header->mutable_sources()->Assign(batch.sources.begin(),
                                      batch.sources.end());
    header->mutable_labels()->Assign(batch.labels.begin(), batch.labels.end());
    header->mutable_shape()->Assign(batch.shape.begin(), batch.shape.end());
    header->set_dtype(batchd::v1::DTYPE_UINT8);
    header->set_layout(front.layout);
    header->set_total_bytes(batch.pixels.size());
    for (const auto& sub : batch.substitutions) {
      *header->add_substitutions() = sub;
    }
    header->set_in_shared_memory(batch.pixels.external());
    if (!batch.field_sizes.empty()) {
      header->set_field_data(batch.field_data);
      header->mutable_field_sizes()->Assign(batch.field_sizes.begin(),
                                            batch.field_sizes.end());
      for (const auto& counts : batch.field_counts) {
        *header->add_field_counts() = counts;
      }
    }
    header->mutable_erased()->Assign(batch.erased.begin(), batch.erased.end());
    if (batch.mix.has_value()) *header->mutable_mix() = *batch.mix;
    header->mutable_views()->Assign(batch.views.begin(), batch.views.end());
    front.header_sent = true;
    popped.header_of = Key{batch.epoch, batch.batch_index};
    // In shared memory the pixels are already the client's: the header
    // completes the batch.
    if (batch.pixels.external()) {
      popped.completed = std::move(front.batch);
      queue_.pop_front();
    }
    return popped;
  }
  popped.message.batch = front.batch;
  popped.message.offset = front.offset;
  popped.message.length =
      std::min(kMaxChunkBytes, batch.pixels.size() - front.offset);
  front.offset += popped.message.length;
  if (front.offset == batch.pixels.size()) {
    popped.completed = std::move(front.batch);
    queue_.pop_front();
  }
  return popped;
}

void SendQueue::Clear() {
  queue_.clear();
  messages_ = 0;
}

}  // namespace batchd::server
