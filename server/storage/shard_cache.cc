#include "server/storage/shard_cache.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "common/errno_status.h"
#include "common/status_macros.h"
#include "server/storage/shard_cache_files.h"

namespace batchd::server {

namespace fs = std::filesystem;

// A shard in the directory: being downloaded, or complete.
struct ShardCache::Entry {
  std::string name;
  uint64_t size = 0;
  // Set once, under mu_: the download finished (ready) or failed.
  bool ready = false;
  bool failed = false;
  absl::Status status;
  // Readers and waiters holding it; a pinned entry is never evicted.
  int pins = 0;
  // Fetched by Prefetch (downloading or ready) and not read since.
  bool prefetched_unread = false;
  std::list<std::string>::iterator lru_position;  // when ready
};

int PrefetchThreadsFor(int connections, int chunks_in_flight) {
  return std::clamp(connections / 2 / std::max(chunks_in_flight, 1), 1, 16);
}

int RangePrefetchThreadsFor(int connections) {
  return std::clamp(connections / 2, 1, 32);
}

ShardCache::ShardCache(ShardCacheOptions options)
    : options_(std::move(options)), ram_(options_.ram_bytes) {
  if (options_.range_prefetch_threads > 0) {
    ranges_ = std::make_unique<RangePrefetch>(
        RangePrefetchOptions{
            .threads = options_.range_prefetch_threads,
            .max_bytes = options_.range_prefetch_bytes,
            .wanted = [this](const ObjectInfo& shard,
                             const std::string& name) {
              return ReadByRanges(shard, name);
            }});
  }
  stats_.disk_limit = options_.disk_bytes;
  stats_.ram_limit = options_.ram_bytes;
}

absl::StatusOr<std::unique_ptr<ShardCache>> ShardCache::Open(
    ShardCacheOptions options) {
  if (options.dir.empty()) {
    return absl::InvalidArgumentError("the shard cache needs a directory");
  }
  if (options.disk_bytes == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the shard cache in '", options.dir, "' needs a size above 0 bytes"));
  }
  options.chunk_bytes = std::max<uint64_t>(options.chunk_bytes, 1);
  options.chunks_in_flight = std::max(options.chunks_in_flight, 1);
  std::error_code ec;
  fs::create_directories(options.dir, ec);
  if (ec) {
    return common::ErrnoStatus(
        ec.value(), absl::StrCat("create cache directory '", options.dir, "'"));
  }
  std::unique_ptr<ShardCache> cache(new ShardCache(std::move(options)));
  const ShardCacheOptions& opts = cache->options_;

  // Adopt complete shards, most recently modified first in the LRU.
  ASSIGN_OR_RETURN(std::vector<ShardFile> found, ListShardFiles(opts.dir));
  {
    absl::MutexLock lock(&cache->mu_);
    for (const ShardFile& f : found) {
      if (cache->disk_bytes_ + f.size > opts.disk_bytes) {
        // The bound shrank since the last run: the oldest go.
        ::unlink(cache->PathOf(f.name).c_str());
        ++cache->stats_.evictions;
        continue;
      }
      auto entry = std::make_shared<Entry>();
      entry->name = f.name;
      entry->size = f.size;
      entry->ready = true;
      cache->lru_.push_back(f.name);
      entry->lru_position = std::prev(cache->lru_.end());
      cache->entries_.emplace(f.name, std::move(entry));
      cache->disk_bytes_ += f.size;
    }
  }
  for (int i = 0; i < opts.prefetch_threads; ++i) {
    cache->prefetch_threads_.emplace_back([c = cache.get()] {
      pthread_setname_np(pthread_self(), "shard-prefetch");
      c->PrefetchLoop();
    });
  }
  return cache;
}

ShardCache::~ShardCache() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    prefetch_queue_.clear();
  }
  for (std::thread& thread : prefetch_threads_) thread.join();
  ranges_.reset();  // its threads ask ReadByRanges: before any member goes
}

std::string ShardCache::PathOf(const std::string& name) const {
  return (fs::path(options_.dir) / name).string();
}

void ShardCache::set_download_observer(DownloadObserver observer) {
  absl::MutexLock lock(&mu_);
  observer_ = std::move(observer);
}

bool ShardCache::forecasters_empty() const {
  absl::MutexLock lock(&mu_);
  return forecasters_.empty();
}

