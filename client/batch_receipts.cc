#include "client/batch_receipts.h"

#include <limits>
#include <string>

#include "absl/strings/str_cat.h"

namespace batchd::client {
namespace {

std::string BatchName(uint64_t epoch, uint64_t index) {
  return absl::StrCat("batch ", index, " of epoch ", epoch);
}

std::string BatchName(const BatchReceipts::Key& key) {
  return BatchName(key.first, key.second);
}

}  // namespace

int BatchReceipts::Add() {
  daemons_.emplace_back();
  return static_cast<int>(daemons_.size()) - 1;
}

absl::Status BatchReceipts::CheckHeader(int daemon,
                                        const batchd::v1::BatchHeader& header,
                                        bool awaited, uint64_t max_batch_bytes,
                                        bool shared_memory) const {
  const Key key{header.epoch(), header.batch_index()};
  const Receipt& receipt = daemons_[daemon].receipt;
  if (receipt.active) {
    return absl::InternalError(absl::StrCat("header of ", BatchName(key),
                                            " while ", BatchName(receipt.key),
                                            " is incomplete"));
  }
  if (!awaited) {
    return absl::InternalError(
        absl::StrCat("header of ", BatchName(key), ", which is not awaited"));
  }
  if (header.total_bytes() > max_batch_bytes) {
    return absl::InternalError(absl::StrCat(
        BatchName(key), " has ", header.total_bytes(),
        " bytes, more than max_batch_bytes ", max_batch_bytes));
  }
  if (header.in_shared_memory() != shared_memory) {
    return absl::InternalError(absl::StrCat(
        BatchName(key), header.in_shared_memory()
                            ? " is in shared memory, which this stream "
                              "has not attached"
                            : " comes as bytes on a stream with shared "
                              "memory attached"));
  }
  // The fields: one size per sample and field, summing to the data.
  uint64_t field_bytes = 0;
  for (uint32_t size : header.field_sizes()) field_bytes += size;
  if (field_bytes != header.field_data().size() ||
      static_cast<uint64_t>(header.field_sizes_size()) !=
          static_cast<uint64_t>(header.sample_indices_size()) *
              static_cast<uint64_t>(header.field_counts_size())) {
    return absl::InternalError(absl::StrCat(
        BatchName(key), " has ", header.field_sizes_size(),
        " field sizes summing to ", field_bytes, " bytes for ",
        header.sample_indices_size(), " samples x ",
        header.field_counts_size(), " fields and ",
        header.field_data().size(), " bytes of field data"));
  }
  // The views tile the pixels: each where the previous ended, the last
  // ending at total_bytes.
  uint64_t view_end = 0;
  for (const batchd::v1::ViewShape& view : header.views()) {
    uint64_t elements = view.shape_size() > 0 ? 1 : 0;
    for (uint64_t dim : view.shape()) {
      if (dim != 0 && elements > std::numeric_limits<uint64_t>::max() / dim) {
        return absl::InternalError("view shape overflows");
      }
      elements *= dim;
    }
    if (view.offset() != view_end) {
      return absl::InternalError(absl::StrCat(
          BatchName(key), " has a view at offset ", view.offset(),
          " where the previous one ends at ", view_end));
    }
    view_end += elements;
  }
  if (header.views_size() > 0 && view_end != header.total_bytes()) {
    return absl::InternalError(absl::StrCat(
        BatchName(key), " has views of ", view_end, " bytes but ",
        header.total_bytes(), " bytes of pixels"));
  }
  if (header.shape_size() > 0) {
    uint64_t elements = 1;
    for (uint64_t dim : header.shape()) {
      if (dim != 0 && elements > std::numeric_limits<uint64_t>::max() / dim) {
        return absl::InternalError("shape overflows");
      }
      elements *= dim;
    }
    if (elements != header.total_bytes()) {
      return absl::InternalError(absl::StrCat(BatchName(key), " has shape with ",
                                              elements, " elements but ",
                                              header.total_bytes(), " bytes"));
    }
  }
  return absl::OkStatus();
}

bool BatchReceipts::Begin(int daemon, const Key& key, uint64_t total,
                          int slot, bool in_shared_memory) {
  Receipt& receipt = daemons_[daemon].receipt;
  receipt = Receipt{};
  receipt.active = true;
  receipt.key = key;
  receipt.total = total;
  receipt.slot = slot;
  if (in_shared_memory) {
    // The daemon's workers wrote the pixels into the granted slot; the
    // header completes the batch.
    receipt.received = receipt.total;
    received_bytes_ += receipt.total;
  }
  return receipt.received == receipt.total;
}

absl::StatusOr<BatchReceipts::Destination> BatchReceipts::Place(
    int daemon, const common::ChunkInfo& chunk) {
  const Key key{chunk.epoch, chunk.batch_index};
  Daemon& d = daemons_[daemon];
  const Receipt& receipt = d.receipt;
  if (!receipt.active || receipt.key != key) {
    return absl::InternalError(absl::StrCat(
        "chunk of ", BatchName(key), ", which is not the batch being received"));
  }
  if (chunk.offset != receipt.received) {
    return absl::InternalError(absl::StrCat("chunk of ", BatchName(key),
                                            " at offset ", chunk.offset,
                                            "; expected offset ",
                                            receipt.received));
  }
  if (chunk.length > receipt.total - receipt.received) {
    return absl::InternalError(absl::StrCat(
        "chunk of ", BatchName(key), " at offset ", chunk.offset, " with ",
        chunk.length, " bytes overflows the batch's ", receipt.total,
        " bytes"));
  }
  Destination destination;
  if (receipt.slot < 0) {
    // A losing copy: read past it.
    if (chunk.length > kMaxChunkBytes) {
      return absl::InternalError(absl::StrCat(
          "a chunk of ", chunk.length, " bytes, over the 4 MiB limit"));
    }
    if (d.scratch.size() < chunk.length) d.scratch.resize(chunk.length);
    destination.scratch = d.scratch.data();
    return destination;
  }
  destination.slot = receipt.slot;
  destination.offset = receipt.received;
  return destination;
}

bool BatchReceipts::Advance(int daemon, uint64_t length, absl::Duration copy) {
  Receipt& receipt = daemons_[daemon].receipt;
  receipt.received += length;
  received_bytes_ += length;
  if (receipt.slot >= 0) copy_ += copy;
  return receipt.received == receipt.total;
}

}  // namespace batchd::client
