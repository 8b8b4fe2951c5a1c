// LruMasks: the mask cache's eviction. A full map drops its least recently used entry (a lookup
// counts as a use), keeps the others, and a replaced key keeps one entry.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "grammar/lru_masks.h"

namespace deepinfer::grammar {
namespace {

std::vector<uint64_t> mask_of(uint64_t value) { return {value, ~value}; }

bool holds(LruMasks& masks, const std::string& key, uint64_t value) {
  std::vector<uint64_t> out(2, 0);
  return masks.find(key, out) && out == mask_of(value);
}

TEST(LruMasks, AFullMapEvictsTheLeastRecentlyUsedEntryOnly) {
  LruMasks masks(3);
  masks.store("a", mask_of(1));
  masks.store("b", mask_of(2));
  masks.store("c", mask_of(3));
  EXPECT_TRUE(holds(masks, "a", 1));  // "b" is now the least recently used
  masks.store("d", mask_of(4));
  EXPECT_EQ(masks.size(), 3u);
  EXPECT_FALSE(holds(masks, "b", 2));
  EXPECT_TRUE(holds(masks, "a", 1));
  EXPECT_TRUE(holds(masks, "c", 3));
  EXPECT_TRUE(holds(masks, "d", 4));
  masks.store("e", mask_of(5));  // the order of use is now a, c, d: a goes
  EXPECT_FALSE(holds(masks, "a", 1));
  EXPECT_TRUE(holds(masks, "e", 5));
}

TEST(LruMasks, StoringAKeyAgainReplacesItsMaskAndRefreshesIt) {
  LruMasks masks(2);
  masks.store("a", mask_of(1));
  masks.store("b", mask_of(2));
  masks.store("a", mask_of(7));
  EXPECT_EQ(masks.size(), 2u);
  masks.store("c", mask_of(3));  // b was the least recently used
  EXPECT_TRUE(holds(masks, "a", 7));
  EXPECT_FALSE(holds(masks, "b", 2));
  EXPECT_TRUE(holds(masks, "c", 3));
}

TEST(LruMasks, AMaskOfAnotherSizeIsAMissAndAZeroCapacityKeepsNothing) {
  LruMasks masks(2);
  masks.store("a", mask_of(1));
  std::vector<uint64_t> wrong(3, 9);
  EXPECT_FALSE(masks.find("a", wrong));
  EXPECT_EQ(wrong, std::vector<uint64_t>(3, 9));
  LruMasks none(0);
  none.store("a", mask_of(1));
  EXPECT_EQ(none.size(), 0u);
  std::vector<uint64_t> out(2, 0);
  EXPECT_FALSE(none.find("a", out));
}

}  // namespace
}  // namespace deepinfer::grammar
