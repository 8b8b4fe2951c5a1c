#include "engine/block_pool.h"

#include <limits>

#include "core/error.h"

namespace deepinfer::engine {

BlockPool::BlockPool(int64_t budget_bytes, int64_t block_bytes, const model::CacheMemory& memory)
    : block_bytes_(block_bytes), memory_(&memory) {
  if (block_bytes <= 0) fail("cache block of ", block_bytes, " bytes: it must be positive");
  const int64_t blocks = budget_bytes / block_bytes;
  if (blocks < 1) fail("cache memory budget of ", budget_bytes, " bytes holds no block of ", block_bytes, " bytes");
  if (blocks > std::numeric_limits<BlockId>::max())
    fail("cache memory budget of ", budget_bytes, " bytes makes ", blocks, " blocks, more than a block id counts");
  arena_ = memory.allocate(blocks * block_bytes, /*zeroed=*/false);
  ref_counts_.assign(static_cast<std::size_t>(blocks), 0);
  cached_.assign(static_cast<std::size_t>(blocks), 0);
  free_.assign(static_cast<std::size_t>(blocks), 1);
  free_list_.reserve(static_cast<std::size_t>(blocks));
  for (int64_t id = blocks - 1; id >= 0; --id) free_list_.push_back(static_cast<BlockId>(id));
}

void BlockPool::check(BlockId block) const {
  if (block < 0 || block >= total_blocks()) fail("cache block ", block, " outside the pool of ", total_blocks());
}

std::optional<BlockId> BlockPool::allocate() {
  if (free_list_.empty()) return std::nullopt;
  const BlockId block = free_list_.back();
  free_list_.pop_back();
  free_[block] = 0;
  ref_counts_[block] = 1;
  return block;
}

void BlockPool::retain(BlockId block) {
  check(block);
  if (free_[block]) fail("cache block ", block, " retained while free");
  if (ref_counts_[block] == 0) --evictable_;  // only a cached block sits at 0 off the free list
  ++ref_counts_[block];
}

void BlockPool::release(BlockId block) {
  check(block);
  if (ref_counts_[block] == 0) fail("cache block ", block, " released with no reference held");
  if (--ref_counts_[block] > 0) return;
  if (cached_[block]) {
    ++evictable_;
  } else {
    free_[block] = 1;
    free_list_.push_back(block);
  }
}

void BlockPool::mark_cached(BlockId block) {
  check(block);
  if (ref_counts_[block] == 0) fail("cache block ", block, " cached with no reference held");
  if (cached_[block]) fail("cache block ", block, " cached twice");
  cached_[block] = 1;
}

void BlockPool::uncache(BlockId block) {
  check(block);
  if (!cached_[block]) fail("cache block ", block, " uncached but not cached");
  cached_[block] = 0;
  if (ref_counts_[block] > 0) return;
  --evictable_;
  free_[block] = 1;
  free_list_.push_back(block);
}

int32_t BlockPool::ref_count(BlockId block) const {
  check(block);
  return ref_counts_[block];
}

bool BlockPool::cached(BlockId block) const {
  check(block);
  return cached_[block] != 0;
}

std::span<std::byte> BlockPool::payload(BlockId block) {
  check(block);
  return {arena_.get() + static_cast<std::size_t>(block) * static_cast<std::size_t>(block_bytes_),
          static_cast<std::size_t>(block_bytes_)};
}

std::span<const std::byte> BlockPool::payload(BlockId block) const {
  check(block);
  return {arena_.get() + static_cast<std::size_t>(block) * static_cast<std::size_t>(block_bytes_),
          static_cast<std::size_t>(block_bytes_)};
}

}  // namespace deepinfer::engine