ShardCacheStats ShardCache::stats() const {
  const Outlook outlook = TakeOutlook();
  absl::MutexLock lock(&mu_);
  ShardCacheStats stats = stats_;
  for (const auto& [key, forecasted] : outlook) {
    for (uint32_t shard : forecasted.forecast->ShardsByNextUse()) {
      stats.forecast_shard_bytes += key->sizes[shard];
    }
    stats.forecast_reads += forecasted.forecast->reads();
  }
  stats.prefetches_in_flight = prefetch_queued_.size();
  if (ranges_ != nullptr) {
    const RangePrefetchStats r = ranges_->stats();
    stats.range_prefetches = r.queued;
    stats.range_prefetch_hits = r.taken;
    stats.range_prefetches_unread = r.unread;
    stats.range_prefetches_dropped = r.dropped;
    stats.range_bytes += r.fetched_bytes;
    stats.prefetches_in_flight += r.in_flight;
  }
  stats.disk_bytes = disk_bytes_;
  stats.ram_bytes = ram_.bytes();
  stats.shards = lru_.size();
  return stats;
}

bool ShardCache::Contains(const ObjectInfo& shard) const {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(ShardFileName(shard));
  return it != entries_.end() && it->second->ready;
}

std::optional<ShardCache::PrefetchTask> ShardCache::PlanPrefetch(
    const Outlook& outlook) {
  // Every forecast shard not held or on its way, soonest needed first.
  struct Candidate {
    uint64_t next_use;
    const Forecaster* forecaster;
    uint32_t shard;
  };
  std::vector<Candidate> candidates;
  for (const auto& [key, forecasted] : outlook) {
    const Forecaster* forecaster = key;
    const ShardForecast* forecast = forecasted.forecast.get();
    for (uint32_t shard : forecast->ShardsByNextUse()) {
      const std::string& name = forecaster->names[shard];
      if (entries_.contains(name) || prefetch_queued_.contains(name) ||
          deleting_.contains(name)) {
        continue;
      }
      // Not for a next epoch guessed from this one's order: its shards
      // come in another order, so a shard fetched for it may be evicted
      // unread (or the job stops at this epoch's end). The next epoch's
      // order is published as its first batch is built.
      const uint64_t next_use = forecast->NextKnownUse(shard);
      if (next_use == ShardForecast::kNever) continue;
      candidates.push_back({next_use, forecaster, shard});
    }
  }
  std::sort(candidates.begin(), candidates.end(),
            [](const Candidate& a, const Candidate& b) {
              return a.next_use < b.next_use;
            });
  for (const Candidate& c : candidates) {
    const std::string& name = c.forecaster->names[c.shard];
    const uint64_t size = c.forecaster->sizes[c.shard];
    if (ChooseFetchFor(outlook, name) != ShardFetch::kWhole) continue;
    // Half the cache for shards fetched ahead, as for queued prefetches.
    if (prefetched_unread_bytes_ + size > options_.disk_bytes / 2) break;
    if (disk_bytes_ + size > options_.disk_bytes) {
      // Room would come from evicting: only a shard needed later than
      // this one (Belady's order) may go.
      uint64_t furthest = 0;
      bool evictable = false;
      for (const auto& [held, entry] : entries_) {
        if (entry->pins > 0 || entry->prefetched_unread || !entry->ready) {
          continue;
        }
        furthest = std::max(furthest, NextUse(outlook, held));
        evictable = true;
      }
      if (!evictable || furthest <= c.next_use) break;
    }
    prefetch_queued_.insert(name);
    ++stats_.prefetches;
    ++stats_.forecast_prefetches;
    stats_.prefetch_depth_reads = c.next_use;
    return PrefetchTask{c.forecaster->store, c.forecaster->shards[c.shard],
                        /*whole_object=*/false};
  }
  return std::nullopt;
}

bool ShardCache::MakeRoom(uint64_t bytes, bool prefetch,
                          const Outlook& outlook, uint64_t needed_at) {
  while (disk_bytes_ + bytes > options_.disk_bytes) {
    std::vector<std::shared_ptr<Entry>> evictable;
    std::vector<EvictionCandidate> candidates;
    uint64_t idle_rank = 0;
    for (const std::string& name : lru_) {  // most recently used first
      ++idle_rank;
      const std::shared_ptr<Entry>& entry = entries_.at(name);
      if (entry->pins > 0) continue;
      // A prefetch never pushes out what an earlier prefetch brought for
      // an upcoming read.
      if (prefetch && entry->prefetched_unread) continue;
      const uint64_t next_use = NextUse(outlook, name);
      // Nor a shard needed no later than the one it fetches (between two
      // reads, the shard a worker reads now is unpinned): that would trade
      // a read soon for one later, and download the shard again.
      if (prefetch && needed_at != ShardForecast::kNever &&
          next_use <= needed_at) {
        continue;
      }
      evictable.push_back(entry);
      candidates.push_back({next_use, idle_rank});
    }
    std::shared_ptr<Entry> victim;
    if (!evictable.empty()) victim = evictable[EvictionOrder(candidates)[0]];
    if (victim == nullptr) {
      if (deletions_in_flight_ == 0) return false;
      // Another thread's deletions will free room: wait for them.
      mu_.Await(absl::Condition(
          +[](int* n) { return *n == 0; }, &deletions_in_flight_));
      continue;
    }
    lru_.erase(victim->lru_position);
    entries_.erase(victim->name);
    if (victim->prefetched_unread) prefetched_unread_bytes_ -= victim->size;
    ++stats_.evictions;
    ++deletions_in_flight_;
    deleting_.insert(victim->name);
    // Its bytes still count until the file is gone.
    mu_.Unlock();
    ::unlink(PathOf(victim->name).c_str());
    mu_.Lock();
    disk_bytes_ -= victim->size;
    deleting_.erase(victim->name);
    --deletions_in_flight_;
  }
  return true;
}

