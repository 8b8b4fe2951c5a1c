#include "engine/snapshot_store.h"

#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"

namespace deepinfer::engine {
namespace {

std::vector<std::byte> pattern(std::size_t size, int seed) {
  std::vector<std::byte> bytes(size);
  for (std::size_t i = 0; i < size; ++i) bytes[i] = static_cast<std::byte>((i * 31 + static_cast<std::size_t>(seed)) & 0xff);
  return bytes;
}

TEST(SnapshotStore, SavesAcrossBlocksAndLoadsTheSameBytes) {
  BlockPool pool(16 * 10, 16);
  SnapshotStore store(pool);
  const std::vector<std::byte> bytes = pattern(37, 1);  // 3 blocks, the last partly used
  const std::optional<SnapshotHandle> handle = store.save(bytes);
  ASSERT_TRUE(handle);
  EXPECT_EQ(store.blocks(), 3);
  EXPECT_EQ(pool.in_use_blocks(), 3);
  EXPECT_EQ(store.load(*handle), bytes);
  const std::optional<SnapshotHandle> empty = store.save({});
  ASSERT_TRUE(empty);
  EXPECT_TRUE(store.load(*empty).empty());
  store.free(*handle);
  store.free(*empty);
  EXPECT_EQ(pool.free_blocks(), 10);
  EXPECT_EQ(store.snapshots(), 0);
  EXPECT_THROW(store.load(*handle), Error);
  EXPECT_THROW(store.free(*handle), Error);
}

TEST(SnapshotStore, AllocationIsAllOrNothing) {
  BlockPool pool(16 * 4, 16);
  SnapshotStore store(pool);
  ASSERT_TRUE(pool.allocate());
  ASSERT_TRUE(pool.allocate());
  EXPECT_FALSE(store.save(pattern(33, 2)));  // needs 3 blocks, 2 free
  EXPECT_EQ(pool.free_blocks(), 2);
  EXPECT_EQ(store.snapshots(), 0);
  EXPECT_TRUE(store.save(pattern(32, 2)));
  EXPECT_EQ(pool.free_blocks(), 0);
}

TEST(SnapshotStore, WriteAfterFreeIsANoOpAndOversizeThrows) {
  BlockPool pool(16 * 4, 16);
  SnapshotStore store(pool);
  const SnapshotHandle reserved = *store.reserve(20);
  EXPECT_THROW(store.load(reserved), Error);  // never written
  EXPECT_THROW(store.write(reserved, pattern(21, 3)), Error);
  EXPECT_TRUE(store.write(reserved, pattern(20, 3)));
  EXPECT_EQ(store.load(reserved), pattern(20, 3));
  store.free(reserved);
  // The blocks go to someone else; the late write must not touch them.
  const SnapshotHandle other = *store.save(pattern(20, 4));
  EXPECT_FALSE(store.write(reserved, pattern(20, 5)));
  EXPECT_EQ(store.load(other), pattern(20, 4));
  EXPECT_THROW(store.write(99, pattern(1, 0)), Error);  // never issued
  EXPECT_THROW(store.reserve(-1), Error);
}

}  // namespace
}  // namespace deepinfer::engine
