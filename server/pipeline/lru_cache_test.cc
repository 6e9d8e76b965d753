#include "server/pipeline/lru_cache.h"

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace batchd::server {
namespace {

// Values are strings charged their length; errors are not kept.
using Value = absl::StatusOr<std::string>;
using Cache = LruCache<std::string, Value>;

Cache MakeCache(uint64_t capacity_bytes) {
  return Cache(
      capacity_bytes,
      /*charge=*/[](const std::string&, const Value& v) { return v->size(); },
      /*keep=*/[](const Value& v) { return v.ok(); });
}

// Gets `key`, loading `size` copies of its first letter on a miss; counts
// the loads in `loads`. Returns the value.
std::string GetSized(Cache& cache, const std::string& key, size_t size,
                     std::atomic<int>* loads) {
  const Value value = cache.Get(key, [&]() -> Value {
    ++*loads;
    return std::string(size, key[0]);
  });
  return value.ok() ? *value : value.status().ToString();
}

// Waits until `cache` has counted `coalesced` callers waiting for a load.
void AwaitCoalesced(const Cache& cache, uint64_t coalesced) {
  while (cache.counts().coalesced < coalesced) {
    absl::SleepFor(absl::Milliseconds(1));
  }
}

TEST(LruCacheTest, SecondGetIsAHitWithTheSameValue) {
  Cache cache = MakeCache(100);
  std::atomic<int> loads{0};
  EXPECT_EQ(GetSized(cache, "a", 10, &loads), std::string(10, 'a'));
  EXPECT_EQ(GetSized(cache, "a", 10, &loads), std::string(10, 'a'));
  EXPECT_EQ(loads, 1);
  const LruCacheCounts counts = cache.counts();
  EXPECT_EQ(counts.hits, 1u);
  EXPECT_EQ(counts.misses, 1u);
  EXPECT_EQ(counts.coalesced, 0u);
  EXPECT_EQ(counts.evictions, 0u);
  EXPECT_EQ(counts.bytes, 10u);
}

TEST(LruCacheTest, LeastRecentlyUsedGoesFirst) {
  Cache cache = MakeCache(30);
  std::atomic<int> loads{0};
  GetSized(cache, "a", 10, &loads);
  GetSized(cache, "b", 10, &loads);
  GetSized(cache, "c", 10, &loads);
  GetSized(cache, "a", 10, &loads);            // a is now the newest
  ASSERT_TRUE(cache.Lookup("b").has_value());  // so is b, then: c, a, b
  GetSized(cache, "d", 10, &loads);            // evicts c
  EXPECT_FALSE(cache.Lookup("c").has_value());
  EXPECT_TRUE(cache.Lookup("a").has_value());
  GetSized(cache, "e", 20, &loads);  // evicts b, then d: a is newer
  EXPECT_FALSE(cache.Lookup("b").has_value());
  EXPECT_FALSE(cache.Lookup("d").has_value());
  EXPECT_TRUE(cache.Lookup("a").has_value());
  EXPECT_TRUE(cache.Lookup("e").has_value());
  EXPECT_EQ(loads, 5);
  EXPECT_EQ(cache.counts().evictions, 3u);
  EXPECT_EQ(cache.counts().bytes, 30u);
}

TEST(LruCacheTest, LookupCountsOnlyHitsAndNeverLoads) {
  Cache cache = MakeCache(100);
  EXPECT_FALSE(cache.Lookup("a").has_value());
  std::atomic<int> loads{0};
  GetSized(cache, "a", 10, &loads);
  const std::optional<Value> hit = cache.Lookup("a");
  ASSERT_TRUE(hit.has_value() && hit->ok());
  EXPECT_EQ(**hit, std::string(10, 'a'));
  const LruCacheCounts counts = cache.counts();
  EXPECT_EQ(counts.hits, 1u);
  EXPECT_EQ(counts.misses, 1u);
  EXPECT_EQ(loads, 1);
}

TEST(LruCacheTest, LookupDoesNotWaitForALoad) {
  Cache cache = MakeCache(100);
  absl::Notification loading, release;
  std::thread loader([&] {
    auto slow_load = [&]() -> Value {
      loading.Notify();
      release.WaitForNotification();
      return std::string("aaa");
    };
    EXPECT_TRUE(cache.Get("a", slow_load).ok());
  });
  loading.WaitForNotification();
  EXPECT_FALSE(cache.Lookup("a").has_value());
  release.Notify();
  loader.join();
  EXPECT_TRUE(cache.Lookup("a").has_value());
  EXPECT_EQ(cache.counts().hits, 1u);
}

TEST(LruCacheTest, BoundHoldsAfterEveryGet) {
  Cache cache = MakeCache(100);
  std::atomic<int> loads{0};
  for (int pass = 0; pass < 3; ++pass) {
    for (int i = 0; i < 26; ++i) {
      const std::string key(1, static_cast<char>('a' + i));
      const size_t size = 5 + (i * 7) % 40;
      EXPECT_EQ(GetSized(cache, key, size, &loads), std::string(size, key[0]));
      EXPECT_LE(cache.counts().bytes, 100u);
    }
  }
  EXPECT_EQ(cache.counts().misses, static_cast<uint64_t>(loads.load()));
}

// Several threads load and evict at once while another samples the counts:
// the charge held never exceeds the capacity, every caller gets its key's
// value, and what is held at the end is exactly what the counts say.
TEST(LruCacheTest, BoundHoldsUnderConcurrentLoads) {
  constexpr uint64_t kCapacity = 1000;
  constexpr int kThreads = 6;
  constexpr int kKeys = 40;
  constexpr int kGetsPerThread = 2000;
  Cache cache = MakeCache(kCapacity);
  auto size_of = [](int key) { return size_t{10} + (key * 37) % 190; };
  std::atomic<bool> done{false};
  std::atomic<uint64_t> most_held{0};
  std::thread watcher([&] {
    while (!done.load()) {
      const uint64_t held = cache.counts().bytes;
      if (held > most_held.load()) most_held.store(held);
    }
  });
  std::atomic<int> loads{0};
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kGetsPerThread; ++i) {
        const int key = (i * (t + 3) + t) % kKeys;
        const std::string name = absl::StrCat(key);
        const Value value = cache.Get(name, [&]() -> Value {
          ++loads;
          std::this_thread::yield();  // lets the others interleave
          return std::string(size_of(key), name[0]);
        });
        if (!value.ok() || *value != std::string(size_of(key), name[0])) {
          ++wrong;
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  done.store(true);
  watcher.join();

  EXPECT_EQ(wrong, 0);
  EXPECT_LE(most_held.load(), kCapacity);
  const LruCacheCounts counts = cache.counts();
  EXPECT_EQ(counts.misses, static_cast<uint64_t>(loads.load()));
  EXPECT_EQ(counts.hits + counts.misses + counts.coalesced,
            uint64_t{kThreads} * kGetsPerThread);
  EXPECT_GT(counts.evictions, 0u);
  uint64_t held = 0;
  for (int key = 0; key < kKeys; ++key) {
    if (cache.Lookup(absl::StrCat(key)).has_value()) held += size_of(key);
  }
  EXPECT_EQ(held, counts.bytes);
}

TEST(LruCacheTest, ConcurrentMissesOfOneKeyLoadOnce) {
  constexpr int kCallers = 8;
  Cache cache = MakeCache(100);
  std::atomic<int> loads{0};
  absl::Notification release;
  std::vector<Value> got(kCallers);
  std::vector<std::thread> threads;
  for (int t = 0; t < kCallers; ++t) {
    threads.emplace_back([&, t] {
      got[t] = cache.Get("k", [&]() -> Value {
        ++loads;
        release.WaitForNotification();  // the others arrive meanwhile
        return std::string("value");
      });
    });
  }
  AwaitCoalesced(cache, kCallers - 1);
  release.Notify();
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(loads, 1);
  for (const Value& value : got) {
    ASSERT_TRUE(value.ok());
    EXPECT_EQ(*value, "value");
  }
  const LruCacheCounts counts = cache.counts();
  EXPECT_EQ(counts.misses, 1u);
  EXPECT_EQ(counts.coalesced, uint64_t{kCallers - 1});
  EXPECT_EQ(counts.hits, 0u);
  EXPECT_EQ(counts.bytes, 5u);
}

TEST(LruCacheTest, ErrorsAreNotKeptAndReachEveryWaiter) {
  Cache cache = MakeCache(100);
  int loads = 0;
  auto failing = [&]() -> Value {
    ++loads;
    return absl::UnavailableError("disk on fire");
  };
  EXPECT_EQ(cache.Get("k", failing).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_FALSE(cache.Lookup("k").has_value());
  EXPECT_EQ(cache.Get("k", failing).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(loads, 2);  // the error was not kept: loaded again

  // Callers waiting for a load that fails get its error.
  absl::Notification release;
  Value waiter_got;
  std::thread loader([&] {
    auto slow_failure = [&]() -> Value {
      release.WaitForNotification();
      return absl::NotFoundError("gone");
    };
    EXPECT_EQ(cache.Get("w", slow_failure).status().code(),
              absl::StatusCode::kNotFound);
  });
  std::thread waiter([&] {
    // Only once the loader holds the key.
    while (cache.counts().misses < 3) absl::SleepFor(absl::Milliseconds(1));
    waiter_got = cache.Get("w", [&]() -> Value { return std::string("x"); });
  });
  AwaitCoalesced(cache, 1);
  release.Notify();
  loader.join();
  waiter.join();
  EXPECT_EQ(waiter_got.status().code(), absl::StatusCode::kNotFound);

  // Once it loads, it is kept.
  const Value ok = cache.Get("k", [] { return Value(std::string("fine")); });
  ASSERT_TRUE(ok.ok());
  EXPECT_TRUE(cache.Lookup("k").has_value());
  const LruCacheCounts counts = cache.counts();
  EXPECT_EQ(counts.misses, 4u);
  EXPECT_EQ(counts.bytes, 4u);
}

TEST(LruCacheTest, ValueLargerThanTheCacheIsReturnedNotKept) {
  Cache cache = MakeCache(100);
  std::atomic<int> loads{0};
  EXPECT_EQ(GetSized(cache, "a", 60, &loads).size(), 60u);
  EXPECT_EQ(GetSized(cache, "b", 101, &loads), std::string(101, 'b'));
  EXPECT_FALSE(cache.Lookup("b").has_value());
  // Nothing was evicted to make room for it.
  EXPECT_TRUE(cache.Lookup("a").has_value());
  EXPECT_EQ(cache.counts().evictions, 0u);
  EXPECT_EQ(cache.counts().bytes, 60u);
  EXPECT_EQ(GetSized(cache, "b", 101, &loads).size(), 101u);
  EXPECT_EQ(loads, 3);  // loaded again
  // Exactly the capacity is kept.
  EXPECT_EQ(GetSized(cache, "c", 100, &loads).size(), 100u);
  EXPECT_TRUE(cache.Lookup("c").has_value());
  EXPECT_EQ(cache.counts().bytes, 100u);
  EXPECT_EQ(cache.counts().evictions, 1u);
}

}  // namespace
}  // namespace batchd::server
