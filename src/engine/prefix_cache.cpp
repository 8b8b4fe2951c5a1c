#include "engine/prefix_cache.h"

#include "core/error.h"

namespace deepinfer::engine {

PrefixCache::PrefixCache(BlockPool& pool, int64_t block_tokens) : pool_(pool), block_tokens_(block_tokens) {
  if (block_tokens < 1) fail("prefix cache blocks of ", block_tokens, " tokens: they must hold at least one token");
  nodes_.emplace_back();  // the root
}

PrefixCache::NodeId PrefixCache::new_node(NodeId parent, TokenBlock tokens, BlockId block) {
  NodeId id;
  if (!free_nodes_.empty()) {
    id = free_nodes_.back();
    free_nodes_.pop_back();
  } else {
    id = static_cast<NodeId>(nodes_.size());
    nodes_.emplace_back();
  }
  Node& node = nodes_[static_cast<std::size_t>(id)];
  node = Node{};
  node.parent = parent;
  node.block = block;
  node.last_used = clock_;
  node.tokens = tokens;
  Node& up = nodes_[static_cast<std::size_t>(parent)];
  if (parent != 0 && up.children.empty()) leaves_.erase({up.last_used, parent});
  up.children.emplace(std::move(tokens), id);
  leaves_.insert({node.last_used, id});
  return id;
}

void PrefixCache::touch(NodeId id, uint64_t now) {
  Node& node = nodes_[static_cast<std::size_t>(id)];
  if (id != 0 && node.children.empty()) {  // the root is never a leaf to evict
    leaves_.erase({node.last_used, id});
    leaves_.insert({now, id});
  }
  node.last_used = now;
}

PrefixMatch PrefixCache::match(std::span<const int32_t> prompt) {
  const uint64_t now = ++clock_;
  queried_tokens_ += static_cast<int64_t>(prompt.size());
  PrefixMatch out;
  if (prompt.empty()) return out;
  const int64_t max_blocks = (static_cast<int64_t>(prompt.size()) - 1) / block_tokens_;
  std::vector<NodeId> path;
  std::size_t resumable = 0;  // path length up to the deepest node with a snapshot
  NodeId at = 0;
  TokenBlock key(static_cast<std::size_t>(block_tokens_));
  for (int64_t i = 0; i < max_blocks; ++i) {
    key.assign(prompt.begin() + i * block_tokens_, prompt.begin() + (i + 1) * block_tokens_);
    const auto& children = nodes_[static_cast<std::size_t>(at)].children;
    const auto child = children.find(key);
    if (child == children.end()) break;
    at = child->second;
    path.push_back(at);
    if (nodes_[static_cast<std::size_t>(at)].snapshot != kNoSnapshot) resumable = path.size();
  }
  out.shared_tokens = static_cast<int64_t>(path.size()) * block_tokens_;
  path.resize(resumable);
  for (NodeId id : path) {
    touch(id, now);
    out.blocks.push_back(nodes_[static_cast<std::size_t>(id)].block);
  }
  if (!path.empty()) out.snapshot = nodes_[static_cast<std::size_t>(path.back())].snapshot;
  out.tokens = static_cast<int64_t>(out.blocks.size()) * block_tokens_;
  hit_tokens_ += out.tokens;
  return out;
}

void PrefixCache::pin(const PrefixMatch& match) {
  for (BlockId block : match.blocks) pool_.retain(block);
}

void PrefixCache::unpin(const PrefixMatch& match) {
  for (BlockId block : match.blocks) pool_.release(block);
}

InsertResult PrefixCache::insert(std::span<const int32_t> tokens, std::span<const BlockId> blocks,
                                 SnapshotHandle snapshot) {
  const int64_t count = static_cast<int64_t>(blocks.size());
  if (static_cast<int64_t>(tokens.size()) < count * block_tokens_)
    fail("prefix cache insert: ", count, " blocks of ", block_tokens_, " tokens but only ", tokens.size(), " tokens");
  const uint64_t now = ++clock_;
  InsertResult out;
  NodeId at = 0;
  for (int64_t i = 0; i < count; ++i) {
    TokenBlock key(tokens.begin() + i * block_tokens_, tokens.begin() + (i + 1) * block_tokens_);
    const auto& children = nodes_[static_cast<std::size_t>(at)].children;
    const auto child = children.find(key);
    if (child != children.end()) {
      at = child->second;
      touch(at, now);
      continue;
    }
    pool_.mark_cached(blocks[static_cast<std::size_t>(i)]);  // throws before the tree changes on misuse
    touch(at, now);
    at = new_node(at, std::move(key), blocks[static_cast<std::size_t>(i)]);
    ++out.new_blocks;
  }
  if (count > 0 && snapshot != kNoSnapshot) {
    Node& last = nodes_[static_cast<std::size_t>(at)];
    if (last.snapshot == kNoSnapshot) {
      last.snapshot = snapshot;
      out.snapshot_adopted = true;
    }
  }
  return out;
}

void PrefixCache::remove_leaf(NodeId id) {
  Node& node = nodes_[static_cast<std::size_t>(id)];
  pool_.uncache(node.block);
  leaves_.erase({node.last_used, id});
  Node& up = nodes_[static_cast<std::size_t>(node.parent)];
  up.children.erase(node.tokens);
  if (node.parent != 0 && up.children.empty()) leaves_.insert({up.last_used, node.parent});
  node = Node{};
  free_nodes_.push_back(id);
}

std::vector<EvictedBlock> PrefixCache::evict(int64_t blocks) {
  std::vector<EvictedBlock> out;
  while (static_cast<int64_t>(out.size()) < blocks) {
    NodeId victim = -1;
    for (const auto& [last_used, id] : leaves_) {
      if (pool_.ref_count(nodes_[static_cast<std::size_t>(id)].block) == 0) {
        victim = id;
        break;
      }
    }
    if (victim < 0) break;
    const Node& node = nodes_[static_cast<std::size_t>(victim)];
    out.push_back({node.block, node.snapshot});
    remove_leaf(victim);
  }
  return out;
}

double PrefixCache::hit_rate() const {
  return queried_tokens_ == 0 ? 0.0 : static_cast<double>(hit_tokens_) / static_cast<double>(queried_tokens_);
}

std::vector<EvictedBlock> PrefixCache::contents() const {
  std::vector<EvictedBlock> out;
  std::vector<NodeId> stack{0};
  while (!stack.empty()) {
    const NodeId id = stack.back();
    stack.pop_back();
    const Node& node = nodes_[static_cast<std::size_t>(id)];
    if (id != 0) out.push_back({node.block, node.snapshot});
    for (auto child = node.children.rbegin(); child != node.children.rend(); ++child) stack.push_back(child->second);
  }
  return out;
}

}  // namespace deepinfer::engine
