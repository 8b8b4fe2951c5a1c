#include "engine/prefix_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "core/error.h"

namespace deepinfer::engine {
namespace {

constexpr int64_t kCacheBlock = 4;

std::vector<int32_t> iota_tokens(int64_t count, int32_t first) {
  std::vector<int32_t> tokens(static_cast<std::size_t>(count));
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

// A request as the engine will run one: it holds a reference on every block it reads or writes.
struct Request {
  std::vector<int32_t> tokens;
  std::vector<BlockId> blocks;  // matched blocks (pinned), then its own
  PrefixMatch match;
};

// Matches, pins, and allocates the rest of the prompt's blocks (full and partial). Returns false
// (holding nothing) when the pool has no room even after evicting.
bool start(BlockPool& pool, PrefixCache& cache, Request& request, std::vector<EvictedBlock>* evicted = nullptr) {
  request.match = cache.match(request.tokens);
  cache.pin(request.match);
  request.blocks = request.match.blocks;
  const int64_t needed = (static_cast<int64_t>(request.tokens.size()) + kCacheBlock - 1) / kCacheBlock;
  while (static_cast<int64_t>(request.blocks.size()) < needed) {
    std::optional<BlockId> block = pool.allocate();
    if (!block) {
      std::vector<EvictedBlock> freed = cache.evict(1);
      if (evicted) evicted->insert(evicted->end(), freed.begin(), freed.end());
      block = pool.allocate();
    }
    if (!block) {
      for (BlockId held : request.blocks) pool.release(held);
      request.blocks.clear();
      return false;
    }
    // The "paged state" each block holds here: its own token ids, so a wrong match shows.
    const auto payload = pool.payload(*block);
    std::memset(payload.data(), 0xff, payload.size());
    const int64_t first = static_cast<int64_t>(request.blocks.size()) * kCacheBlock;
    const int64_t count = std::min<int64_t>(kCacheBlock, static_cast<int64_t>(request.tokens.size()) - first);
    std::memcpy(payload.data(), request.tokens.data() + first, static_cast<std::size_t>(count) * sizeof(int32_t));
    request.blocks.push_back(*block);
  }
  return true;
}

// Offers the request's full blocks to the cache and drops its references.
InsertResult finish(BlockPool& pool, PrefixCache& cache, Request& request, SnapshotHandle snapshot) {
  const std::size_t full = request.tokens.size() / kCacheBlock;
  const InsertResult result = cache.insert(request.tokens, std::span(request.blocks).first(full), snapshot);
  for (BlockId block : request.blocks) pool.release(block);
  request.blocks.clear();
  return result;
}

Request run(BlockPool& pool, PrefixCache& cache, std::vector<int32_t> tokens, SnapshotHandle snapshot) {
  Request request{std::move(tokens), {}, {}};
  EXPECT_TRUE(start(pool, cache, request));
  finish(pool, cache, request, snapshot);
  return request;
}

TEST(PrefixCache, SharedPrefixMatchesUpToTheSnapshot) {
  BlockPool pool(64 * 16, 16);
  PrefixCache cache(pool, kCacheBlock);
  const std::vector<int32_t> a = iota_tokens(12, 100);
  // Snapshots after block 1 and block 3 (two turns of the same conversation).
  const Request first = run(pool, cache, std::vector(a.begin(), a.begin() + 5), 11);
  const Request second = run(pool, cache, a, 13);
  EXPECT_EQ(cache.cached_blocks(), 3);
  EXPECT_EQ(pool.evictable_blocks(), 3);
  EXPECT_EQ(pool.in_use_blocks(), 0);

  std::vector<int32_t> b(a.begin(), a.begin() + 8);  // shares blocks 0, 1; diverges at block 2
  b.insert(b.end(), {7, 7, 7, 7, 7});
  const PrefixMatch shared = cache.match(b);
  // Block 1 matches too but has no snapshot: a resume needs one, so only block 0 is reused.
  EXPECT_EQ(shared.tokens, kCacheBlock);
  EXPECT_EQ(shared.snapshot, 11);
  ASSERT_EQ(shared.blocks.size(), 1u);
  EXPECT_TRUE(first.match.blocks.empty());
  ASSERT_EQ(second.match.blocks.size(), 1u);  // the second turn reused the first's block 0
  EXPECT_EQ(shared.blocks[0], second.match.blocks[0]);

  std::vector<int32_t> longer = a;
  longer.push_back(1);
  const PrefixMatch full = cache.match(longer);
  EXPECT_EQ(full.tokens, 12);
  EXPECT_EQ(full.snapshot, 13);
}

TEST(PrefixCache, DivergenceInsideABlockStopsBeforeIt) {
  BlockPool pool(64 * 16, 16);
  PrefixCache cache(pool, kCacheBlock);
  const std::vector<int32_t> a = iota_tokens(8, 0);
  run(pool, cache, std::vector(a.begin(), a.begin() + 4), 1);
  run(pool, cache, a, 2);
  std::vector<int32_t> prompt = a;
  prompt.push_back(99);
  EXPECT_EQ(cache.match(prompt).tokens, 8);
  prompt[6] = 42;  // mid block 1
  const PrefixMatch partial = cache.match(prompt);
  EXPECT_EQ(partial.tokens, 4);
  EXPECT_EQ(partial.snapshot, 1);
  prompt[0] = 42;
  const PrefixMatch none = cache.match(prompt);
  EXPECT_EQ(none.tokens, 0);
  EXPECT_TRUE(none.blocks.empty());
  EXPECT_EQ(none.snapshot, kNoSnapshot);
}

TEST(PrefixCache, LeavesTheLastPromptTokenToCompute) {
  BlockPool pool(64 * 16, 16);
  PrefixCache cache(pool, kCacheBlock);
  const std::vector<int32_t> a = iota_tokens(8, 0);
  run(pool, cache, std::vector(a.begin(), a.begin() + 4), 1);
  run(pool, cache, a, 2);
  EXPECT_EQ(cache.match(a).tokens, 4);  // all 8 cached, but the 8th token's logits are needed
  EXPECT_EQ(cache.match(std::span(a).first(5)).tokens, 4);
  EXPECT_EQ(cache.match(std::span(a).first(4)).tokens, 0);
  EXPECT_EQ(cache.match(std::span<const int32_t>()).tokens, 0);
}

TEST(PrefixCache, DuplicateBlocksAreNotTakenAndGoFree) {
  BlockPool pool(64 * 16, 16);
  PrefixCache cache(pool, kCacheBlock);
  const std::vector<int32_t> a = iota_tokens(9, 0);
  Request one{a, {}, {}};
  Request two{a, {}, {}};
  ASSERT_TRUE(start(pool, cache, one));
  ASSERT_TRUE(start(pool, cache, two));  // runs concurrently: no hit yet
  EXPECT_EQ(pool.in_use_blocks(), 6);
  const InsertResult first = finish(pool, cache, one, 5);
  EXPECT_EQ(first.new_blocks, 2);
  EXPECT_TRUE(first.snapshot_adopted);
  const InsertResult second = finish(pool, cache, two, 6);
  EXPECT_EQ(second.new_blocks, 0);
  EXPECT_FALSE(second.snapshot_adopted);  // the caller frees snapshot 6
  EXPECT_EQ(cache.cached_blocks(), 2);
  EXPECT_EQ(pool.evictable_blocks(), 2);
  EXPECT_EQ(pool.free_blocks(), pool.total_blocks() - 2);
}

TEST(PrefixCache, EvictsLeastRecentlyUsedLeavesFirst) {
  BlockPool pool(64 * 16, 16);
  PrefixCache cache(pool, kCacheBlock);
  // Three one-block prompts (x, y, z) and a two-block chain under x.
  const std::vector<int32_t> x = iota_tokens(5, 0), y = iota_tokens(5, 100), z = iota_tokens(5, 200);
  const std::vector<int32_t> x_long = iota_tokens(9, 0);
  run(pool, cache, x, 1);
  run(pool, cache, y, 2);
  run(pool, cache, z, 3);
  run(pool, cache, x_long, 4);
  const auto block_of = [&](const std::vector<int32_t>& prompt) { return cache.match(prompt).blocks.back(); };
  const BlockId x0 = block_of(x), x1 = block_of(iota_tokens(10, 0));
  const BlockId y0 = block_of(y);
  const BlockId z0 = block_of(z);
  // Use order now: x0, x1 (and x0 again), y0, z0. Touch y0 again: z0 and the x chain are older.
  cache.match(y);
  // Oldest leaf: x1 (x0 is interior while x1 lives); then x0 becomes a leaf, touched before z0.
  const std::vector<EvictedBlock> two = cache.evict(2);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0].block, x1);
  EXPECT_EQ(two[0].snapshot, 4);
  EXPECT_EQ(two[1].block, x0);
  EXPECT_EQ(two[1].snapshot, 1);
  const std::vector<EvictedBlock> rest = cache.evict(10);
  ASSERT_EQ(rest.size(), 2u);
  EXPECT_EQ(rest[0].block, z0);
  EXPECT_EQ(rest[1].block, y0);
  EXPECT_EQ(cache.cached_blocks(), 0);
  EXPECT_EQ(pool.free_blocks(), pool.total_blocks());
}

TEST(PrefixCache, InteriorNodeStaysWhileItsChildLives) {
  BlockPool pool(64 * 16, 16);
  PrefixCache cache(pool, kCacheBlock);
  run(pool, cache, iota_tokens(5, 0), 1);
  run(pool, cache, iota_tokens(9, 0), 2);
  const PrefixMatch both = cache.match(iota_tokens(10, 0));  // parent and child used at the same time
  ASSERT_EQ(both.blocks.size(), 2u);
  // Hold only the child: the parent is unreferenced and (lower node id) first in LRU order, but
  // it is not a leaf, and evicting it would orphan the child.
  pool.retain(both.blocks[1]);
  EXPECT_TRUE(cache.evict(5).empty());
  EXPECT_EQ(cache.cached_blocks(), 2);
  pool.release(both.blocks[1]);
  const std::vector<EvictedBlock> evicted = cache.evict(5);
  ASSERT_EQ(evicted.size(), 2u);
  EXPECT_EQ(evicted[0].block, both.blocks[1]);
  EXPECT_EQ(evicted[1].block, both.blocks[0]);
}

TEST(PrefixCache, PinnedBlocksAreNeverEvicted) {
  BlockPool pool(64 * 16, 16);
  PrefixCache cache(pool, kCacheBlock);
  run(pool, cache, iota_tokens(5, 0), 1);
  run(pool, cache, iota_tokens(5, 100), 2);
  run(pool, cache, iota_tokens(5, 200), 3);
  const PrefixMatch oldest = cache.match(iota_tokens(6, 0));
  cache.match(iota_tokens(6, 100));
  cache.match(iota_tokens(6, 200));
  cache.pin(oldest);
  const std::vector<EvictedBlock> evicted = cache.evict(3);
  ASSERT_EQ(evicted.size(), 2u);
  EXPECT_EQ(evicted[0].snapshot, 2);
  EXPECT_EQ(evicted[1].snapshot, 3);
  EXPECT_EQ(cache.cached_blocks(), 1);
  EXPECT_EQ(pool.in_use_blocks(), 1);
  cache.unpin(oldest);
  EXPECT_EQ(pool.evictable_blocks(), 1);
  const std::vector<EvictedBlock> last = cache.evict(3);
  ASSERT_EQ(last.size(), 1u);
  EXPECT_EQ(last[0].block, oldest.blocks[0]);
}

// Each turn resends the whole conversation; after the turn the conversation (prompt + reply) is
// cached with a snapshot at its last full block. The next turn hits exactly those full blocks.
TEST(PrefixCache, MultiTurnChatCountersAreExact) {
  BlockPool pool(256 * 16, 16);
  PrefixCache cache(pool, kCacheBlock);
  std::mt19937 random(7);
  std::vector<int32_t> conversation;
  int64_t queried = 0, hit = 0;
  for (int turn = 0; turn < 12; ++turn) {
    const int64_t user_length = 1 + static_cast<int64_t>(random() % 11);
    const int64_t reply_length = 1 + static_cast<int64_t>(random() % 9);
    const int64_t history_blocks = static_cast<int64_t>(conversation.size()) / kCacheBlock;
    for (int64_t i = 0; i < user_length; ++i) conversation.push_back(static_cast<int32_t>(random() % 50));
    Request request{conversation, {}, {}};
    ASSERT_TRUE(start(pool, cache, request));
    queried += static_cast<int64_t>(conversation.size());
    hit += history_blocks * kCacheBlock;
    EXPECT_EQ(request.match.tokens, history_blocks * kCacheBlock) << "turn " << turn;
    EXPECT_EQ(request.match.snapshot, history_blocks > 0 ? turn - 1 : kNoSnapshot) << "turn " << turn;
    for (int64_t i = 0; i < reply_length; ++i) conversation.push_back(static_cast<int32_t>(random() % 50));
    request.tokens = conversation;  // the reply's blocks, as decode would have allocated them
    while (static_cast<int64_t>(request.blocks.size()) * kCacheBlock < static_cast<int64_t>(conversation.size()))
      request.blocks.push_back(*pool.allocate());
    const InsertResult result = finish(pool, cache, request, turn);
    EXPECT_EQ(result.snapshot_adopted, static_cast<int64_t>(conversation.size()) >= kCacheBlock) << "turn " << turn;
  }
  EXPECT_EQ(cache.queried_tokens(), queried);
  EXPECT_EQ(cache.hit_tokens(), hit);
  EXPECT_DOUBLE_EQ(cache.hit_rate(), static_cast<double>(hit) / static_cast<double>(queried));
  EXPECT_EQ(cache.cached_blocks(), static_cast<int64_t>(conversation.size()) / kCacheBlock);
  EXPECT_EQ(pool.in_use_blocks(), 0);
}

TEST(PrefixCache, RefusesMisuse) {
  BlockPool pool(4 * 16, 16);
  PrefixCache cache(pool, kCacheBlock);
  EXPECT_THROW(PrefixCache(pool, 0), Error);
  const BlockId block = *pool.allocate();
  const std::vector<int32_t> tokens = iota_tokens(3, 0);
  EXPECT_THROW(cache.insert(tokens, std::vector<BlockId>{block}, 1), Error);  // not a full block
  const BlockId free_block = 3;
  EXPECT_THROW(cache.insert(iota_tokens(4, 0), std::vector<BlockId>{free_block}, 1), Error);  // nobody holds it
  EXPECT_EQ(cache.cached_blocks(), 0);
  cache.insert(iota_tokens(4, 0), std::vector<BlockId>{block}, 1);
  EXPECT_THROW(cache.insert(iota_tokens(4, 50), std::vector<BlockId>{block}, 2), Error);  // cached twice
  EXPECT_EQ(cache.cached_blocks(), 1);
}

// Random requests (shared prefixes, concurrent, failing allocations), finishes and evictions
// against a small pool; after every operation the pool, the tree and every request must agree.
struct Simulation {
  BlockPool pool{48 * 16, 16};
  PrefixCache cache{pool, kCacheBlock};
  std::mt19937 random;
  std::vector<Request> active;
  std::set<SnapshotHandle> live_snapshots;
  SnapshotHandle next_snapshot = 0;
  int64_t evictions = 0, refused_starts = 0;
  std::vector<std::vector<int32_t>> log;  // evicted (block, snapshot) pairs and match results

