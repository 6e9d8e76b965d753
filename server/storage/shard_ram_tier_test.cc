#include "server/storage/shard_ram_tier.h"

#include <memory>
#include <string>

#include "gtest/gtest.h"

namespace batchd::server {
namespace {

std::shared_ptr<const std::string> Bytes(size_t n, char c) {
  return std::make_shared<const std::string>(n, c);
}

TEST(ShardRamTierTest, HoldsQuarterSizedShardsUnderItsBound) {
  ShardRamTier tier(/*capacity_bytes=*/400);
  EXPECT_TRUE(ShardRamTier::Holds(400, 100));
  EXPECT_FALSE(ShardRamTier::Holds(400, 101));
  EXPECT_FALSE(ShardRamTier::Holds(0, 1));

  tier.Insert("a", Bytes(100, 'a'));
  tier.Insert("b", Bytes(100, 'b'));
  tier.Insert("c", Bytes(100, 'c'));
  tier.Insert("d", Bytes(100, 'd'));
  EXPECT_EQ(tier.bytes(), 400u);
  // "a" used again: "b" is now the least recently used, and goes first.
  ASSERT_NE(tier.Lookup("a"), nullptr);
  tier.Insert("e", Bytes(100, 'e'));
  EXPECT_EQ(tier.bytes(), 400u);
  EXPECT_EQ(tier.Lookup("b"), nullptr);
  EXPECT_EQ(*tier.Lookup("a"), std::string(100, 'a'));
  EXPECT_EQ(*tier.Lookup("e"), std::string(100, 'e'));

  // Held already: kept as it was. Larger than the bound: not kept, and
  // nothing is dropped for it.
  tier.Insert("e", Bytes(50, 'x'));
  EXPECT_EQ(*tier.Lookup("e"), std::string(100, 'e'));
  tier.Insert("huge", Bytes(401, 'h'));
  EXPECT_EQ(tier.Lookup("huge"), nullptr);
  EXPECT_EQ(tier.bytes(), 400u);
  // Room for 250 bytes drops three shards.
  tier.Insert("f", Bytes(250, 'f'));
  EXPECT_LE(tier.bytes(), 400u);
  EXPECT_NE(tier.Lookup("f"), nullptr);
}

}  // namespace
}  // namespace batchd::server
