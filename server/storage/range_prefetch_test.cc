#include "server/storage/range_prefetch.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/storage/fake_object_store_test_util.h"
#include "testing/status_matchers.h"

namespace batchd::server {
namespace {

constexpr uint64_t kMemberBytes = 1000;
constexpr int kMembers = 32;
const char kUrl[] = "s3://bucket/shard-000.tar";
const char kName[] = "shard-000";

// A FakeObjectStore that also records the most reads in flight at once.
class ConcurrencyStore : public FakeObjectStore {
 public:
  absl::Status ReadRange(const ObjectInfo& object, uint64_t offset,
                         uint64_t size, uint8_t* dest) override {
    const int now = ++in_flight_;
    int seen = most_;
    while (now > seen && !most_.compare_exchange_weak(seen, now)) {
    }
    absl::Status status = FakeObjectStore::ReadRange(object, offset, size, dest);
    --in_flight_;
    return status;
  }
  int most_in_flight() const { return most_; }

 private:
  std::atomic<int> in_flight_{0};
  std::atomic<int> most_{0};
};

class RangePrefetchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = std::make_shared<ConcurrencyStore>();
    bytes_.resize(kMembers * kMemberBytes);
    for (size_t i = 0; i < bytes_.size(); ++i) {
      bytes_[i] = static_cast<char>(i * 7 + i / 251);
    }
    store_->Put(kUrl, bytes_);
    shard_ = *store_->Stat(kUrl);
  }

  static std::vector<MemberRange> Members(int first, int count) {
    std::vector<MemberRange> members;
    for (int i = first; i < first + count; ++i) {
      members.push_back({i * kMemberBytes, kMemberBytes});
    }
    return members;
  }

  // Waits until nothing is queued or being fetched.
  static void Settle(const RangePrefetch& ranges) {
    for (int i = 0; i < 2000 && ranges.stats().in_flight > 0; ++i) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    ASSERT_EQ(ranges.stats().in_flight, 0u);
  }

  std::string Take(RangePrefetch& ranges, int member,
                   std::optional<absl::Status>* result) {
    std::string got(kMemberBytes, '\0');
    *result = ranges.Take(kName, member * kMemberBytes, kMemberBytes,
                          reinterpret_cast<uint8_t*>(got.data()));
    return got;
  }

  std::shared_ptr<ConcurrencyStore> store_;
  std::string bytes_;
  ObjectInfo shard_;
};

// Each range is fetched once, many at a time, and read from memory.
TEST_F(RangePrefetchTest, RangesFetchedAheadAreReadWithoutAnotherRequest) {
  store_->set_read_latency(absl::Milliseconds(20));
  RangePrefetch ranges({.threads = 8, .max_bytes = kMembers * kMemberBytes});
  ranges.Fetch(store_, shard_, kName, Members(0, kMembers));
  // Asked again while queued or held: not fetched twice.
  ranges.Fetch(store_, shard_, kName, Members(0, 4));
  for (int i = 0; i < kMembers; ++i) {
    std::optional<absl::Status> result;
    const std::string got = Take(ranges, i, &result);
    ASSERT_TRUE(result.has_value()) << "member " << i;
    ASSERT_OK(*result);
    EXPECT_EQ(got, bytes_.substr(i * kMemberBytes, kMemberBytes));
  }
  EXPECT_EQ(store_->reads(), static_cast<uint64_t>(kMembers));
  // Eight threads on 20 ms reads: they overlap.
  EXPECT_GT(store_->most_in_flight(), 1);
  const RangePrefetchStats stats = ranges.stats();
  EXPECT_EQ(stats.queued, static_cast<uint64_t>(kMembers));
  EXPECT_EQ(stats.taken, static_cast<uint64_t>(kMembers));
  EXPECT_EQ(stats.fetched_bytes, kMembers * kMemberBytes);
  EXPECT_EQ(stats.held_bytes, 0u);
  // Taken means gone: a second read asks the store.
  std::optional<absl::Status> again;
  Take(ranges, 0, &again);
  EXPECT_FALSE(again.has_value());
}

// Beyond the bound, ranges are dropped; the held bytes never pass it.
TEST_F(RangePrefetchTest, RangesBeyondTheBoundAreDropped) {
  RangePrefetch ranges({.threads = 2, .max_bytes = 3 * kMemberBytes});
  ranges.Fetch(store_, shard_, kName, Members(0, 5));
  EXPECT_LE(ranges.stats().held_bytes, 3 * kMemberBytes);
  Settle(ranges);
  const RangePrefetchStats stats = ranges.stats();
  EXPECT_EQ(stats.queued, 3u);
  EXPECT_EQ(stats.dropped, 2u);
  EXPECT_EQ(stats.held_bytes, 3 * kMemberBytes);
  std::optional<absl::Status> dropped;
  Take(ranges, 4, &dropped);
  EXPECT_FALSE(dropped.has_value());
  EXPECT_EQ(store_->reads(), 3u);
}