  explicit Simulation(uint32_t seed) : random(seed) {}

  std::vector<int32_t> random_prompt() {
    // Few stems over a tiny alphabet: prefixes are shared often, and diverge at any offset.
    const int32_t stem = static_cast<int32_t>(random() % 3);
    const int64_t length = 1 + static_cast<int64_t>(random() % 30);
    std::vector<int32_t> tokens;
    for (int64_t i = 0; i < length; ++i)
      tokens.push_back(random() % 6 == 0 ? static_cast<int32_t>(random() % 2) : stem * 10 + static_cast<int32_t>(i % 7));
    return tokens;
  }

  void drop(const std::vector<EvictedBlock>& evicted) {
    evictions += static_cast<int64_t>(evicted.size());
    for (const EvictedBlock& entry : evicted) {
      if (entry.snapshot != kNoSnapshot) {
        ASSERT_EQ(live_snapshots.erase(entry.snapshot), 1u);
      }
      log.push_back({entry.block, static_cast<int32_t>(entry.snapshot)});
    }
  }

  void step() {
    const uint32_t op = random() % 10;
    if (op < 5 || active.empty()) {
      Request request{random_prompt(), {}, {}};
      std::vector<EvictedBlock> evicted;
      const bool started = start(pool, cache, request, &evicted);
      drop(evicted);
      log.push_back({static_cast<int32_t>(request.match.tokens), static_cast<int32_t>(request.match.snapshot)});
      // Every matched block holds the prompt's tokens: the tree gave the right blocks, and none
      // of them was handed out again while cached.
      for (std::size_t i = 0; i < request.match.blocks.size(); ++i)
        ASSERT_EQ(std::memcmp(pool.payload(request.match.blocks[i]).data(), request.tokens.data() + i * kCacheBlock,
                              kCacheBlock * sizeof(int32_t)),
                  0);
      if (started) active.push_back(std::move(request));
      else ++refused_starts;
    } else if (op < 9) {
      const std::size_t index = random() % active.size();
      const bool with_snapshot = random() % 4 != 0;
      const SnapshotHandle snapshot = with_snapshot ? next_snapshot++ : kNoSnapshot;
      const InsertResult result = finish(pool, cache, active[index], snapshot);
      if (result.snapshot_adopted) live_snapshots.insert(snapshot);
      active.erase(active.begin() + static_cast<std::ptrdiff_t>(index));
    } else {
      drop(cache.evict(static_cast<int64_t>(random() % 4)));
    }
  }

