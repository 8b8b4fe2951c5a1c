// The expert-parallel routing table (parallel/expert_dispatch.h): every pair to a slot that holds
// its expert, the token's own GPU and then its node preferred, a hot expert's pairs spread evenly
// over its replicas, the per-GPU lists consistent with the slots, and bad input refused.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "core/error.h"
#include "parallel/expert_dispatch.h"
#include "parallel/expert_placement.h"

namespace deepinfer::parallel {
namespace {

// 8 experts on 4 GPUs (2 nodes of 2), 3 slots a GPU: expert 0 has four replicas (one per GPU),
// expert 1 two (GPUs 1 and 3).
ExpertPlacement hand_placement() {
  ExpertPlacement p;
  p.logical_experts = 8;
  p.gpus = 4;
  p.physical_to_logical = {0, 2, 3, 0, 1, 4, 0, 5, 6, 0, 1, 7};
  p.replicas.resize(8);
  for (std::size_t s = 0; s < p.physical_to_logical.size(); ++s)
    p.replicas[static_cast<std::size_t>(p.physical_to_logical[s])].push_back(static_cast<int32_t>(s));
  return p;
}

TEST(ExpertDispatch, PrefersTheTokensGpuThenItsNode) {
  const ExpertPlacement p = hand_placement();
  // Token 0 on GPU 2 (node 1): expert 0 has a replica there (slot 6); expert 1 has none on GPU 2
  // but one on node 1 (slot 10, GPU 3). Token 1 on GPU 0: expert 1 is on GPUs 1 (node 0) and 3.
  const std::vector<int32_t> experts = {0, 1, 1, 7};
  const DispatchPlan plan = plan_dispatch(p, experts, 2, std::vector<int32_t>{2, 0}, 2);
  EXPECT_EQ(plan.slot_of_pair, (std::vector<int32_t>{6, 10, 4, 11}));
  EXPECT_EQ(plan.pairs_of_gpu, (std::vector<std::vector<int64_t>>{{}, {2}, {0}, {1, 3}}));
}

// 400 tokens on GPU 2 for expert 1 (replicas on GPUs 1 and 3), with the four GPUs in one node:
// no replica on their GPU, both on their node, so they alternate.
TEST(ExpertDispatch, SpreadsAHotExpertOverItsReplicas) {
  const ExpertPlacement p = hand_placement();
  const std::vector<int32_t> experts(400, 1), source(400, 2);
  const DispatchPlan plan = plan_dispatch(p, experts, 1, source, 4);
  EXPECT_EQ(plan.pairs_of_gpu[1].size(), 200u);
  EXPECT_EQ(plan.pairs_of_gpu[3].size(), 200u);
  EXPECT_EQ(plan.slot_of_pair[0], 4);
  EXPECT_EQ(plan.slot_of_pair[1], 10);
}

// Random routing over an EPLB placement: every pair lands on a slot holding its expert, and each
// GPU's list is exactly the pairs whose slot it holds.
TEST(ExpertDispatch, EveryPairReachesItsExpert) {
  std::mt19937 rng(5);
  std::vector<double> load(64);
  for (auto& l : load) l = std::uniform_real_distribution<double>(0, 100)(rng);
  const ExpertPlacement p = balance_experts(load, BalanceShape{80, 8, 2, 8});
  constexpr int64_t kTokens = 300, kTopK = 6;
  std::vector<int32_t> experts, source;
  for (int64_t t = 0; t < kTokens; ++t) {
    source.push_back(static_cast<int32_t>(rng() % 8));
    for (int64_t j = 0; j < kTopK; ++j) experts.push_back(j == 5 && t % 7 == 0 ? -1 : static_cast<int32_t>(rng() % 64));
  }
  const DispatchPlan plan = plan_dispatch(p, experts, kTopK, source, 4);
  std::vector<std::vector<int64_t>> want(8);
  for (std::size_t i = 0; i < experts.size(); ++i) {
    const int32_t slot = plan.slot_of_pair[i];
    if (experts[i] < 0) {
      EXPECT_EQ(slot, -1);
      continue;
    }
    ASSERT_GE(slot, 0);
    EXPECT_EQ(p.physical_to_logical[static_cast<std::size_t>(slot)], experts[i]) << "pair " << i;
    want[static_cast<std::size_t>(slot / p.slots_per_gpu())].push_back(static_cast<int64_t>(i));
  }
  EXPECT_EQ(plan.pairs_of_gpu, want);
}

TEST(ExpertDispatch, RefusesBadInput) {
  const ExpertPlacement p = hand_placement();
  EXPECT_THROW(plan_dispatch(p, std::vector<int32_t>{8}, 1, std::vector<int32_t>{0}, 2), Error);   // no expert 8
  EXPECT_THROW(plan_dispatch(p, std::vector<int32_t>{-2}, 1, std::vector<int32_t>{0}, 2), Error);  // -2
  EXPECT_THROW(plan_dispatch(p, std::vector<int32_t>{0}, 1, std::vector<int32_t>{4}, 2), Error);   // no GPU 4
  EXPECT_THROW(plan_dispatch(p, std::vector<int32_t>{0, 1, 2}, 2, std::vector<int32_t>{0}, 2), Error);
  EXPECT_THROW(plan_dispatch(p, std::vector<int32_t>{0}, 1, std::vector<int32_t>{0}, 3), Error);  // 4 GPUs in 3s
}

}  // namespace
}  // namespace deepinfer::parallel
