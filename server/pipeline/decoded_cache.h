// DecodedCache: capped decoded images (Pipeline.decoded_max_side, see
// server/decode/capped_image.h) kept for every plan and job of the daemon
// (--decoded-cache-bytes), so that jobs that differ only in seed or
// augmentation, and so cannot share batches, decode each file once per pass
// over the cache. A capped image is a pure function of the file and the cap,
// so a hit gives exactly the pixels a miss would: the cache never changes a
// batch's bytes.
//
// Least recently used first out; the bound holds at all times (an image
// larger than the whole cache is decoded and not kept). Concurrent misses
// of one key are coalesced: one decode, every caller gets its image (or its
// error; errors are not kept, so a failed read is tried again). Entries are
// immutable and shared: an evicted image stays valid for whoever holds it.
//
//   DecodedCache cache(256 << 20);
//   DecodedSample sample = cache.Get({dataset.name(), index, 448}, [&] {
//     return DecodeFromFile(index);
//   });
//
// Thread-safe; a decode runs without the lock.
#ifndef BATCHD_SERVER_PIPELINE_DECODED_CACHE_H_
#define BATCHD_SERVER_PIPELINE_DECODED_CACHE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <tuple>

#include "server/decode/capped_image.h"
#include "server/decode/decode_result.h"
#include "server/pipeline/lru_cache.h"

namespace batchd::server {

// A decoded sample: its image, or the error that stopped the decode.
struct DecodedSample {
  DecodeResult result;
  std::shared_ptr<const CappedImage> image;  // set exactly when result.ok()
};

// hits: served from the cache; misses: decoded; coalesced: waited for
// another caller's decode of the same key; bytes: charged (ChargeFor) now.
using DecodedCacheCounts = LruCacheCounts;

class DecodedCache {
 public:
  // (dataset name, sample index, decoded_max_side).
  using Key = std::tuple<std::string, uint64_t, uint32_t>;

  explicit DecodedCache(uint64_t capacity_bytes);

  // The image of `key` if it is cached (a hit), else nullptr (nothing
  // counted): lets a caller skip reading the file. Never blocks on a decode.
  std::shared_ptr<const CappedImage> Lookup(const Key& key);

  // The image of `key`: cached, being decoded by another caller (waits for
  // that decode), or decoded now with `decode`, which must return an image
  // exactly when its result is ok().
  DecodedSample Get(const Key& key,
                    const std::function<DecodedSample()>& decode);

  uint64_t capacity_bytes() const { return cache_.capacity_bytes(); }
  DecodedCacheCounts counts() const { return cache_.counts(); }

  // What an entry is charged: its pixels and a fixed overhead for the key
  // and the bookkeeping.
  static uint64_t ChargeFor(const Key& key, const CappedImage& image);

 private:
  // An image is charged ChargeFor; errors are not kept.
  LruCache<Key, DecodedSample> cache_;
};

}  // namespace batchd::server

#endif  // BATCHD_SERVER_PIPELINE_DECODED_CACHE_H_
