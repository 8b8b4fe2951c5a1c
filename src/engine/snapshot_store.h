#pragma once
// Snapshots (a sequence's fixed state at a block boundary: window rows, compressor tails, Engram
// look-back; docs/ENGINE.md) stored inside the cache's BlockPool, ceil(bytes / block_bytes) pool
// blocks each, so that they count against the one --cache-memory budget like the paged state.
// Running out is a scheduling event, so reserve() / save() report it instead of throwing.
//
// Handles are never reused. write() to a handle freed since it was reserved is a no-op returning
// false: the scheduler may drop a snapshot (to free memory, or because its sequence was cancelled
// or preempted) while the step that fills it is still computing.
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <vector>

#include "engine/block_pool.h"
#include "engine/prefix_cache.h"

namespace deepinfer::engine {

class SnapshotStore {
 public:
  explicit SnapshotStore(BlockPool& pool);

  int64_t blocks_for(int64_t bytes) const;

  // Room for up to `capacity_bytes`, all blocks or none: nullopt when the pool has too few free
  // blocks (evictable blocks are not taken: the caller evicts first). Throws on a negative size.
  std::optional<SnapshotHandle> reserve(int64_t capacity_bytes);
  // Fills a reserved snapshot. False when `handle` was freed meanwhile; throws when the bytes
  // exceed its capacity or the handle was never issued.
  bool write(SnapshotHandle handle, std::span<const std::byte> bytes);
  // reserve(bytes.size()) then write.
  std::optional<SnapshotHandle> save(std::span<const std::byte> bytes);

  // The bytes written. Throws for a handle that is not live or was never written.
  std::vector<std::byte> load(SnapshotHandle handle) const;
  // Returns its blocks to the pool. Throws for a handle that is not live.
  void free(SnapshotHandle handle);

  bool contains(SnapshotHandle handle) const { return entries_.count(handle) != 0; }
  std::vector<SnapshotHandle> handles() const;
  std::span<const BlockId> blocks_of(SnapshotHandle handle) const;
  int64_t snapshots() const { return static_cast<int64_t>(entries_.size()); }
  int64_t blocks() const { return blocks_; }

 private:
  struct Entry {
    std::vector<BlockId> blocks;
    int64_t capacity = 0;
    int64_t size = -1;  // -1: reserved, not written yet
  };
  const Entry& entry(SnapshotHandle handle) const;

  BlockPool& pool_;
  std::map<SnapshotHandle, Entry> entries_;
  SnapshotHandle next_handle_ = 0;
  int64_t blocks_ = 0;
};

}  // namespace deepinfer::engine
