#include "engine/block_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace deepinfer::engine {
namespace {

void expect_counts(const BlockPool& pool, int64_t free, int64_t in_use, int64_t evictable) {
  EXPECT_EQ(pool.free_blocks(), free);
  EXPECT_EQ(pool.in_use_blocks(), in_use);
  EXPECT_EQ(pool.evictable_blocks(), evictable);
  EXPECT_EQ(pool.free_blocks() + pool.in_use_blocks() + pool.evictable_blocks(), pool.total_blocks());
}

TEST(BlockPool, BudgetMakesWholeBlocks) {
  const BlockPool pool(1000, 96);
  EXPECT_EQ(pool.total_blocks(), 10);
  EXPECT_EQ(pool.block_bytes(), 96);
  expect_counts(pool, 10, 0, 0);
}

TEST(BlockPool, RefusesBudgetsWithoutABlock) {
  EXPECT_THROW(BlockPool(95, 96), Error);
  EXPECT_THROW(BlockPool(1000, 0), Error);
  EXPECT_THROW(BlockPool(1000, -8), Error);
}

TEST(BlockPool, AllocatesEveryBlockThenReportsExhaustion) {
  BlockPool pool(4 * 16, 16);
  for (BlockId expected = 0; expected < 4; ++expected) EXPECT_EQ(pool.allocate(), expected);
  expect_counts(pool, 0, 4, 0);
  EXPECT_EQ(pool.allocate(), std::nullopt);
  for (BlockId block = 0; block < 4; ++block) pool.release(block);
  expect_counts(pool, 4, 0, 0);
  // The last freed block is the first reused.
  EXPECT_EQ(pool.allocate(), 3);
}

TEST(BlockPool, SharedBlockFreesOnLastRelease) {
  BlockPool pool(2 * 8, 8);
  const BlockId block = *pool.allocate();
  pool.retain(block);
  EXPECT_EQ(pool.ref_count(block), 2);
  pool.release(block);
  expect_counts(pool, 1, 1, 0);
  pool.release(block);
  expect_counts(pool, 2, 0, 0);
}

TEST(BlockPool, CachedBlockIsEvictableAtZeroAndFreedWhenUncached) {
  BlockPool pool(3 * 8, 8);
  const BlockId block = *pool.allocate();
  pool.mark_cached(block);
  pool.release(block);
  expect_counts(pool, 2, 0, 1);
  pool.retain(block);  // a prefix hit reads it again
  expect_counts(pool, 2, 1, 0);
  pool.release(block);
  pool.uncache(block);
  expect_counts(pool, 3, 0, 0);
  EXPECT_FALSE(pool.cached(block));
}

TEST(BlockPool, UncachingABlockInUseFreesItOnRelease) {
  BlockPool pool(8, 8);
  const BlockId block = *pool.allocate();
  pool.mark_cached(block);
  pool.uncache(block);
  expect_counts(pool, 0, 1, 0);
  pool.release(block);
  expect_counts(pool, 1, 0, 0);
}

TEST(BlockPool, RefusesMisuse) {
  BlockPool pool(2 * 8, 8);
  const BlockId block = *pool.allocate();
  EXPECT_THROW(pool.retain(1), Error);  // free
  EXPECT_THROW(pool.release(1), Error);
  EXPECT_THROW(pool.mark_cached(1), Error);
  EXPECT_THROW(pool.uncache(block), Error);  // not cached
  EXPECT_THROW(pool.retain(2), Error);       // outside
  EXPECT_THROW(pool.release(-1), Error);
  EXPECT_THROW((void)pool.payload(2), Error);
  pool.mark_cached(block);
  EXPECT_THROW(pool.mark_cached(block), Error);
  pool.release(block);
  EXPECT_THROW(pool.release(block), Error);  // double release of an evictable block
  pool.uncache(block);
  EXPECT_THROW(pool.release(block), Error);  // and of a free one
  expect_counts(pool, 2, 0, 0);
}

TEST(BlockPool, PayloadsAreDisjoint) {
  BlockPool pool(5 * 24, 24);
  for (int i = 0; i < 5; ++i) {
    const BlockId block = *pool.allocate();
    const auto payload = pool.payload(block);
    ASSERT_EQ(payload.size(), 24u);
    std::fill(payload.begin(), payload.end(), static_cast<std::byte>(block + 1));
  }
  for (BlockId block = 0; block < 5; ++block) {
    const auto payload = std::as_const(pool).payload(block);
    EXPECT_TRUE(std::all_of(payload.begin(), payload.end(), [&](std::byte b) { return b == static_cast<std::byte>(block + 1); }));
  }
}

}  // namespace
}  // namespace deepinfer::engine
