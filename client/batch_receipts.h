// BatchReceipts: what each daemon's stream is in the middle of receiving,
// a batch's bytes into a ring slot or a losing copy read past into scratch
// memory, and the protocol's rules for it: a header only when nothing is
// incomplete and the batch was asked for, within max_batch_bytes, on the
// right transport and with a shape that matches its size; chunks in order,
// of the batch being received, never past its end. It also counts the bytes
// received and the time spent copying them (LoaderStats).
//
// Pure bookkeeping: no threads, no gRPC, no clock; the ring and the
// scheduler stay with the caller, who passes what they say (`awaited`, the
// slot). Unit-tested on constructed message sequences
// (batch_receipts_test.cc).
//
// Daemons are numbered by Add(), in step with DaemonRoster's.
// Thread-compatible: DaemonSet calls it under its mutex. The scratch
// memory Destination() hands out is written by that daemon's reader thread
// without the mutex, and stays put while more daemons are added.
#ifndef BATCHD_CLIENT_BATCH_RECEIPTS_H_
#define BATCHD_CLIENT_BATCH_RECEIPTS_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "batchd/v1/data.pb.h"
#include "common/chunk_codec.h"

namespace batchd::client {

class BatchReceipts {
 public:
  using Key = std::pair<uint64_t, uint64_t>;  // (epoch, batch index)

  // A chunk is at most 4 MiB (the protocol); discarded copies are read into
  // a scratch buffer of this size at most.
  static constexpr size_t kMaxChunkBytes = size_t{4} << 20;

  // One daemon's batch in progress.
  struct Receipt {
    bool active = false;
    Key key{0, 0};
    int slot = -1;  // -1: discarding
    uint64_t total = 0;
    uint64_t received = 0;
  };

  // Numbers a new daemon.
  int Add();
  const Receipt& receipt(int daemon) const { return daemons_[daemon].receipt; }
  // Forgets `daemon`'s batch in progress (done, or its stream ended).
  void Reset(int daemon) { daemons_[daemon].receipt = Receipt{}; }

  // Whether `daemon` may start receiving `header`: OK, or INTERNAL with
  // the protocol error (its message without the daemon's name). `awaited`:
  // the daemon holds a request for it; `shared_memory`: its stream has a
  // shared-memory ring attached.
  absl::Status CheckHeader(int daemon, const batchd::v1::BatchHeader& header,
                           bool awaited, uint64_t max_batch_bytes,
                           bool shared_memory) const;
  // `daemon` starts receiving `key` of `total` bytes into `slot` (-1:
  // read past it). In shared memory the bytes are already there. Returns
  // whether the batch is complete. REQUIRES: CheckHeader was OK.
  bool Begin(int daemon, const Key& key, uint64_t total, int slot,
             bool in_shared_memory);

  // Where a chunk of `daemon`'s goes: at `offset` into `slot`, or into
  // `scratch` for a copy being read past (`slot` -1).
  struct Destination {
    int slot = -1;
    uint64_t offset = 0;
    uint8_t* scratch = nullptr;
  };
  // INTERNAL with the protocol error when `chunk` is not the next part of
  // the batch in progress.
  absl::StatusOr<Destination> Place(int daemon,
                                    const common::ChunkInfo& chunk);
  // `length` bytes of `daemon`'s chunk arrived, taking `copy` CPU time.
  // Returns whether the batch is complete.
  bool Advance(int daemon, uint64_t length, absl::Duration copy);

  // Bytes received (or granted in shared memory), and the time spent
  // copying those that went into slots.
  uint64_t received_bytes() const { return received_bytes_; }
  absl::Duration copy() const { return copy_; }

 private:
  struct Daemon {
    Receipt receipt;
    std::vector<uint8_t> scratch;
  };

  std::vector<Daemon> daemons_;  // by number
  uint64_t received_bytes_ = 0;
  absl::Duration copy_;
};

}  // namespace batchd::client

#endif  // BATCHD_CLIENT_BATCH_RECEIPTS_H_
