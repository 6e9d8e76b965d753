// RangePrefetch: member ranges of remote shards fetched ahead of their
// reads and held in memory until read.
//
// The shard cache reads a shard by member ranges when the plans' forecast
// says ranges cost less than the whole shard. Each such read is one request:
// at a store's latency (tens of milliseconds) a few reader threads read a
// few dozen members a second. The reads are known ahead (the batches after
// the one being built), so Fetch queues them and `threads` threads fetch
// them, one request each, many at once; Take hands a read its bytes,
// waiting for a fetch in flight, instead of asking the store again. Before
// each fetch, `wanted` says whether the shard is still read by ranges (it
// may have been downloaded whole meanwhile); a range a read asked for
// before its fetch began is not fetched afterwards.
//
// Bounded: at most `max_bytes` held or in flight. A range asked for beyond
// that is dropped (the read fetches it itself); a range not taken within
// `unread_ttl` (its stream ended, or its shard was downloaded whole) is let
// go when room is needed. Ranges are fetched in the order asked, which is
// the order they are needed.
//
// Thread-safe. The destructor drops what is queued, wakes every Take and
// joins the threads (a fetch in flight finishes first).
//
//   RangePrefetch ranges({.threads = 16, .max_bytes = 64 << 20});
//   ranges.Fetch(store, shard, name, {{offset, size}});
//   if (std::optional<absl::Status> s = ranges.Take(name, offset, size, dest))
//     ...  // *s: the fetch's result; nullopt: read it yourself
#ifndef BATCHD_SERVER_STORAGE_RANGE_PREFETCH_H_
#define BATCHD_SERVER_STORAGE_RANGE_PREFETCH_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "server/storage/object_store.h"

namespace batchd::server {

// A member's bytes in its shard.
struct MemberRange {
  uint64_t offset = 0;
  uint64_t size = 0;
};

struct RangePrefetchOptions {
  int threads = 0;  // 0: Fetch does nothing
  uint64_t max_bytes = uint64_t{64} << 20;
  absl::Duration unread_ttl = absl::Seconds(30);
  // Asked on a fetching thread before each fetch; false: not fetched.
  // Null: always fetched.
  std::function<bool(const ObjectInfo& shard, const std::string& name)>
      wanted;
};

// Counters since construction (and the state now).
struct RangePrefetchStats {
  uint64_t queued = 0;        // ranges accepted by Fetch
  uint64_t dropped = 0;       // asked for with no room
  uint64_t taken = 0;         // reads served by Take
  uint64_t unread = 0;        // let go before any read took them
  uint64_t declined = 0;      // not fetched: `wanted` said no
  uint64_t late = 0;          // not fetched: read before their turn
  uint64_t failed = 0;        // fetches the store failed
  uint64_t fetched_bytes = 0;  // bytes received from the store
  uint64_t held_bytes = 0;     // held or in flight now
  uint64_t in_flight = 0;      // ranges queued or being fetched now
};

class RangePrefetch {
 public:
  explicit RangePrefetch(RangePrefetchOptions options);
  ~RangePrefetch();
  RangePrefetch(const RangePrefetch&) = delete;
  RangePrefetch& operator=(const RangePrefetch&) = delete;

  // Queues `members` of `shard` (named `name`, the cache's file name) for
  // fetching through `store`, skipping those already held or queued and
  // dropping those beyond the bound. Never blocks on I/O.
  void Fetch(const std::shared_ptr<ObjectStore>& store,
             const ObjectInfo& shard, const std::string& name,
             absl::Span<const MemberRange> members) ABSL_LOCKS_EXCLUDED(mu_);

  // The range's bytes into `dest` when it was fetched ahead: OK, after
  // waiting for its fetch if in flight. The range is let go either way.
  // nullopt when it was not asked for, or its fetch failed, was declined or
  // was dropped at shutdown: the caller reads it itself (and gets the
  // store's error). A range not yet asked for is marked read for a while,
  // so that a Fetch of it arriving late does not fetch it again.
  std::optional<absl::Status> Take(const std::string& name, uint64_t offset,
                                   uint64_t size, uint8_t* dest)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Whether ranges of the shard `name` are queued, in flight or held: its
  // reads are under way by ranges, and the cache keeps reading it so rather
  // than download it whole as well.
  bool Holds(const std::string& name) const ABSL_LOCKS_EXCLUDED(mu_);

  RangePrefetchStats stats() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  using Key = std::tuple<std::string, uint64_t, uint64_t>;
  // Ranges read without a fetch ahead are remembered for kReadMarkTtl, at
  // most kMaxReadMarks of them (the oldest forgotten first).
  static constexpr size_t kMaxReadMarks = 16384;
  static constexpr absl::Duration kReadMarkTtl = absl::Seconds(10);
  struct Range {
    std::shared_ptr<ObjectStore> store;
    ObjectInfo shard;
    std::unique_ptr<uint8_t[]> bytes;
    bool done = false;
    bool ok = false;
    absl::Time fetched;  // when done
    uint64_t fetch_number = 0;  // its key in fetched_, once done
  };

  void FetchLoop();
  // Lets go of the range at `it`: its bytes and its shard's count.
  void Erase(absl::flat_hash_map<Key, std::shared_ptr<Range>>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Lets go of ranges fetched and not taken within unread_ttl, oldest
  // first, until `bytes` more fit; false when they still do not.
  bool MakeRoom(uint64_t bytes, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const RangePrefetchOptions options_;

  mutable absl::Mutex mu_;
  // Every range held, queued or in flight. A Range is filled by its
  // fetching thread outside the lock: only that thread touches `bytes`
  // until `done` is set under the lock.
  absl::flat_hash_map<Key, std::shared_ptr<Range>> ranges_
      ABSL_GUARDED_BY(mu_);
  // Of ranges_, how many by shard name (no entry: none).
  absl::flat_hash_map<std::string, int> ranges_by_shard_ ABSL_GUARDED_BY(mu_);
  // Keys waiting for a thread, in the order asked.
  std::deque<Key> queue_ ABSL_GUARDED_BY(mu_);
  // Ranges fetched and not yet taken, oldest first (by fetch number).
  std::map<uint64_t, Key> fetched_ ABSL_GUARDED_BY(mu_);
  // Ranges read without a fetch ahead, when; and their keys, oldest first.
  absl::flat_hash_map<Key, absl::Time> read_marks_ ABSL_GUARDED_BY(mu_);
  std::deque<Key> read_mark_order_ ABSL_GUARDED_BY(mu_);
  uint64_t fetches_done_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  RangePrefetchStats stats_ ABSL_GUARDED_BY(mu_);

  std::vector<std::thread> threads_;
};

}  // namespace batchd::server

#endif  // BATCHD_SERVER_STORAGE_RANGE_PREFETCH_H_
