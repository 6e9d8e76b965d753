// LruCache: a bounded, single-flight, least-recently-used cache of `Value`s
// by `Key`, the one cache behind ReadCache (encoded bytes) and DecodedCache
// (decoded images). The caller says what a value costs (`charge`, in bytes)
// and which values are not kept (`keep` false: errors).
//
// - The bound holds at all times: the total charge of kept values never
//   exceeds `capacity_bytes` (a value charged more than the whole capacity
//   is returned and not kept).
// - Concurrent misses of one key are coalesced: one load, every caller gets
//   its value (kept or not).
// - A value that is not kept (an error) is loaded again next time.
//
//   using Text = absl::StatusOr<std::string>;
//   LruCache<std::string, Text> cache(
//       /*capacity_bytes=*/1 << 20,
//       /*charge=*/[](const std::string&, const Text& t) { return t->size(); },
//       /*keep=*/[](const Text& t) { return t.ok(); });
//   Text text = cache.Get(path, [&] { return ReadText(path); });
//
// Thread-safe; a load runs without the lock. `Key` is ordered (operator<);
// `Value` is default-constructible and handed out by copy, so it should be
// cheap to copy (shared bytes, a shared_ptr).
#ifndef BATCHD_SERVER_PIPELINE_LRU_CACHE_H_
#define BATCHD_SERVER_PIPELINE_LRU_CACHE_H_

#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"

namespace batchd::server {

struct LruCacheCounts {
  uint64_t hits = 0;       // served from the cache
  uint64_t misses = 0;     // loaded
  uint64_t coalesced = 0;  // waited for another caller's load of the same key
  uint64_t evictions = 0;
  uint64_t bytes = 0;  // charged by the values held now
};

template <typename Key, typename Value>
class LruCache {
 public:
  // What `value` of `key` is charged against the capacity; called only for
  // a value `keep` accepts.
  using ChargeFn = std::function<uint64_t(const Key& key, const Value& value)>;
  // Whether a loaded `value` may be kept (false for errors).
  using KeepFn = std::function<bool(const Value& value)>;

  // REQUIRES: `charge` and `keep` are thread-safe and do not use the cache.
  LruCache(uint64_t capacity_bytes, ChargeFn charge, KeepFn keep)
      : capacity_bytes_(capacity_bytes),
        charge_(std::move(charge)),
        keep_(std::move(keep)) {}

  LruCache(const LruCache&) = delete;
  LruCache& operator=(const LruCache&) = delete;

  // The value of `key`: cached (a hit), being loaded by another caller
  // (waits for that load: coalesced), or loaded now with `load` (a miss).
  // Blocks for as long as the load it runs or waits for.
  Value Get(const Key& key, absl::FunctionRef<Value()> load)
      ABSL_LOCKS_EXCLUDED(mu_) {
    std::shared_ptr<Entry> entry;
    {
      absl::MutexLock lock(&mu_);
      auto [it, inserted] = entries_.try_emplace(key);
      if (!inserted) {
        entry = it->second;
        if (!entry->loading) return HitLocked(it);
        ++counts_.coalesced;
        mu_.Await(absl::Condition(
            +[](Entry* e) { return !e->loading; }, entry.get()));
        return entry->value;
      }
      it->second = entry = std::make_shared<Entry>();
      ++counts_.misses;
    }
    Value value = load();
    const bool keep = keep_(value);
    const uint64_t charge = keep ? charge_(key, value) : 0;
    absl::MutexLock lock(&mu_);
    entry->value = value;
    entry->loading = false;  // wakes the waiters
    auto it = entries_.find(key);
    if (keep && charge <= capacity_bytes_) {
      while (counts_.bytes + charge > capacity_bytes_) EvictOldestLocked();
      entry->charge = charge;
      entry->lru = lru_.insert(lru_.end(), it);
      counts_.bytes += charge;
    } else {
      // Not kept (an error: the next Get loads again; or larger than the
      // whole cache); the waiters still get it.
      entries_.erase(it);
    }
    return value;
  }

  // The value of `key` if it is cached (a hit, and now the most recently
  // used), else nullopt (nothing counted). Never blocks on a load.
  std::optional<Value> Lookup(const Key& key) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(key);
    if (it == entries_.end() || it->second->loading) return std::nullopt;
    return HitLocked(it);
  }

  uint64_t capacity_bytes() const { return capacity_bytes_; }

  LruCacheCounts counts() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return counts_;
  }

 private:
  struct Entry;
  using Entries = std::map<Key, std::shared_ptr<Entry>>;

  // Shared with the callers waiting for its load, so that erasing it from
  // `entries_` never pulls it from under them. Written under `mu_`.
  struct Entry {
    bool loading = true;  // a caller is loading it; the others wait
    Value value;          // once loaded
    uint64_t charge = 0;  // once kept
    typename std::list<typename Entries::iterator>::iterator lru;  // kept
  };

  // Counts a hit on the kept entry `it`, makes it the most recently used
  // and returns its value.
  Value HitLocked(typename Entries::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    ++counts_.hits;
    lru_.splice(lru_.end(), lru_, it->second->lru);
    return it->second->value;
  }

  // REQUIRES: `lru_` is not empty.
  void EvictOldestLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const typename Entries::iterator oldest = lru_.front();
    counts_.bytes -= oldest->second->charge;
    lru_.pop_front();
    entries_.erase(oldest);
    ++counts_.evictions;
  }

  // Constant after construction.
  const uint64_t capacity_bytes_;
  const ChargeFn charge_;
  const KeepFn keep_;

  mutable absl::Mutex mu_;
  // Kept entries and entries being loaded.
  Entries entries_ ABSL_GUARDED_BY(mu_);
  // The kept entries, least recently used first. Their charges sum to
  // counts_.bytes <= capacity_bytes_.
  std::list<typename Entries::iterator> lru_ ABSL_GUARDED_BY(mu_);
  LruCacheCounts counts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace batchd::server

#endif  // BATCHD_SERVER_PIPELINE_LRU_CACHE_H_