// Ranges nobody took (a stream that ended) make room once they are stale,
// oldest first; until then they are kept and the new ones dropped.
TEST_F(RangePrefetchTest, StaleUnreadRangesMakeRoom) {
  RangePrefetch fresh({.threads = 1,
                       .max_bytes = 2 * kMemberBytes,
                       .unread_ttl = absl::Hours(1)});
  fresh.Fetch(store_, shard_, kName, Members(0, 2));
  Settle(fresh);
  fresh.Fetch(store_, shard_, kName, Members(2, 1));
  EXPECT_EQ(fresh.stats().dropped, 1u);
  EXPECT_EQ(fresh.stats().unread, 0u);

  RangePrefetch stale({.threads = 1,
                       .max_bytes = 2 * kMemberBytes,
                       .unread_ttl = absl::ZeroDuration()});
  stale.Fetch(store_, shard_, kName, Members(0, 2));
  Settle(stale);
  stale.Fetch(store_, shard_, kName, Members(2, 1));
  Settle(stale);
  EXPECT_EQ(stale.stats().unread, 1u);
  EXPECT_EQ(stale.stats().dropped, 0u);
  std::optional<absl::Status> oldest, newest;
  Take(stale, 0, &oldest);
  EXPECT_FALSE(oldest.has_value());  // let go
  const std::string got = Take(stale, 2, &newest);
  ASSERT_TRUE(newest.has_value());
  EXPECT_OK(*newest);
  EXPECT_EQ(got, bytes_.substr(2 * kMemberBytes, kMemberBytes));
}

// A failed fetch is not served: the read asks the store itself and gets
// the store's own error or bytes.
TEST_F(RangePrefetchTest, AFailedFetchLeavesTheReadToTheCaller) {
  store_->FailNextReads(1, absl::UnavailableError("store down"));
  RangePrefetch ranges({.threads = 1});
  ranges.Fetch(store_, shard_, kName, Members(0, 1));
  Settle(ranges);
  EXPECT_EQ(ranges.stats().failed, 1u);
  std::optional<absl::Status> result;
  Take(ranges, 0, &result);
  EXPECT_FALSE(result.has_value());
  EXPECT_EQ(ranges.stats().held_bytes, 0u);
}

// Ranges outside the shard, or empty, are not fetched: the read reports them.
TEST_F(RangePrefetchTest, RangesOutsideTheShardAreNotFetched) {
  RangePrefetch ranges({.threads = 1});
  ranges.Fetch(store_, shard_, kName,
               {{shard_.size - 10, 20}, {shard_.size + 1, 1}, {0, 0}});
  EXPECT_EQ(ranges.stats().queued, 0u);
  EXPECT_EQ(store_->reads(), 0u);
}

// Before each fetch, `wanted` is asked again (its shard may have been
// downloaded whole since): a range no longer wanted is not fetched, and its
// read asks the store itself.
TEST_F(RangePrefetchTest, ARangeNoLongerWantedIsNotFetched) {
  std::atomic<bool> wanted{false};
  RangePrefetch ranges({.threads = 1,
                        .wanted = [&](const ObjectInfo&, const std::string&) {
                          return wanted.load();
                        }});
  ranges.Fetch(store_, shard_, kName, Members(0, 2));
  Settle(ranges);
  EXPECT_EQ(ranges.stats().declined, 2u);
  EXPECT_EQ(ranges.stats().held_bytes, 0u);
  EXPECT_EQ(store_->reads(), 0u);
  std::optional<absl::Status> result;
  Take(ranges, 0, &result);
  EXPECT_FALSE(result.has_value());
  // Wanted again: fetched (a read mark is for ranges read, not declined).
  wanted = true;
  ranges.Fetch(store_, shard_, kName, Members(1, 1));
  Settle(ranges);
  const std::string got = Take(ranges, 1, &result);
  ASSERT_TRUE(result.has_value());
  EXPECT_OK(*result);
  EXPECT_EQ(got, bytes_.substr(kMemberBytes, kMemberBytes));
}

// A range read before its fetch was asked for is not fetched afterwards.
TEST_F(RangePrefetchTest, ARangeReadBeforeItsFetchIsNotFetched) {
  RangePrefetch ranges({.threads = 1});
  std::optional<absl::Status> result;
  Take(ranges, 3, &result);  // the read came first, and asked the store
  EXPECT_FALSE(result.has_value());
  ranges.Fetch(store_, shard_, kName, Members(3, 1));
  EXPECT_EQ(ranges.stats().late, 1u);
  EXPECT_EQ(ranges.stats().queued, 0u);
  Settle(ranges);
  EXPECT_EQ(store_->reads(), 0u);
}

// A read of a range still queued or in flight waits for it.
TEST_F(RangePrefetchTest, AReadWaitsForItsFetch) {
  store_->set_read_latency(absl::Milliseconds(20));
  RangePrefetch ranges({.threads = 1, .max_bytes = kMembers * kMemberBytes});
  ranges.Fetch(store_, shard_, kName, Members(0, 4));
  // The last queued: three fetches of one thread are before it.
  std::optional<absl::Status> result;
  const std::string got = Take(ranges, 3, &result);
  ASSERT_TRUE(result.has_value());
  EXPECT_OK(*result);
  EXPECT_EQ(got, bytes_.substr(3 * kMemberBytes, kMemberBytes));
  EXPECT_EQ(store_->reads_of(kUrl), 4u);
}

}  // namespace
}  // namespace batchd::server