absl::StatusOr<std::shared_ptr<ShardCache::Entry>> ShardCache::Acquire(
    const std::shared_ptr<ObjectStore>& store, const ObjectInfo& shard,
    bool prefetch, bool whole_object, const Outlook& outlook,
    bool* downloaded) {
  const std::string name = ShardFileName(shard);
  *downloaded = false;
  absl::MutexLock lock(&mu_);
  for (;;) {
    auto it = entries_.find(name);
    if (it != entries_.end()) {
      std::shared_ptr<Entry> entry = it->second;
      if (prefetch) return entry;  // cached or on its way: nothing to do
      ++entry->pins;
      if (!entry->ready) {
        ++stats_.misses;
        mu_.Await(absl::Condition(
            +[](Entry* e) { return e->ready || e->failed; }, entry.get()));
        if (entry->failed) {
          --entry->pins;
          return entry->status;
        }
      } else {
        ++stats_.hits;
      }
      lru_.splice(lru_.begin(), lru_, entry->lru_position);
      if (entry->prefetched_unread) {
        entry->prefetched_unread = false;
        prefetched_unread_bytes_ -= entry->size;
      }
      return entry;
    }
    if (stopping_ && prefetch) return nullptr;
    if (deleting_.contains(name)) {
      // Its old file is being deleted: admit it once that is done.
      mu_.Await(absl::Condition(
          +[](int* n) { return *n == 0; }, &deletions_in_flight_));
      continue;
    }
    if (shard.size > options_.disk_bytes) return nullptr;
    if (prefetch &&
        prefetched_unread_bytes_ + shard.size > options_.disk_bytes / 2) {
      return nullptr;
    }
    // A shard whose members are being fetched ahead by ranges is read so
    // while they are: downloading it whole as well would fetch them twice.
    if (!whole_object && ranges_ != nullptr && ranges_->Holds(name)) {
      ++(prefetch ? stats_.prefetches_declined : stats_.range_choices);
      return nullptr;
    }
    // A store that ignores Range can only be read whole.
    const std::optional<ShardFetch> fetch =
        whole_object ? std::nullopt : ChooseFetchFor(outlook, name);
    if (fetch == ShardFetch::kRanges) {
      ++(prefetch ? stats_.prefetches_declined : stats_.range_choices);
      return nullptr;
    }
    // A prefetch of a shard that its dataset's plans, reading now, do not
    // read within their forecast is declined too: downloading it whole
    // could fetch a shard they read little of; the read itself decides.
    if (prefetch && !whole_object && !fetch.has_value() &&
        ForecastReadsNone(outlook, name)) {
      ++stats_.prefetches_declined;
      return nullptr;
    }
    if (!MakeRoom(shard.size, prefetch, outlook,
                  prefetch ? NextUse(outlook, name) : ShardForecast::kNever)) {
      return nullptr;
    }
    if (fetch == ShardFetch::kWhole && !prefetch) ++stats_.whole_choices;
    // MakeRoom may have let go of the lock: look again.
    if (entries_.contains(name) || deleting_.contains(name) ||
        disk_bytes_ + shard.size > options_.disk_bytes) {
      continue;
    }
    break;
  }
  auto entry = std::make_shared<Entry>();
  entry->name = name;
  entry->size = shard.size;
  entry->pins = prefetch ? 0 : 1;
  // A prefetch counts against the half of the cache for shards fetched
  // ahead from its start: counted only once downloaded, several prefetch
  // threads could fill the cache with downloads no read may evict, and a
  // miss meanwhile would read its members by ranges and then see the shard
  // downloaded whole as well.
  entry->prefetched_unread = prefetch;
  if (prefetch) prefetched_unread_bytes_ += shard.size;
  entries_.emplace(name, entry);
  disk_bytes_ += shard.size;
  if (!prefetch) ++stats_.misses;

  mu_.Unlock();
  const absl::Time start = absl::Now();
  const absl::Status status =
      DownloadShard(*store, shard, PathOf(name), whole_object,
                    options_.chunk_bytes, options_.chunks_in_flight);
  const absl::Duration elapsed = absl::Now() - start;
  mu_.Lock();

  if (!status.ok()) {
    // DownloadShard() removed its temporary file.
    entry->failed = true;
    entry->status = status;
    entries_.erase(name);
    disk_bytes_ -= shard.size;
    if (entry->prefetched_unread) prefetched_unread_bytes_ -= shard.size;
    ++stats_.download_failures;
    return status;
  }
  entry->ready = true;
  lru_.push_front(name);
  entry->lru_position = lru_.begin();
  ++stats_.downloads;
  stats_.downloaded_bytes += shard.size;
  stats_.download_seconds += absl::ToDoubleSeconds(elapsed);
  *downloaded = true;
  if (observer_) {
    DownloadObserver observer = observer_;
    mu_.Unlock();
    observer(shard.size, elapsed);
    mu_.Lock();
  }
  return entry;
}

