#pragma once
// The cache's one memory budget, cut into equal blocks (each holds the paged state of
// `block_tokens` tokens, model/cache_layout.h). Every block is in exactly one of three states:
//   free       on the free list, reference count 0;
//   in use    reference count > 0 (requests that read or write it; cached or not);
//   evictable  reference count 0 but held by the prefix cache, which may give it back (uncache).
// Fragmentation cannot grow: the arena is allocated once, every allocation is exactly one block,
// and any free block serves any request, so a run of any length can always use every free block.
// Running out is a normal event (the scheduler evicts or preempts), so allocate() reports it
// instead of throwing. Misuse (an unknown id, a double release) throws deepinfer::Error.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "model/paged_rows.h"

namespace deepinfer::engine {

using BlockId = int32_t;

class BlockPool {
 public:
  // As many blocks of `block_bytes` as `budget_bytes` holds, in `memory` (the model's backend's:
  // device memory for a GPU). Throws when that is none, or when the memory cannot hold them.
  BlockPool(int64_t budget_bytes, int64_t block_bytes,
            const model::CacheMemory& memory = model::host_cache_memory());

  // A free block with reference count 1; nullopt when none is free (evictable blocks are not
  // taken here: the prefix cache decides which to give back).
  std::optional<BlockId> allocate();
  void retain(BlockId block);
  // At count 0 the block becomes evictable when the prefix cache holds it, else free.
  void release(BlockId block);

  // The prefix cache takes (mark_cached) or gives back (uncache) a block. Only a block in use may
  // be taken: its writer still holds it. An uncached block at count 0 is freed.
  void mark_cached(BlockId block);
  void uncache(BlockId block);

  int32_t ref_count(BlockId block) const;
  bool cached(BlockId block) const;
  std::span<std::byte> payload(BlockId block);
  std::span<const std::byte> payload(BlockId block) const;
  // Where the payloads live (their bytes are only for the backend to read and write).
  const model::CacheMemory& memory() const { return *memory_; }

  int64_t block_bytes() const { return block_bytes_; }
  int64_t total_blocks() const { return static_cast<int64_t>(ref_counts_.size()); }
  int64_t free_blocks() const { return static_cast<int64_t>(free_list_.size()); }
  int64_t evictable_blocks() const { return evictable_; }
  int64_t in_use_blocks() const { return total_blocks() - free_blocks() - evictable_; }

 private:
  void check(BlockId block) const;

  int64_t block_bytes_ = 0;
  const model::CacheMemory* memory_;
  std::shared_ptr<std::byte> arena_;
  std::vector<int32_t> ref_counts_;
  std::vector<char> cached_;
  std::vector<char> free_;  // on the free list: catches a release of a free block
  // Lowest ids first: allocate() takes from the back, so a fresh pool hands out 0, 1, 2, ...
  std::vector<BlockId> free_list_;
  int64_t evictable_ = 0;
};

}  // namespace deepinfer::engine
