#include "server/storage/range_prefetch.h"

#include <pthread.h>

#include <cstring>
#include <utility>

namespace batchd::server {

RangePrefetch::RangePrefetch(RangePrefetchOptions options)
    : options_(std::move(options)) {
  for (int i = 0; i < options_.threads; ++i) {
    threads_.emplace_back([this] {
      pthread_setname_np(pthread_self(), "range-prefetch");
      FetchLoop();
    });
  }
}

RangePrefetch::~RangePrefetch() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    for (const Key& key : queue_) Erase(ranges_.find(key));
    queue_.clear();
  }
  for (std::thread& thread : threads_) thread.join();
}

void RangePrefetch::Fetch(const std::shared_ptr<ObjectStore>& store,
                          const ObjectInfo& shard, const std::string& name,
                          absl::Span<const MemberRange> members) {
  if (options_.threads <= 0) return;
  const absl::Time now = absl::Now();
  absl::MutexLock lock(&mu_);
  if (stopping_) return;
  for (const MemberRange& member : members) {
    if (member.size == 0 || member.offset > shard.size ||
        member.size > shard.size - member.offset) {
      continue;  // the read itself says what is wrong
    }
    Key key(name, member.offset, member.size);
    if (ranges_.contains(key)) continue;
    if (auto mark = read_marks_.find(key);
        mark != read_marks_.end() && now - mark->second < kReadMarkTtl) {
      ++stats_.late;
      continue;
    }
    if (!MakeRoom(member.size, now)) {
      ++stats_.dropped;
      continue;
    }
    auto range = std::make_shared<Range>();
    range->store = store;
    range->shard = shard;
    ranges_.emplace(key, std::move(range));
    ++ranges_by_shard_[name];
    queue_.push_back(std::move(key));
    stats_.held_bytes += member.size;
    ++stats_.queued;
    ++stats_.in_flight;
  }
}

bool RangePrefetch::MakeRoom(uint64_t bytes, absl::Time now) {
  while (stats_.held_bytes + bytes > options_.max_bytes) {
    if (fetched_.empty()) return false;
    auto oldest = fetched_.begin();
    auto it = ranges_.find(oldest->second);
    if (now - it->second->fetched < options_.unread_ttl) return false;
    ++stats_.unread;
    Erase(it);
    fetched_.erase(oldest);
  }
  return true;
}

std::optional<absl::Status> RangePrefetch::Take(const std::string& name,
                                                uint64_t offset, uint64_t size,
                                                uint8_t* dest) {
  std::shared_ptr<Range> range;
  {
    absl::MutexLock lock(&mu_);
    Key key(name, offset, size);
    auto it = ranges_.find(key);
    if (it == ranges_.end()) {
      // Read now, without a fetch ahead: a Fetch arriving late skips it.
      if (options_.threads > 0 &&
          read_marks_.insert_or_assign(key, absl::Now()).second) {
        read_mark_order_.push_back(std::move(key));
        if (read_mark_order_.size() > kMaxReadMarks) {
          read_marks_.erase(read_mark_order_.front());
          read_mark_order_.pop_front();
        }
      }
      return std::nullopt;
    }
    range = it->second;
    std::pair<RangePrefetch*, Range*> waiting(this, range.get());
    mu_.Await(absl::Condition(
        +[](std::pair<RangePrefetch*, Range*>* w)
             ABSL_NO_THREAD_SAFETY_ANALYSIS {
               return w->second->done || w->first->stopping_;
             },
        &waiting));
    if (!range->done) return std::nullopt;  // stopping: queued, never fetched
    // Another Take may have let it go while this one waited.
    it = ranges_.find(key);
    if (it == ranges_.end() || it->second != range) return std::nullopt;
    Erase(it);
    fetched_.erase(range->fetch_number);
    if (!range->ok) return std::nullopt;
    ++stats_.taken;
  }
  // Taken out of the table: no other thread touches the bytes now.
  std::memcpy(dest, range->bytes.get(), size);
  return absl::OkStatus();
}

void RangePrefetch::FetchLoop() {
  for (;;) {
    Key key;
    std::shared_ptr<Range> range;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](RangePrefetch* r) ABSL_NO_THREAD_SAFETY_ANALYSIS {
            return r->stopping_ || !r->queue_.empty();
          },
          this));
      if (stopping_) return;
      key = std::move(queue_.front());
      queue_.pop_front();
      range = ranges_.at(key);
    }
    const uint64_t offset = std::get<1>(key);
    const uint64_t size = std::get<2>(key);
    if (options_.wanted &&
        !options_.wanted(range->shard, std::get<0>(key))) {
      absl::MutexLock lock(&mu_);
      range->done = true;  // a Take waiting on it finds it gone
      Erase(ranges_.find(key));
      --stats_.in_flight;
      ++stats_.declined;
      continue;
    }
    range->bytes.reset(new uint8_t[size]);
    const absl::Status status =
        range->store->ReadRange(range->shard, offset, size, range->bytes.get());
    absl::MutexLock lock(&mu_);
    range->done = true;
    range->ok = status.ok();
    range->fetched = absl::Now();
    range->fetch_number = ++fetches_done_;
    --stats_.in_flight;
    if (status.ok()) {
      stats_.fetched_bytes += size;
    } else {
      ++stats_.failed;
    }
    fetched_.emplace(range->fetch_number, std::move(key));
  }
}

void RangePrefetch::Erase(
    absl::flat_hash_map<Key, std::shared_ptr<Range>>::iterator it) {
  stats_.held_bytes -= std::get<2>(it->first);
  auto count = ranges_by_shard_.find(std::get<0>(it->first));
  if (--count->second == 0) ranges_by_shard_.erase(count);
  ranges_.erase(it);
}

bool RangePrefetch::Holds(const std::string& name) const {
  absl::MutexLock lock(&mu_);
  return ranges_by_shard_.contains(name);
}

RangePrefetchStats RangePrefetch::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace batchd::server
