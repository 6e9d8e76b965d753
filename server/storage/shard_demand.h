// ShardDemand: the known future of one remote dataset's shard reads, merged
// over every stream that reads it, and the two choices the shard cache makes
// from it: which shard to evict (Belady's: the one needed furthest in the
// future), and whether a missing shard is fetched whole or by member ranges.
//
// A batch is a pure function of (plan, epoch, batch index), so a stream's
// next reads are known: the batches of its epoch order from the next one it
// builds, then the next epoch's (whose reads of each shard are the same). Each reader (one rank of one plan) publishes its order and next
// batch as it advances; Forecast() walks every reader's future and gives,
// for each shard read within it, the distance of each read (counted in that
// reader's upcoming samples; readers are taken to advance at the same rate,
// so two jobs' futures merge by distance) and its bytes.
//
// Bounded whatever the scale: a forecast walks at most kMaxForecastReads
// reads in all, split evenly across the readers (and at most
// kMaxReadsPerReader each, over the rest of a reader's epoch and the next
// one, for which the current epoch's order stands in), and
// keeps 12 bytes a read walked plus two table entries per shard seen; at most
// kMaxReaders readers are kept (the least recently advanced is dropped) and
// one not advanced for kReaderIdle is forgotten. A shard no reader reaches
// within its walk is "never" needed: the cache falls back to least recently
// used among those. At ImageNet's shape (1.28M samples, 1,024 shards, 64
// readers) a forecast walks 4,096 reads a reader, holds 3 MiB and takes
// about 23 ms to build (shard_demand_test).
//
// Thread-safe; a forecast is immutable and shared. It is rebuilt when a
// reader moved since the last, but only once the time since that build is
// kRebuildSpacing times what the build took in CPU time (a build preempted
// on a loaded machine must not leave a stale forecast for long): a forecast costs at most a
// tenth of a core, however often the cache misses, and a small dataset's
// (microseconds to build) is always current.
//
//   ShardDemand demand([&](uint64_t sample) { return Locate(sample); });
//   demand.Publish("job/rank0", spec, order, /*next_batch=*/12);
//   std::shared_ptr<const ShardForecast> f = demand.Forecast();
//   f->NextUse(/*shard=*/3);  // 0: read by the next batch
#ifndef BATCHD_SERVER_STORAGE_SHARD_DEMAND_H_
#define BATCHD_SERVER_STORAGE_SHARD_DEMAND_H_

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/sampler.h"

namespace batchd::server {

// Where a sample's bytes are: its shard and the member's size.
struct SampleLocation {
  static constexpr uint32_t kNoShard = std::numeric_limits<uint32_t>::max();
  uint32_t shard = kNoShard;
  uint64_t bytes = 0;
};

// The reads of one shard before some distance.
struct ShardReads {
  uint64_t count = 0;
  uint64_t bytes = 0;
};

// An immutable view of the upcoming reads, by shard.
class ShardForecast {
 public:
  static constexpr uint64_t kNever = std::numeric_limits<uint64_t>::max();

  // A forecast from reads (shard, distance, bytes) in any order.
  struct Read {
    uint32_t shard = 0;
    uint32_t distance = 0;
    uint32_t bytes = 0;
  };
  // `first_known`: by shard, the distance of its first read in an order
  // known to happen (nullopt: every read is; see NextKnownUse).
  explicit ShardForecast(
      std::vector<Read> reads,
      std::optional<absl::flat_hash_map<uint32_t, uint32_t>> first_known =
          std::nullopt);

  // The distance of `shard`'s next read, kNever when no reader reads it
  // within the forecast.
  uint64_t NextUse(uint32_t shard) const;
  // The distance of `shard`'s next read in a known order, kNever when its
  // only reads within the forecast are of a next epoch, whose order is
  // guessed from the current one's (the same reads of each shard, at other
  // distances): good enough to weigh a shard's reads and to evict, not to
  // fetch a shard ahead for them.
  uint64_t NextKnownUse(uint32_t shard) const;
  // The reads of `shard` at a distance below `before`.
  ShardReads ReadsBefore(uint32_t shard, uint64_t before) const;
  // The reads of `shard` at a distance in [`from`, `before`).
  ShardReads ReadsBetween(uint32_t shard, uint64_t from,
                          uint64_t before) const;
  // The distance before which a cache of `capacity` bytes can hold every
  // shard read, keeping the shards needed soonest: shards in order of next
  // use, summing shard_bytes(shard) until the sum passes `capacity`; the
  // next use of the first shard that does not fit (kNever when all do).
  // Remembered for the last `capacity` asked (a forecast belongs to one
  // dataset, so its callers pass the same shard_bytes).
  uint64_t HoldHorizon(uint64_t capacity,
                       const std::function<uint64_t(uint32_t)>& shard_bytes)
      const ABSL_LOCKS_EXCLUDED(memo_mu_);
  // HoldHorizon as it will be once the readers have advanced `from` reads:
  // the shards by their first read at or after `from` (those read only
  // before it are gone by then). HoldHorizonFrom(0, ...) == HoldHorizon.
  // Not remembered: O(shards log shards).
  uint64_t HoldHorizonFrom(
      uint64_t from, uint64_t capacity,
      const std::function<uint64_t(uint32_t)>& shard_bytes) const;
  // Shards in order of next use, the soonest first.
  const std::vector<uint32_t>& ShardsByNextUse() const { return by_use_; }

