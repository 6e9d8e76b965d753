// ShardCache: a bounded local cache of whole remote tar shards, with an
// optional RAM tier for small shards.
//
// A shard is downloaded whole on its first read (ObjectStore::ReadRange in
// chunks, a few in flight, into a temporary file renamed into place), then
// read with pread. The bytes on disk never exceed `disk_bytes`: a shard is
// admitted only after enough least recently used shards have been deleted;
// shards being read or downloaded are pinned and never evicted. A shard
// larger than the whole cache, or one that cannot be admitted because
// everything is pinned, is read by member ranges straight from the store.
// Concurrent reads of one shard wait for one download.
//
// Files are named after a hash of (URL, size, ETag), so a restart reuses
// every complete shard (a changed ETag is another name: the stale file is
// never read and ages out of the LRU). A shard without an ETag is cached
// for the running process only.
//
// What the plans will read decides both choices a miss makes
// (shard_demand.h): a dataset registers its ShardDemand with AddForecast,
// and then a shard whose upcoming reads, before a cache of this size would
// have to let it go, cost less as member ranges than the whole shard is
// read by ranges and never admitted; and eviction takes the shard needed
// furthest in the future (never needed first, then least recently used).
// Shards no forecast knows are admitted whole and evicted least recently
// used first, as without forecasts.
//
// Prefetch(shard) queues a background download on a small pool of threads;
// prefetches never evict a pinned shard, a prefetched shard not yet read
// or (by the forecast) a shard needed no later than the one they fetch,
// hold at most half the cache, and are dropped when the queue is full.
// With nothing queued, the same threads prefetch by the forecast: the
// shards the plans need soonest that the cost model would download whole,
// as far ahead as half the cache allows and never evicting a shard needed
// sooner than the one fetched. PrefetchMembers(shard, members) hands the
// members of an accepted batch to a pool of range threads
// (range_prefetch.h), which fetch them ahead, many at once, if the shard is
// still to be read by ranges when their turn comes: ranged reads then
// overlap their round trips instead of waiting for each in turn.
//
// Thread-safe. The lock covers the table only: downloads, reads, renames
// and deletions happen outside it. The destructor cancels queued
// prefetches and joins the prefetch threads.
//
//   ASSIGN_OR_RETURN(auto cache, ShardCache::Open({.dir = "/cache",
//                                                  .disk_bytes = 64 << 30}));
//   RETURN_IF_ERROR(cache->Read(store, shard, offset, size, dest));
#ifndef BATCHD_SERVER_STORAGE_SHARD_CACHE_H_
#define BATCHD_SERVER_STORAGE_SHARD_CACHE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/storage/object_store.h"
#include "server/storage/range_prefetch.h"
#include "server/storage/shard_demand.h"
#include "server/storage/shard_ram_tier.h"

