// SharedRing: the client's side of same-host shared memory
// (docs/design-choices.md, "Same-host shared memory"). The ring's slots
// live in one sealed memfd region that the daemon maps too, so the
// daemon's workers decode straight into them and only headers cross the
// stream.
//
//   ASSIGN_OR_RETURN(std::shared_ptr<SharedRing> ring,
//                    AttachSharedRing(opened.shared_memory(), slots,
//                                     allocator, absl::Seconds(5)));
//   request.add_slots(3);  // batch i goes into ring->slot(3)
//
// Immutable after AttachSharedRing; the bytes of a slot belong to the
// daemon while it is granted and to the loader otherwise.
#ifndef BATCHD_CLIENT_SHARED_RING_H_
#define BATCHD_CLIENT_SHARED_RING_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "batchd/v1/data.pb.h"
#include "client/buffer.h"
#include "common/shared_region.h"

namespace batchd::client {

struct SharedRing {
  common::SharedRegion region;
  // The allocator's hold on the region (pinned under CUDA); released
  // before the region is unmapped.
  std::shared_ptr<void> registration;
  uint64_t slot_bytes = 0;
  uint32_t slots = 0;

  uint8_t* slot(uint32_t i) const { return region.data() + i * slot_bytes; }
};

// Creates a region of `slots` slots as `invite` describes, lets
// `allocator` register it (BufferAllocator::Register), and attaches it to
// the daemon's stream over the side channel named in `invite`. Blocks up
// to `timeout` for the daemon's answer. The error says why, for the log
// line of a client that then streams bytes: the daemon's refusal (its
// code and message), a side channel that cannot be reached, or memory.
absl::StatusOr<std::shared_ptr<SharedRing>> AttachSharedRing(
    const batchd::v1::SharedMemoryInvite& invite, uint32_t slots,
    BufferAllocator* allocator, absl::Duration timeout);

}  // namespace batchd::client

#endif  // BATCHD_CLIENT_SHARED_RING_H_