void ShardCache::Unpin(const std::shared_ptr<Entry>& entry) {
  absl::MutexLock lock(&mu_);
  --entry->pins;
}

absl::Status ShardCache::Read(const std::shared_ptr<ObjectStore>& store,
                              const ObjectInfo& shard, uint64_t offset,
                              uint64_t size, uint8_t* dest,
                              bool whole_object) {
  if (offset > shard.size || size > shard.size - offset) {
    return absl::OutOfRangeError(absl::StrCat(
        "bytes [", offset, ", ", offset + size, ") of '", shard.url,
        "' are beyond its ", shard.size, " bytes"));
  }
  const std::string name = ShardFileName(shard);
  const bool ram_tier = ShardRamTier::Holds(options_.ram_bytes, shard.size);
  if (ram_tier) {
    std::shared_ptr<const std::string> bytes;
    {
      absl::MutexLock lock(&mu_);
      bytes = ram_.Lookup(name);
      if (bytes != nullptr) {
        ++stats_.hits;
        ++stats_.ram_hits;
      }
    }
    if (bytes != nullptr) {
      if (size > 0) memcpy(dest, bytes->data() + offset, size);
      absl::MutexLock lock(&mu_);
      stats_.served_bytes += size;
      return absl::OkStatus();
    }
  }
  bool cached;
  {
    absl::MutexLock lock(&mu_);
    cached = entries_.contains(name);
  }
  if (!cached && ranges_ != nullptr) {
    // Fetched ahead because the shard is read by ranges: no request now.
    if (std::optional<absl::Status> taken =
            ranges_->Take(name, offset, size, dest)) {
      // A miss the model sent to ranges, as Acquire counts one, early.
      absl::MutexLock lock(&mu_);
      ++stats_.uncached_reads;
      ++stats_.range_choices;
      stats_.served_bytes += size;
      return *taken;
    }
  }
  // A miss asks the plans' forecast (not under the lock: it may be
  // rebuilt); a hit needs none.
  const Outlook outlook = cached ? Outlook() : TakeOutlook();
  bool downloaded = false;
  absl::StatusOr<std::shared_ptr<Entry>> entry =
      Acquire(store, shard, /*prefetch=*/false, whole_object, outlook,
              &downloaded);
  if (!entry.ok()) return entry.status();
  if (*entry == nullptr && whole_object) {
    uint64_t held = 0;
    {
      absl::MutexLock lock(&mu_);
      held = disk_bytes_;
    }
    return absl::ResourceExhaustedError(absl::StrCat(
        "'", shard.url, "' (", shard.size,
        " bytes) must be downloaded whole and the shard cache cannot hold "
        "it now (--cache-bytes=", options_.disk_bytes, ", ", held,
        " bytes held by shards in use); raise --cache-bytes to several "
        "shards' size"));
  }
  if (*entry == nullptr) {
    absl::Status status = store->ReadRange(shard, offset, size, dest);
    absl::MutexLock lock(&mu_);
    ++stats_.uncached_reads;
    if (status.ok()) {
      stats_.range_bytes += size;
      stats_.served_bytes += size;
    }
    return status;
  }
  std::string whole;
  absl::Status status = ReadShardFile(PathOf(name), shard, offset, size,
                                      dest, ram_tier ? &whole : nullptr);
  absl::MutexLock lock(&mu_);
  --(*entry)->pins;
  if (status.ok()) stats_.served_bytes += size;
  if (status.ok() && ram_tier) {
    ram_.Insert(name, std::make_shared<const std::string>(std::move(whole)));
  }
  return status;
}