  void check() {
    std::map<BlockId, int32_t> references;
    for (const Request& request : active)
      for (BlockId block : request.blocks) ++references[block];
    const std::vector<EvictedBlock> contents = cache.contents();
    std::set<BlockId> cached;
    std::set<SnapshotHandle> snapshots;
    for (const EvictedBlock& node : contents) {
      ASSERT_TRUE(cached.insert(node.block).second) << "block " << node.block << " cached twice";
      if (node.snapshot != kNoSnapshot) snapshots.insert(node.snapshot);
    }
    ASSERT_EQ(snapshots, live_snapshots);
    ASSERT_EQ(cache.cached_blocks(), static_cast<int64_t>(cached.size()));
    int64_t free = 0, evictable = 0;
    for (BlockId block = 0; block < pool.total_blocks(); ++block) {
      const int32_t expected = references.count(block) ? references[block] : 0;
      ASSERT_EQ(pool.ref_count(block), expected) << "block " << block;
      ASSERT_EQ(pool.cached(block), cached.count(block) == 1) << "block " << block;
      free += expected == 0 && !cached.count(block);
      evictable += expected == 0 && cached.count(block);
    }
    ASSERT_EQ(pool.free_blocks(), free);
    ASSERT_EQ(pool.evictable_blocks(), evictable);
    ASSERT_EQ(pool.free_blocks() + pool.evictable_blocks() + pool.in_use_blocks(), pool.total_blocks());
  }

