// Expert placement (parallel/expert_placement.h): the contiguous placement, DeepSeek's EPLB against
// its published example, the invariants of any balanced placement (every expert placed, slots
// even over the GPUs, a node's experts from whole groups), the balance it reaches on a skewed
// load, and the refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "core/error.h"
#include "parallel/expert_placement.h"

namespace deepinfer::parallel {
namespace {

TEST(ExpertPlacement, ContiguousIsOneSlotEachInOrder) {
  const ExpertPlacement p = contiguous_placement(12, 4);
  EXPECT_EQ(p.slots_per_gpu(), 3);
  for (int32_t e = 0; e < 12; ++e) {
    EXPECT_EQ(p.physical_to_logical[static_cast<std::size_t>(e)], e);
    EXPECT_EQ(p.replicas[static_cast<std::size_t>(e)], std::vector<int32_t>{e});
  }
  const std::vector<double> load = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 13};
  EXPECT_EQ(gpu_loads(p, load), (std::vector<double>{3, 3, 3, 15}));
  EXPECT_DOUBLE_EQ(load_imbalance(p, load), 15.0 / 6.0);
  EXPECT_THROW(contiguous_placement(10, 4), Error);
}

// The example of github.com/deepseek-ai/EPLB (README and example.py): two layers of 12 experts in
// 4 groups, 16 physical experts on 2 nodes of 4 GPUs; its printed phy2log.
TEST(ExpertPlacement, BalanceMatchesDeepSeeksPublishedExample) {
  const std::vector<std::vector<double>> weight = {{90, 132, 40, 61, 104, 165, 39, 4, 73, 56, 183, 86},
                                                   {20, 107, 104, 64, 19, 197, 187, 157, 172, 86, 16, 27}};
  const std::vector<std::vector<int32_t>> want = {{5, 6, 5, 7, 8, 4, 3, 4, 10, 9, 10, 2, 0, 1, 11, 1},
                                                  {7, 10, 6, 8, 6, 11, 8, 9, 2, 4, 5, 1, 5, 0, 3, 1}};
  const BalanceShape shape{16, 4, 2, 8};
  for (std::size_t layer = 0; layer < weight.size(); ++layer)
    EXPECT_EQ(balance_experts(weight[layer], shape).physical_to_logical, want[layer]) << "layer " << layer;
}

// Every logical expert placed at least once; each GPU the same number of slots; replicas
// consistent with the slot map; hierarchically, every node's logical experts are whole groups.
void expect_valid(const ExpertPlacement& p, const BalanceShape& shape, int64_t experts, bool by_node) {
  ASSERT_EQ(p.physical_experts(), shape.physical_experts);
  ASSERT_EQ(p.logical_experts, experts);
  int64_t slots = 0;
  for (int64_t e = 0; e < experts; ++e) {
    const std::vector<int32_t>& r = p.replicas[static_cast<std::size_t>(e)];
    ASSERT_FALSE(r.empty()) << "expert " << e << " has no slot";
    EXPECT_TRUE(std::is_sorted(r.begin(), r.end()));
    for (const int32_t s : r) EXPECT_EQ(p.physical_to_logical[static_cast<std::size_t>(s)], e);
    slots += static_cast<int64_t>(r.size());
  }
  EXPECT_EQ(slots, shape.physical_experts);
  if (!by_node) return;
  const int64_t slots_per_node = shape.physical_experts / shape.nodes, group_size = experts / shape.groups;
  for (int64_t node = 0; node < shape.nodes; ++node) {
    std::set<int64_t> groups;
    for (int64_t s = node * slots_per_node; s < (node + 1) * slots_per_node; ++s)
      groups.insert(p.physical_to_logical[static_cast<std::size_t>(s)] / group_size);
    for (const int64_t g : groups)
      for (int64_t other = 0; other < shape.nodes; ++other) {
        if (other == node) continue;
        for (int64_t s = other * slots_per_node; s < (other + 1) * slots_per_node; ++s) {
          EXPECT_NE(p.physical_to_logical[static_cast<std::size_t>(s)] / group_size, g)
              << "group " << g << " on nodes " << node << " and " << other;
        }
      }
  }
}

// A Zipf-like load (expert ranks shuffled): EPLB's placement is valid and far better balanced than
// the contiguous one, with and without nodes, at V4.1-Flash's 384 experts.
TEST(ExpertPlacement, BalancesASkewedLoad) {
  std::mt19937 rng(3);
  constexpr int64_t kExperts = 384;
  std::vector<double> load(kExperts);
  for (int64_t r = 0; r < kExperts; ++r) load[static_cast<std::size_t>(r)] = 1e5 / std::pow(static_cast<double>(r + 1), 0.9);
  std::shuffle(load.begin(), load.end(), rng);
  for (const BalanceShape shape : {BalanceShape{384 + 32, 8, 2, 16}, BalanceShape{384 + 64, 8, 1, 32},
                                   BalanceShape{384 + 16, 1, 1, 8}, BalanceShape{384 + 40, 8, 4, 8}}) {
    const ExpertPlacement p = balance_experts(load, shape);
    const bool by_node = shape.groups % shape.nodes == 0;
    expect_valid(p, shape, kExperts, by_node);
    const double before = load_imbalance(contiguous_placement(kExperts, shape.gpus), load);
    const double after = load_imbalance(p, load);
    EXPECT_LT(after, 1.15) << shape.physical_experts << " slots on " << shape.gpus << " GPUs, " << shape.nodes
                           << " nodes (contiguous: " << before << ")";
    EXPECT_LT(after, before);
  }
}

// The same input gives the same placement; equal loads give every GPU the same load.
TEST(ExpertPlacement, DeterministicAndEvenOnUniformLoad) {
  const std::vector<double> uniform(64, 5.0);
  const BalanceShape shape{64, 4, 2, 8};
  const ExpertPlacement a = balance_experts(uniform, shape), b = balance_experts(uniform, shape);
  EXPECT_EQ(a.physical_to_logical, b.physical_to_logical);
  EXPECT_DOUBLE_EQ(load_imbalance(a, uniform), 1.0);
  const std::vector<double> none(64, 0.0);
  expect_valid(balance_experts(none, BalanceShape{72, 4, 2, 8}), BalanceShape{72, 4, 2, 8}, 64, true);
  EXPECT_DOUBLE_EQ(load_imbalance(a, none), 1.0);
}

TEST(ExpertPlacement, RefusesShapesThatDoNotDivide) {
  const std::vector<double> load(12, 1.0);
  EXPECT_THROW(balance_experts(load, BalanceShape{10, 4, 2, 2}), Error);  // fewer slots than experts
  EXPECT_THROW(balance_experts(load, BalanceShape{16, 5, 1, 8}), Error);  // 12 experts in 5 groups
  EXPECT_THROW(balance_experts(load, BalanceShape{16, 4, 3, 8}), Error);  // 8 GPUs over 3 nodes
  EXPECT_THROW(balance_experts(load, BalanceShape{18, 4, 2, 8}), Error);  // 18 slots over 8 GPUs
  EXPECT_THROW(balance_experts({}, BalanceShape{16, 1, 1, 8}), Error);
  std::vector<double> bad = load;
  bad[3] = -1;
  EXPECT_THROW(balance_experts(bad, BalanceShape{16, 4, 2, 8}), Error);
  bad[3] = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THROW(balance_experts(bad, BalanceShape{16, 4, 2, 8}), Error);
  EXPECT_THROW(gpu_loads(contiguous_placement(12, 4), std::vector<double>(11, 1.0)), Error);
}

}  // namespace
}  // namespace deepinfer::parallel
