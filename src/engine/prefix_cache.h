#pragma once
// Prefix cache: a radix tree over full blocks of token ids. Each node is one block of
// `block_tokens` ids, the pool block holding that block's paged state, and optionally a snapshot
// handle: the engine's id for the per-sequence state (window rows, compressor tails, Engram
// look-back) at the end of that block. The handle is opaque here; the tree stores it, returns it
// and hands it back when the node is evicted so the engine can free what it names.
//
// A resume needs the blocks of the prefix AND a snapshot at its end, so `match` returns the
// longest matched prefix that ends at a node with a snapshot (docs/ENGINE.md says why snapshots
// are taken only at chosen boundaries). Eviction takes unreferenced leaves only, least recently
// used first; an interior node stays while it has a child. Time is a counter of operations, ties
// go to the lower node id, children are ordered by their token block: the same operations always
// give the same tree, the same matches and the same evictions.
#include <cstdint>
#include <map>
#include <set>
#include <span>
#include <utility>
#include <vector>

#include "engine/block_pool.h"

namespace deepinfer::engine {

using SnapshotHandle = int64_t;
inline constexpr SnapshotHandle kNoSnapshot = -1;

struct PrefixMatch {
  std::vector<BlockId> blocks;  // the reusable prefix's blocks, in order
  int64_t tokens = 0;           // blocks.size() * block_tokens
  SnapshotHandle snapshot = kNoSnapshot;  // the state at the end of the prefix (kNoSnapshot: no hit)
  // Full blocks of the prompt found in the tree, snapshot or not (>= tokens): where the prompt
  // leaves what earlier prompts had in common. A snapshot there makes the shared part resumable.
  int64_t shared_tokens = 0;
};

struct InsertResult {
  int64_t new_blocks = 0;  // blocks the tree took (the others were cached already)
  // False when the last block's node already had a snapshot: the caller still owns (and frees)
  // the one it offered.
  bool snapshot_adopted = false;
};

struct EvictedBlock {
  BlockId block = -1;  // already back on the pool's free list
  SnapshotHandle snapshot = kNoSnapshot;  // the engine frees what it names
};

class PrefixCache {
 public:
  PrefixCache(BlockPool& pool, int64_t block_tokens);

  // The longest cached prefix of `prompt` that ends at a snapshot, over full blocks only and
  // leaving at least one prompt token uncached (a request must compute its last token's logits).
  // Counts the prompt's tokens as queried and the prefix's as hit; marks the prefix used now.
  PrefixMatch match(std::span<const int32_t> prompt);
  // A request reading a match holds a reference on each of its blocks until it unpins; pinned
  // blocks are not evicted. Pin before anything can evict (the match names blocks, not nodes).
  void pin(const PrefixMatch& match);
  void unpin(const PrefixMatch& match);

  // Offers the first blocks.size() full blocks of `tokens`, whose paged state the caller wrote in
  // `blocks` (and holds references on), with `snapshot` (or kNoSnapshot) for the end of the last
  // one. A block already cached under the same tokens keeps its node: the caller's copy is not
  // taken and goes free when the caller releases it (the state is a function of the tokens, so
  // the copies are identical). The caller releases its references as usual afterwards.
  InsertResult insert(std::span<const int32_t> tokens, std::span<const BlockId> blocks, SnapshotHandle snapshot);

  // Frees up to `blocks` unreferenced leaves, least recently used first (a parent whose last child
  // goes becomes a leaf and may follow). Returns what it freed, in eviction order.
  std::vector<EvictedBlock> evict(int64_t blocks);

  int64_t block_tokens() const { return block_tokens_; }
  int64_t cached_blocks() const { return static_cast<int64_t>(nodes_.size() - free_nodes_.size()) - 1; }
  int64_t queried_tokens() const { return queried_tokens_; }
  int64_t hit_tokens() const { return hit_tokens_; }
  double hit_rate() const;

  // Every cached block and its snapshot, in tree order (parents before children, siblings by
  // tokens): tests and debugging.
  std::vector<EvictedBlock> contents() const;

 private:
  using NodeId = int32_t;
  using TokenBlock = std::vector<int32_t>;
  struct Node {
    NodeId parent = -1;
    BlockId block = -1;
    SnapshotHandle snapshot = kNoSnapshot;
    uint64_t last_used = 0;
    TokenBlock tokens;
    std::map<TokenBlock, NodeId> children;
  };

  NodeId new_node(NodeId parent, TokenBlock tokens, BlockId block);
  void touch(NodeId node, uint64_t now);
  void remove_leaf(NodeId node);

  BlockPool& pool_;
  int64_t block_tokens_;
  std::vector<Node> nodes_;  // nodes_[0] is the root (empty prefix), it holds no block
  std::vector<NodeId> free_nodes_;
  std::set<std::pair<uint64_t, NodeId>> leaves_;  // every leaf but the root, oldest first
  uint64_t clock_ = 0;
  int64_t queried_tokens_ = 0;
  int64_t hit_tokens_ = 0;
};

}  // namespace deepinfer::engine