  void drain() {
    while (!active.empty()) {
      finish(pool, cache, active.back(), kNoSnapshot);
      active.pop_back();
    }
    drop(cache.evict(pool.total_blocks()));
  }
};

TEST(PrefixCache, RandomOperationsKeepPoolAndTreeConsistent) {
  Simulation simulation(2024);
  int64_t hits = 0;
  for (int i = 0; i < 10000; ++i) {
    simulation.step();
    ASSERT_NO_FATAL_FAILURE(simulation.check()) << "after operation " << i;
    if (!simulation.log.empty() && simulation.log.back().size() == 2 && simulation.log.back()[0] > 0) ++hits;
  }
  EXPECT_GT(simulation.cache.hit_tokens(), 0);
  // The run exercised reuse, eviction under pressure and refusals, not only the easy paths.
  EXPECT_GT(hits, 100);
  EXPECT_GT(simulation.evictions, 100);
  EXPECT_GT(simulation.refused_starts, 10);
  simulation.drain();
  ASSERT_NO_FATAL_FAILURE(simulation.check());
  EXPECT_EQ(simulation.pool.free_blocks(), simulation.pool.total_blocks());
  EXPECT_EQ(simulation.cache.cached_blocks(), 0);
  EXPECT_TRUE(simulation.live_snapshots.empty());
}

TEST(PrefixCache, SameOperationsGiveTheSameCache) {
  Simulation one(99), two(99);
  for (int i = 0; i < 2000; ++i) {
    one.step();
    two.step();
  }
  EXPECT_EQ(one.log, two.log);
  const std::vector<EvictedBlock> a = one.cache.contents(), b = two.cache.contents();
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].block, b[i].block);
    EXPECT_EQ(a[i].snapshot, b[i].snapshot);
  }
  EXPECT_EQ(one.cache.hit_tokens(), two.cache.hit_tokens());
}

}  // namespace
}  // namespace deepinfer::engine
