#include "server/pipeline/decoded_cache.h"

#include <optional>

namespace batchd::server {

DecodedCache::DecodedCache(uint64_t capacity_bytes)
    : cache_(
          capacity_bytes,
          /*charge=*/
          [](const Key& key, const DecodedSample& sample) {
            return ChargeFor(key, *sample.image);
          },
          /*keep=*/
          [](const DecodedSample& sample) {
            return sample.result.ok() && sample.image != nullptr;
          }) {}

uint64_t DecodedCache::ChargeFor(const Key& key, const CappedImage& image) {
  // The map node, the list node, the entry and the image's header: about
  // 256 bytes on a 64-bit build, plus the dataset name held twice.
  constexpr uint64_t kOverheadBytes = 256;
  return image.bytes() + 2 * std::get<0>(key).size() + kOverheadBytes;
}

std::shared_ptr<const CappedImage> DecodedCache::Lookup(const Key& key) {
  std::optional<DecodedSample> sample = cache_.Lookup(key);
  return sample.has_value() ? sample->image : nullptr;
}

DecodedSample DecodedCache::Get(const Key& key,
                                const std::function<DecodedSample()>& decode) {
  return cache_.Get(key, decode);
}

}  // namespace batchd::server