namespace batchd::server {

struct ShardCacheOptions {
  std::string dir;          // created if missing
  uint64_t disk_bytes = 0;  // the bound on shard bytes in `dir`; > 0
  // Whole shards of at most ram_bytes / 4 each are also kept in memory,
  // least recently used dropped first; 0: no RAM tier.
  uint64_t ram_bytes = 0;
  uint64_t chunk_bytes = uint64_t{8} << 20;  // per ReadRange of a download
  int chunks_in_flight = 4;                  // per download
  int prefetch_threads = 2;                  // 0: Prefetch does nothing
  size_t max_queued_prefetches = 64;
  // Member ranges fetched ahead for shards read by ranges: requests at once,
  // and the bytes held until read (range_prefetch.h). 0 threads: none.
  int range_prefetch_threads = 0;
  uint64_t range_prefetch_bytes = uint64_t{64} << 20;
  // How often an idle prefetch thread looks at the forecast.
  absl::Duration plan_interval = absl::Milliseconds(50);
};

// Prefetch threads for a store allowed `connections` requests in flight
// (--remote-connections): half of them for downloads ahead, each download
// holding `chunks_in_flight`; the other half stay for member ranges (reads
// that miss, and the ranges fetched ahead for them).
// At least 1, at most 16. 32 connections, 4 chunks: 4 threads.
int PrefetchThreadsFor(int connections, int chunks_in_flight);
// Threads fetching member ranges ahead (one request each) with the other
// half of the `connections`: at least 1, at most 32. 32 connections: 16.
int RangePrefetchThreadsFor(int connections);

// Counters since Open (and the state now).
struct ShardCacheStats {
  uint64_t hits = 0;           // reads served from disk or RAM
  uint64_t ram_hits = 0;       // of which from RAM
  uint64_t misses = 0;         // reads that waited for a download
  uint64_t downloads = 0;      // shards downloaded (reads and prefetches)
  uint64_t download_failures = 0;
  uint64_t downloaded_bytes = 0;
  uint64_t uncached_reads = 0;  // member ranges read from the store directly
  // Misses read by member ranges because the forecast said ranges cost
  // less than the whole shard, fetched ahead or not (counted in
  // uncached_reads too).
  uint64_t range_choices = 0;
  uint64_t whole_choices = 0;  // misses the forecast sent to a download
  uint64_t prefetches_declined = 0;  // prefetches the forecast said ranges
  uint64_t forecast_prefetches = 0;  // of `prefetches`, chosen by the forecast
  uint64_t served_bytes = 0;  // member bytes returned by Read
  uint64_t range_bytes = 0;   // of which read from the store by ranges
  // The forecast now: bytes of the distinct shards the plans read within
  // it, and the reads it covers (all registered datasets).
  uint64_t forecast_shard_bytes = 0;
  uint64_t forecast_reads = 0;
  uint64_t prefetches_in_flight = 0;  // queued or downloading now
  // How many reads ahead the last forecast prefetch was needed.
  uint64_t prefetch_depth_reads = 0;
  uint64_t evictions = 0;       // shards deleted from disk to make room
  uint64_t prefetches = 0;          // queued
  uint64_t prefetches_dropped = 0;  // queue full or no room
  // Member ranges fetched ahead (range_prefetch.h): queued, read from
  // memory, let go unread, and dropped for want of room.
  uint64_t range_prefetches = 0;
  uint64_t range_prefetch_hits = 0;  // of range_choices
  uint64_t range_prefetches_unread = 0;
  uint64_t range_prefetches_dropped = 0;
  uint64_t disk_bytes = 0;      // held now (complete and downloading)
  uint64_t disk_limit = 0;
  uint64_t ram_bytes = 0;       // held now
  uint64_t ram_limit = 0;
  uint64_t shards = 0;          // complete shards on disk now
  double download_seconds = 0;  // summed over downloads
};

class ShardCache {
 public:
  // Called after each download with its size and duration (metrics).
  using DownloadObserver =
      std::function<void(uint64_t bytes, absl::Duration elapsed)>;

  // Creates `options.dir` if needed, deletes leftover temporary files,
  // adopts complete shards found there (oldest modification first evicted
  // first) and evicts down to the bound. INVALID_ARGUMENT for a zero bound,
  // the filesystem's error otherwise.
  static absl::StatusOr<std::unique_ptr<ShardCache>> Open(
      ShardCacheOptions options);
  ~ShardCache();
  ShardCache(const ShardCache&) = delete;
  ShardCache& operator=(const ShardCache&) = delete;

  // Bytes [`offset`, `offset` + `size`) of `shard` into `dest`: from RAM or
  // disk when cached, otherwise after downloading the whole shard through
  // `store` (or by a direct range read, see above). Blocks on I/O and on
  // another thread's download of the same shard. The download's error when
  // it fails (FAILED_PRECONDITION naming the URL when the ETag changed);
  // OUT_OF_RANGE for a range beyond shard.size.
  //
  // `whole_object`: the store ignores Range, so `shard` is downloaded by
  // one GET of the whole object (written straight into its cache file) and
  // never read by member ranges: RESOURCE_EXHAUSTED naming --cache-bytes
  // when the cache cannot hold it now.
  absl::Status Read(const std::shared_ptr<ObjectStore>& store,
                    const ObjectInfo& shard, uint64_t offset, uint64_t size,
                    uint8_t* dest, bool whole_object = false);

