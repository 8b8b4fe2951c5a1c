#include "engine/snapshot_store.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace deepinfer::engine {

SnapshotStore::SnapshotStore(BlockPool& pool) : pool_(pool) {}

int64_t SnapshotStore::blocks_for(int64_t bytes) const {
  return (bytes + pool_.block_bytes() - 1) / pool_.block_bytes();
}

const SnapshotStore::Entry& SnapshotStore::entry(SnapshotHandle handle) const {
  const auto found = entries_.find(handle);
  if (found == entries_.end()) fail("snapshot ", handle, " is not stored (never issued, or freed)");
  return found->second;
}

std::optional<SnapshotHandle> SnapshotStore::reserve(int64_t capacity_bytes) {
  if (capacity_bytes < 0) fail("snapshot of ", capacity_bytes, " bytes: the size must not be negative");
  const int64_t needed = blocks_for(capacity_bytes);
  if (pool_.free_blocks() < needed) return std::nullopt;
  Entry entry;
  entry.capacity = capacity_bytes;
  entry.blocks.reserve(static_cast<std::size_t>(needed));
  for (int64_t i = 0; i < needed; ++i) entry.blocks.push_back(*pool_.allocate());
  blocks_ += needed;
  const SnapshotHandle handle = next_handle_++;
  entries_.emplace(handle, std::move(entry));
  return handle;
}

bool SnapshotStore::write(SnapshotHandle handle, std::span<const std::byte> bytes) {
  if (handle < 0 || handle >= next_handle_) fail("snapshot ", handle, " was never issued");
  const auto found = entries_.find(handle);
  if (found == entries_.end()) return false;
  Entry& entry = found->second;
  const auto size = static_cast<int64_t>(bytes.size());
  if (size > entry.capacity)
    fail("snapshot ", handle, " of ", size, " bytes exceeds the ", entry.capacity, " bytes reserved for it");
  const int64_t block_bytes = pool_.block_bytes();
  for (std::size_t i = 0; i < entry.blocks.size(); ++i) {
    const int64_t first = static_cast<int64_t>(i) * block_bytes;
    if (first >= size) break;
    const int64_t count = std::min(block_bytes, size - first);
    pool_.memory().write(pool_.payload(entry.blocks[i]).data(), bytes.data() + first, count);
  }
  entry.size = size;
  return true;
}

std::optional<SnapshotHandle> SnapshotStore::save(std::span<const std::byte> bytes) {
  const std::optional<SnapshotHandle> handle = reserve(static_cast<int64_t>(bytes.size()));
  if (handle) write(*handle, bytes);
  return handle;
}

std::vector<std::byte> SnapshotStore::load(SnapshotHandle handle) const {
  const Entry& stored = entry(handle);
  if (stored.size < 0) fail("snapshot ", handle, " was reserved but never written");
  std::vector<std::byte> bytes(static_cast<std::size_t>(stored.size));
  const int64_t block_bytes = pool_.block_bytes();
  for (std::size_t i = 0; i < stored.blocks.size(); ++i) {
    const int64_t first = static_cast<int64_t>(i) * block_bytes;
    if (first >= stored.size) break;
    const int64_t count = std::min(block_bytes, stored.size - first);
    pool_.memory().read(bytes.data() + first, pool_.payload(stored.blocks[i]).data(), count);
  }
  return bytes;
}

void SnapshotStore::free(SnapshotHandle handle) {
  const auto found = entries_.find(handle);
  if (found == entries_.end()) fail("snapshot ", handle, " freed but not stored");
  for (BlockId block : found->second.blocks) pool_.release(block);
  blocks_ -= static_cast<int64_t>(found->second.blocks.size());
  entries_.erase(found);
}

std::vector<SnapshotHandle> SnapshotStore::handles() const {
  std::vector<SnapshotHandle> out;
  out.reserve(entries_.size());
  for (const auto& [handle, stored] : entries_) out.push_back(handle);
  return out;
}

std::span<const BlockId> SnapshotStore::blocks_of(SnapshotHandle handle) const { return entry(handle).blocks; }

}  // namespace deepinfer::engine