void ShardCache::Prefetch(const std::shared_ptr<ObjectStore>& store,
                          const ObjectInfo& shard, bool whole_object) {
  if (options_.prefetch_threads <= 0) return;
  const std::string name = ShardFileName(shard);
  absl::MutexLock lock(&mu_);
  if (stopping_ || prefetch_queued_.contains(name)) return;
  if (auto it = entries_.find(name); it != entries_.end()) {
    // The batches ahead read it: it goes last. Otherwise a shard of the
    // shuffle's window, read now and then, ages behind the prefetches and
    // is evicted between two of its reads, then fetched again.
    if (it->second->ready) {
      lru_.splice(lru_.begin(), lru_, it->second->lru_position);
    }
    return;
  }
  if (shard.size > options_.disk_bytes / 2 ||
      prefetch_queue_.size() >= options_.max_queued_prefetches) {
    ++stats_.prefetches_dropped;
    return;
  }
  prefetch_queued_.insert(name);
  prefetch_queue_.push_back({store, shard, whole_object});
  ++stats_.prefetches;
}

void ShardCache::PrefetchLoop() {
  for (;;) {
    PrefetchTask task;
    bool queued;
    {
      absl::MutexLock lock(&mu_);
      queued = mu_.AwaitWithTimeout(
          absl::Condition(
              +[](ShardCache* c) ABSL_NO_THREAD_SAFETY_ANALYSIS {
                return c->stopping_ || !c->prefetch_queue_.empty();
              },
              this),
          options_.plan_interval);
      if (stopping_) return;
      if (queued) {
        task = std::move(prefetch_queue_.front());
        prefetch_queue_.pop_front();
      }
    }
    if (!queued) {
      // Nothing asked for: fetch ahead by the forecast, if anything is
      // worth it.
      if (forecasters_empty()) continue;
      const Outlook outlook = TakeOutlook();
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      std::optional<PrefetchTask> planned = PlanPrefetch(outlook);
      if (!planned.has_value()) continue;
      task = *std::move(planned);
    }
    bool downloaded = false;
    absl::StatusOr<std::shared_ptr<Entry>> entry =
        Acquire(task.store, task.shard, /*prefetch=*/true, task.whole_object,
                TakeOutlook(), &downloaded);
    absl::MutexLock lock(&mu_);
    prefetch_queued_.erase(ShardFileName(task.shard));
    if (entry.ok() && *entry == nullptr) ++stats_.prefetches_dropped;
  }
}

void ShardCache::PrefetchMembers(const std::shared_ptr<ObjectStore>& store,
                                 const ObjectInfo& shard,
                                 absl::Span<const MemberRange> members) {
  if (ranges_ == nullptr || members.empty()) return;
  // Asked now and again when each range's turn comes: a shard read whole
  // (most, with a cache that holds the plans' shards) costs the range
  // threads nothing.
  const std::string name = ShardFileName(shard);
  if (!ReadByRanges(shard, name)) return;
  ranges_->Fetch(store, shard, name, members);
}

bool ShardCache::ReadByRanges(const ObjectInfo& shard,
                              const std::string& name) const {
  {
    absl::MutexLock lock(&mu_);
    if (entries_.contains(name)) return false;
    if (shard.size > options_.disk_bytes) return true;
  }
  // Asked for every member fetched ahead: the last forecast, not a
  // rebuild, and the answer worked out once per forecast.
  const Outlook outlook = TakeOutlook(/*rebuild=*/false);
  absl::MutexLock lock(&mu_);
  if (entries_.contains(name)) return false;
  auto known = forecast_shards_.find(name);
  if (known == forecast_shards_.end()) return false;
  const auto& [forecaster, shard_number] = known->second;
  auto forecasted = outlook.find(forecaster);
  if (forecasted == outlook.end()) return false;
  RangesAnswers& answers = ranges_answers_[forecaster];
  if (answers.forecast != forecasted->second.forecast) {
    answers.forecast = forecasted->second.forecast;
    answers.ranges.clear();
  }
  auto [answer, added] = answers.ranges.try_emplace(shard_number, false);
  if (added) {
    answer->second = ChooseFetchFor(outlook, name, /*when_next_read=*/true) ==
                     ShardFetch::kRanges;
  }
  return answer->second;
}

}  // namespace batchd::server