  // Queues a background download of `shard` unless it is cached, being
  // downloaded, queued, too large or the queue is full. Never blocks.
  void Prefetch(const std::shared_ptr<ObjectStore>& store,
                const ObjectInfo& shard, bool whole_object = false);
  // Queues `members` of `shard` (reads soon to come, in order) to be
  // fetched ahead by ranges if `shard` is neither cached nor being
  // downloaded and the cost model reads it by ranges (or it is larger than
  // the cache), now and when each range's turn comes. Never blocks on I/O.
  void PrefetchMembers(const std::shared_ptr<ObjectStore>& store,
                       const ObjectInfo& shard,
                       absl::Span<const MemberRange> members);

  // True when `shard` is complete on disk now (tests, logs).
  bool Contains(const ObjectInfo& shard) const;

  // The forecast of `demand` covers `shards` of `store` (shard i of the
  // demand is shards[i]); a request to their store weighs `request_cost_bytes` bytes
  // in the whole-or-ranges choice (a download makes one per chunk). The
  // cache keeps a weak reference: a demand that is gone counts for
  // nothing. RemoveForecast before the demand's locate function dies.
  void AddForecast(const std::shared_ptr<ShardDemand>& demand,
                   std::shared_ptr<ObjectStore> store,
                   const std::vector<ObjectInfo>& shards,
                   uint64_t request_cost_bytes)
      ABSL_LOCKS_EXCLUDED(mu_);
  void RemoveForecast(const ShardDemand* demand) ABSL_LOCKS_EXCLUDED(mu_);

  void set_download_observer(DownloadObserver observer);
  ShardCacheStats stats() const;
  const ShardCacheOptions& options() const { return options_; }


 private:
  struct Entry;
  struct PrefetchTask {
    std::shared_ptr<ObjectStore> store;
    ObjectInfo shard;
    bool whole_object = false;
  };
  // A registered forecast: its demand, its shards' sizes and its costs.
  struct Forecaster {
    std::weak_ptr<ShardDemand> demand;
    std::shared_ptr<ObjectStore> store;
    std::vector<ObjectInfo> shards;
    std::vector<std::string> names;  // ShardFileName of each
    std::vector<uint64_t> sizes;
    FetchCosts costs;
  };
  // The forecasts of every registered demand at one moment, taken without
  // the lock (a forecast may take milliseconds to build), by forecaster
  // (kept alive here, should RemoveForecast run meanwhile).
  struct Forecasted {
    std::shared_ptr<const Forecaster> forecaster;
    std::shared_ptr<const ShardForecast> forecast;
  };
  using Outlook = absl::flat_hash_map<const Forecaster*, Forecasted>;
  // `rebuild`: a forecast due for a rebuild is rebuilt (see ShardDemand);
  // false: the last one built is taken as it is.
  Outlook TakeOutlook(bool rebuild = true) const ABSL_LOCKS_EXCLUDED(mu_);
  // The next shard to prefetch by `outlook`, marked queued; nullopt when
  // none is worth it now.
  std::optional<PrefetchTask> PlanPrefetch(const Outlook& outlook)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // When the shard in file `name` is next read by `outlook` (kNever when no
  // forecast knows it).
  uint64_t NextUse(const Outlook& outlook, const std::string& name) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether `name`'s dataset has plans reading now whose forecast does not
  // read it.
  bool ForecastReadsNone(const Outlook& outlook, const std::string& name) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // How a miss of `name` should be fetched, by the cost model; nullopt
  // when no forecast knows it or no plan is reading it. `when_next_read`:
  // as the cache will see it when its next read comes (the shards read
  // only before then gone from the outlook), not as it sees it now: a
  // shard read whole once the readers reach it may look like ranges while
  // other shards' reads come first.
  std::optional<ShardFetch> ChooseFetchFor(const Outlook& outlook,
                                           const std::string& name,
                                           bool when_next_read = false) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  explicit ShardCache(ShardCacheOptions options);
  std::string PathOf(const std::string& name) const;

