#include "server/pipeline/decoded_cache.h"

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace batchd::server {
namespace {

// An image of `pixels` pixels (1 row) whose bytes are all `value`.
DecodedSample Image(int pixels, uint8_t value) {
  auto image = std::make_shared<CappedImage>();
  image->width = pixels;
  image->height = 1;
  image->rgb.assign(static_cast<size_t>(pixels) * 3, value);
  return {DecodeResult(), std::move(image)};
}

uint64_t Charge(int pixels) {
  return DecodedCache::ChargeFor({"d", 0, 0}, *Image(pixels, 0).image);
}

TEST(DecodedCacheTest, SecondGetIsAHitWithTheSameImage) {
  DecodedCache cache(10 * Charge(100));
  int decodes = 0;
  auto decode = [&] {
    ++decodes;
    return Image(100, 7);
  };
  DecodedSample first = cache.Get({"d", 3, 64}, decode);
  DecodedSample second = cache.Get({"d", 3, 64}, decode);
  ASSERT_TRUE(second.result.ok());
  EXPECT_EQ(decodes, 1);
  EXPECT_EQ(second.image, first.image);  // the same immutable image
  EXPECT_EQ(cache.Lookup({"d", 3, 64}), first.image);
  // Another cap or dataset is another image.
  EXPECT_EQ(cache.Lookup({"d", 3, 65}), nullptr);
  EXPECT_EQ(cache.Lookup({"e", 3, 64}), nullptr);
  const DecodedCacheCounts counts = cache.counts();
  EXPECT_EQ(counts.misses, 1u);
  EXPECT_EQ(counts.hits, 2u);
  EXPECT_EQ(counts.bytes, Charge(100));
}

TEST(DecodedCacheTest, BoundHoldsAndLeastRecentlyUsedGoesFirst) {
  DecodedCache cache(3 * Charge(100));
  for (uint64_t i = 0; i < 3; ++i) {
    cache.Get({"d", i, 64}, [] { return Image(100, 1); });
  }
  // 0 used again: 1 is now the oldest.
  ASSERT_NE(cache.Lookup({"d", 0, 64}), nullptr);
  cache.Get({"d", 3, 64}, [] { return Image(100, 1); });
  EXPECT_EQ(cache.Lookup({"d", 1, 64}), nullptr);
  EXPECT_NE(cache.Lookup({"d", 0, 64}), nullptr);
  EXPECT_NE(cache.Lookup({"d", 2, 64}), nullptr);
  EXPECT_NE(cache.Lookup({"d", 3, 64}), nullptr);
  EXPECT_EQ(cache.counts().evictions, 1u);
  // Many more than fit: the bound holds after every insert.
  for (uint64_t i = 10; i < 50; ++i) {
    cache.Get({"d", i, 64}, [] { return Image(100, 1); });
    EXPECT_LE(cache.counts().bytes, cache.capacity_bytes());
  }
  EXPECT_EQ(cache.counts().evictions, 41u);
}

TEST(DecodedCacheTest, EvictedImageStaysValidForItsHolder) {
  DecodedCache cache(Charge(100));
  std::shared_ptr<const CappedImage> held =
      cache.Get({"d", 0, 64}, [] { return Image(100, 9); }).image;
  cache.Get({"d", 1, 64}, [] { return Image(100, 1); });
  EXPECT_EQ(cache.Lookup({"d", 0, 64}), nullptr);
  ASSERT_NE(held, nullptr);
  EXPECT_EQ(held->rgb, std::vector<uint8_t>(300, 9));
}

TEST(DecodedCacheTest, ConcurrentMissesOfOneKeyDecodeOnce) {
  DecodedCache cache(10 * Charge(100));
  std::atomic<int> decodes{0};
  absl::Notification release;
  auto slow_decode = [&] {
    ++decodes;
    release.WaitForNotification();  // the others arrive meanwhile
    return Image(100, 5);
  };
  std::vector<std::thread> threads;
  std::vector<std::shared_ptr<const CappedImage>> got(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back(
        [&, t] { got[t] = cache.Get({"d", 7, 64}, slow_decode).image; });
  }
  while (cache.counts().coalesced < 3) absl::SleepFor(absl::Milliseconds(1));
  release.Notify();
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(decodes.load(), 1);
  for (const auto& image : got) {
    ASSERT_NE(image, nullptr);
    EXPECT_EQ(image, got[0]);
  }
}

// Many threads over a key space larger than the cache: every image is the
// one its key decodes to, and the bound holds (also run under TSan).
TEST(DecodedCacheTest, ConcurrentUseKeepsImagesAndBound) {
  DecodedCache cache(8 * Charge(16));
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 500; ++i) {
        const uint64_t index = static_cast<uint64_t>((i * 7 + t) % 20);
        std::shared_ptr<const CappedImage> image =
            cache.Lookup({"d", index, 64});
        if (image == nullptr) {
          image = cache.Get({"d", index, 64}, [&] {
                         return Image(16, static_cast<uint8_t>(index));
                       }).image;
        }
        if (image == nullptr || image->rgb[0] != index) ++wrong;
        if (cache.counts().bytes > cache.capacity_bytes()) ++wrong;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
}

// Errors reach every waiter and are not kept; too-large images are decoded
// and not kept.
TEST(DecodedCacheTest, ErrorsAndOversizedImagesAreNotKept) {
  DecodedCache cache(Charge(100));
  int decodes = 0;
  auto corrupt = [&] {
    ++decodes;
    DecodedSample sample;
    sample.result.error = SampleError::kCorrupt;
    sample.result.detail = "bad Huffman code";
    return sample;
  };
  EXPECT_EQ(cache.Get({"d", 1, 64}, corrupt).result.error,
            SampleError::kCorrupt);
  EXPECT_EQ(cache.Get({"d", 1, 64}, corrupt).result.error,
            SampleError::kCorrupt);
  EXPECT_EQ(decodes, 2);
  DecodedSample big = cache.Get({"d", 2, 64}, [] { return Image(1000, 3); });
  ASSERT_NE(big.image, nullptr);
  EXPECT_EQ(cache.counts().bytes, 0u);
  EXPECT_EQ(cache.Lookup({"d", 2, 64}), nullptr);
}

}  // namespace
}  // namespace batchd::server
