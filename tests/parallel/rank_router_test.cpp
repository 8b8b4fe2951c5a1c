// The attention-DP front router (parallel/rank_router.h): a prompt follows its prefix to the rank
// that has it while loads are balanced, goes to the least-loaded rank when they are not or when
// its recorded prefix is short, forgets the least recently routed blocks past its capacity, and
// is deterministic.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "core/error.h"
#include "parallel/rank_router.h"

namespace deepinfer::parallel {
namespace {

constexpr int64_t kBlock = 4;

// `blocks` full blocks of ids from `first` on, plus `tail` more ids.
std::vector<int32_t> prompt_of(int32_t first, int64_t blocks, int64_t tail = 0) {
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < blocks * kBlock + tail; ++i) ids.push_back(first + static_cast<int32_t>(i));
  return ids;
}

RankRouterOptions small_blocks() {
  RankRouterOptions o;
  o.block_tokens = kBlock;
  o.balance_margin = 8;
  return o;
}

TEST(RankRouter, APromptFollowsItsPrefix) {
  RankRouter router(4, small_blocks());
  const std::vector<int32_t> system = prompt_of(100, 6);
  EXPECT_EQ(router.route(system, std::vector<int64_t>{0, 0, 0, 0}), 0);  // no record: the least loaded, lowest
  EXPECT_EQ(router.route(prompt_of(500, 6), std::vector<int64_t>{1, 0, 0, 0}), 1);  // elsewhere: least loaded
  std::vector<int32_t> follow_up = system;
  for (int32_t i = 0; i < 9; ++i) follow_up.push_back(900 + i);  // the same 6 blocks, 2 more, a tail
  EXPECT_EQ(router.route(follow_up, std::vector<int64_t>{3, 1, 0, 0}), 0);  // 6 of 8 blocks there: rank 0
  EXPECT_EQ(router.recorded_prefix_blocks(0, follow_up), 8);
  EXPECT_EQ(router.recorded_prefix_blocks(1, follow_up), 0);
}

TEST(RankRouter, ImbalanceOrAShortPrefixGoesToTheLeastLoaded) {
  RankRouter router(3, small_blocks());
  const std::vector<int32_t> shared = prompt_of(7, 4);
  EXPECT_EQ(router.route(shared, std::vector<int64_t>{0, 5, 5}), 0);
  // Out of balance (20 - 2 > 8): rank 2 though rank 0 has the whole prefix.
  EXPECT_EQ(router.route(shared, std::vector<int64_t>{20, 9, 2}), 2);
  // 1 block of 4 recorded on rank 0 (under half): the least loaded, rank 1.
  std::vector<int32_t> diverging = prompt_of(7, 1);
  for (int32_t i = 0; i < 3 * kBlock; ++i) diverging.push_back(5000 + i);
  RankRouter fresh(3, small_blocks());
  fresh.route(shared, std::vector<int64_t>{0, 0, 0});
  EXPECT_EQ(fresh.route(diverging, std::vector<int64_t>{2, 1, 3}), 1);
  // Two ranks with the same prefix: the less loaded of them.
  RankRouter twice(3, small_blocks());
  twice.route(shared, std::vector<int64_t>{0, 1, 1});                         // rank 0
  twice.route(shared, std::vector<int64_t>{20, 0, 10});                       // imbalanced: rank 1
  EXPECT_EQ(twice.route(shared, std::vector<int64_t>{4, 3, 0}), 1);         // both have it; rank 1 is lighter
}

TEST(RankRouter, ForgetsTheLeastRecentlyRoutedPastItsCapacity) {
  RankRouterOptions o = small_blocks();
  o.blocks_per_rank = 4;
  RankRouter router(2, o);
  const std::vector<int32_t> a = prompt_of(0, 2), b = prompt_of(1000, 2), c = prompt_of(2000, 2);
  const std::vector<int64_t> rank0_only = {0, 100};  // imbalanced toward rank 0: everything goes there
  router.route(a, rank0_only);
  router.route(b, rank0_only);
  EXPECT_EQ(router.recorded_prefix_blocks(0, a), 2);
  router.route(a, rank0_only);  // a is now the most recent
  router.route(c, rank0_only);  // 6 blocks > 4: b's go
  EXPECT_EQ(router.recorded_prefix_blocks(0, a), 2);
  EXPECT_EQ(router.recorded_prefix_blocks(0, b), 0);
  EXPECT_EQ(router.recorded_prefix_blocks(0, c), 2);
}

TEST(RankRouter, ARankThatIsDownTakesNothingAndARestartedOneIsForgotten) {
  RankRouter router(3, small_blocks());
  const std::vector<int32_t> shared = prompt_of(40, 4);
  EXPECT_EQ(router.route(shared, std::vector<int64_t>{0, 1, 1}), 0);
  // Rank 0 holds the prefix and is the least loaded, but it is down: the least loaded of the rest.
  EXPECT_EQ(router.route(shared, std::vector<int64_t>{0, 2, 1}, {false, true, true}), 2);
  // Back up: the prefix is on 0 and 2; 0 is lighter.
  EXPECT_EQ(router.route(shared, std::vector<int64_t>{1, 0, 2}), 0);
  router.forget(0);  // restarted with an empty cache
  EXPECT_EQ(router.recorded_prefix_blocks(0, shared), 0);
  EXPECT_EQ(router.route(shared, std::vector<int64_t>{1, 0, 2}), 2);  // only rank 2's record is left
  EXPECT_THROW(router.route(shared, std::vector<int64_t>{0, 0, 0}, {false, false, false}), Error);
  EXPECT_THROW(router.route(shared, std::vector<int64_t>{0, 0, 0}, {true, true}), Error);
  EXPECT_THROW(router.forget(3), Error);
}

TEST(RankRouter, IdleRanksFillTheirRecordsEvenly) {
  RankRouter router(3, small_blocks());
  const std::vector<int64_t> idle = {0, 0, 0};
  EXPECT_EQ(router.route(prompt_of(100, 3), idle), 0);
  EXPECT_EQ(router.route(prompt_of(200, 3), idle), 1);  // rank 0 has three blocks, 1 and 2 none
  EXPECT_EQ(router.route(prompt_of(300, 2), idle), 2);
  EXPECT_EQ(router.route(prompt_of(400, 2), idle), 2);  // 3, 3 and 2 blocks: the smallest record
  EXPECT_EQ(router.route(prompt_of(200, 3, 1), idle), 1);  // a prefix still goes where it is
  EXPECT_EQ(router.route(prompt_of(500, 1), std::vector<int64_t>{1, 0, 0}), 1);  // load first: 1 (3) beats 2 (4)
}

TEST(RankRouter, SameInputsSameRoutes) {
  const auto run = [] {
    RankRouter router(4, small_blocks());
    std::vector<int64_t> routes;
    std::vector<int64_t> loads(4, 0);
    for (int32_t i = 0; i < 40; ++i) {
      const int64_t r = router.route(prompt_of(i % 5 * 100, 3 + i % 3, i % 2), loads);
      routes.push_back(r);
      ++loads[static_cast<std::size_t>(r)];
    }
    return routes;
  };
  EXPECT_EQ(run(), run());
}

TEST(RankRouter, RefusesBadInput) {
  EXPECT_THROW(RankRouter(0), Error);
  RankRouterOptions o;
  o.block_tokens = 0;
  EXPECT_THROW(RankRouter(2, o), Error);
  RankRouter router(2, small_blocks());
  EXPECT_THROW(router.route(prompt_of(0, 1), std::vector<int64_t>{0}), Error);
  EXPECT_THROW(router.recorded_prefix_blocks(2, prompt_of(0, 1)), Error);
  EXPECT_EQ(router.route({}, std::vector<int64_t>{3, 1}), 1);  // no full block: the least loaded
}

}  // namespace
}  // namespace deepinfer::parallel