  // The entry of `shard`, ready and pinned by the caller, downloading it if
  // needed; nullptr when it cannot be admitted or the forecast says member
  // ranges cost less (read it directly). `prefetch`: admission under the
  // prefetch rules, and not pinned. `outlook`: what the plans will read.
  absl::StatusOr<std::shared_ptr<Entry>> Acquire(
      const std::shared_ptr<ObjectStore>& store, const ObjectInfo& shard,
      bool prefetch, bool whole_object, const Outlook& outlook,
      bool* downloaded);
  void Unpin(const std::shared_ptr<Entry>& entry);

  // Frees room for `bytes` more, deleting unpinned shards in Belady's
  // order by `outlook` (outside the lock; their bytes still count until
  // deleted). False when that is impossible now. A prefetch of a shard
  // needed at `needed_at` deletes no shard needed as soon or sooner.
  bool MakeRoom(uint64_t bytes, bool prefetch, const Outlook& outlook,
                uint64_t needed_at = ShardForecast::kNever)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PrefetchLoop();
  bool forecasters_empty() const ABSL_LOCKS_EXCLUDED(mu_);
  // Whether a member of `shard` (cache file `name`) fetched ahead now would
  // be read by ranges (also RangePrefetch's check before each fetch).
  bool ReadByRanges(const ObjectInfo& shard, const std::string& name) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // Constant after construction.
  const ShardCacheOptions options_;

  mutable absl::Mutex mu_;
  // By file name. Every entry's bytes count in disk_bytes_ from admission
  // until its file is deleted.
  absl::flat_hash_map<std::string, std::shared_ptr<Entry>> entries_
      ABSL_GUARDED_BY(mu_);
  // Complete entries, most recently used first.
  std::list<std::string> lru_ ABSL_GUARDED_BY(mu_);
  // Invariant: disk_bytes_ <= options_.disk_bytes, and the shard bytes in
  // the directory (complete, temporary, being deleted) <= disk_bytes_.
  uint64_t disk_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // Of disk_bytes_: entries with prefetched_unread; at most half the bound.
  uint64_t prefetched_unread_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int deletions_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  // Files being deleted (evicted, unlink outside the lock): a shard of the
  // same name is not admitted again until its old file is gone, or the
  // late unlink would delete the new one.
  absl::flat_hash_set<std::string> deleting_ ABSL_GUARDED_BY(mu_);
  ShardRamTier ram_ ABSL_GUARDED_BY(mu_);
  std::deque<PrefetchTask> prefetch_queue_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> prefetch_queued_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  ShardCacheStats stats_ ABSL_GUARDED_BY(mu_);
  DownloadObserver observer_ ABSL_GUARDED_BY(mu_);
  // Registered forecasts by their demand, and every shard they cover by
  // file name: (its forecaster, its number there).
  absl::flat_hash_map<const ShardDemand*, std::shared_ptr<const Forecaster>>
      forecasters_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::pair<const Forecaster*, uint32_t>>
      forecast_shards_ ABSL_GUARDED_BY(mu_);
  // ReadByRanges' answers by forecaster, for its latest forecast only, by
  // shard: asked for every member fetched ahead, each is worked out once a
  // forecast.
  struct RangesAnswers {
    std::shared_ptr<const ShardForecast> forecast;
    absl::flat_hash_map<uint32_t, bool> ranges;
  };
  mutable absl::flat_hash_map<const Forecaster*, RangesAnswers>
      ranges_answers_ ABSL_GUARDED_BY(mu_);

  // Member ranges fetched ahead; null without range prefetch threads.
  std::unique_ptr<RangePrefetch> ranges_;
  std::vector<std::thread> prefetch_threads_;
};

}  // namespace batchd::server

#endif  // BATCHD_SERVER_STORAGE_SHARD_CACHE_H_