  uint64_t reads() const { return reads_; }
  // The furthest distance walked (0 for an empty forecast).
  uint64_t depth() const { return depth_; }

 private:
  struct Uses {
    // Ascending distances, and the bytes read up to and including each.
    std::vector<uint32_t> distance;
    std::vector<uint64_t> cumulative_bytes;
  };
  absl::flat_hash_map<uint32_t, Uses> uses_;
  std::optional<absl::flat_hash_map<uint32_t, uint32_t>> first_known_;
  std::vector<uint32_t> by_use_;
  uint64_t reads_ = 0;
  uint64_t depth_ = 0;

  mutable absl::Mutex memo_mu_;
  mutable uint64_t memo_capacity_ ABSL_GUARDED_BY(memo_mu_) = 0;
  mutable uint64_t memo_horizon_ ABSL_GUARDED_BY(memo_mu_) = kNever;
  mutable bool memo_set_ ABSL_GUARDED_BY(memo_mu_) = false;
};

// What a request costs against a byte, for the whole-or-ranges choice.
struct FetchCosts {
  // One request counted as this many bytes (its round trip, and what the
  // store charges for it).
  uint64_t request_bytes = 64 << 10;
  // A whole-shard download takes one request per chunk.
  uint64_t chunk_bytes = uint64_t{8} << 20;
};

enum class ShardFetch { kWhole, kRanges };

// Whole: shard_bytes plus a request per chunk, once; ranges: each read's
// bytes plus a request each, for the `reads` that would come before the
// shard left the cache. Ties go to the whole shard (later reads hit).
ShardFetch ChooseFetch(uint64_t shard_bytes, ShardReads reads,
                       const FetchCosts& costs);

// A cached shard the cache could evict.
struct EvictionCandidate {
  uint64_t next_use = ShardForecast::kNever;
  // Higher: used longer ago.
  uint64_t idle_rank = 0;
};

// Belady's order: indices of `candidates`, the first to evict first: the
// furthest next use first (never used again before all), ties by least
// recently used.
std::vector<size_t> EvictionOrder(absl::Span<const EvictionCandidate> candidates);

class ShardDemand {
 public:
  static constexpr size_t kMaxForecastReads = size_t{1} << 18;
  static constexpr size_t kMaxReadsPerReader = size_t{1} << 16;
  static constexpr size_t kMaxReaders = 1024;
  static constexpr absl::Duration kReaderIdle = absl::Seconds(60);
  static constexpr int kRebuildSpacing = 10;

  using Locate = std::function<SampleLocation(uint64_t sample)>;

  explicit ShardDemand(Locate locate,
                       std::function<absl::Time()> now = &absl::Now);

  // `reader` builds batches `next_batch`, next_batch + 1, ... of `spec`'s
  // shard of the epoch order `order` next. A publication behind the
  // reader's last one in the same order is ignored (batches of a window
  // are built out of order).
  void Publish(const std::string& reader, const common::ShardSpec& spec,
               std::shared_ptr<const std::vector<uint64_t>> order,
               uint64_t next_batch) ABSL_LOCKS_EXCLUDED(mu_);
  // `reader` starts on `order` at `first_batch` (a batch accepted before
  // any of it is read): published unless the reader already publishes in
  // `order`. Without it, the samples of a stream's first batch read before
  // that batch's own publication would find no forecast, and their shards
  // would be fetched blind (whole). A reader new to an order makes the next
  // Forecast() a rebuild, whatever the spacing.
  void PublishStart(const std::string& reader, const common::ShardSpec& spec,
                    std::shared_ptr<const std::vector<uint64_t>> order,
                    uint64_t first_batch) ABSL_LOCKS_EXCLUDED(mu_);
  void Forget(const std::string& reader) ABSL_LOCKS_EXCLUDED(mu_);

  // The merged forecast; see the class comment for when it is rebuilt.
  std::shared_ptr<const ShardForecast> Forecast() ABSL_LOCKS_EXCLUDED(mu_);
  // Rebuilds now (tests and the simulator).
  std::shared_ptr<const ShardForecast> ForecastNow() ABSL_LOCKS_EXCLUDED(mu_);
  // The last forecast built, without a rebuild (one is built if there is
  // none yet): for questions asked per read that may be a moment stale.
  std::shared_ptr<const ShardForecast> LastForecast() ABSL_LOCKS_EXCLUDED(mu_);

  size_t readers() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Reader {
    common::ShardSpec spec;
    std::shared_ptr<const std::vector<uint64_t>> order;
    uint64_t next_batch = 0;
    absl::Time advanced;
  };

  std::shared_ptr<const ShardForecast> Build(absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const Locate locate_;
  const std::function<absl::Time()> now_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Reader> readers_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const ShardForecast> forecast_ ABSL_GUARDED_BY(mu_);
  absl::Time built_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Duration build_cost_ ABSL_GUARDED_BY(mu_);  // the last build's
  bool moved_ ABSL_GUARDED_BY(mu_) = true;
  // A reader arrived on an order since the last build: rebuild at once.
  bool arrived_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace batchd::server

#endif  // BATCHD_SERVER_STORAGE_SHARD_DEMAND_H_
