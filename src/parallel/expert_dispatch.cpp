#include "parallel/expert_dispatch.h"

#include <cstddef>

#include "core/error.h"

namespace deepinfer::parallel {

DispatchPlan plan_dispatch(const ExpertPlacement& placement, std::span<const int32_t> experts, int64_t top_k,
                           std::span<const int32_t> source_gpu, int64_t gpus_per_node) {
  const int64_t gpus = placement.gpus, per_gpu = placement.slots_per_gpu();
  if (top_k <= 0) fail("expert dispatch: top_k ", top_k);
  if (gpus_per_node <= 0 || gpus % gpus_per_node != 0)
    fail("expert dispatch: ", gpus, " GPUs in nodes of ", gpus_per_node);
  const auto pairs = static_cast<int64_t>(experts.size());
  if (pairs % top_k != 0 || pairs / top_k != static_cast<int64_t>(source_gpu.size()))
    fail("expert dispatch: ", pairs, " pairs of top-", top_k, " for ", source_gpu.size(), " tokens");
  DispatchPlan plan;
  plan.slot_of_pair.assign(static_cast<std::size_t>(pairs), -1);
  plan.pairs_of_gpu.resize(static_cast<std::size_t>(gpus));
  std::vector<int64_t> turn(static_cast<std::size_t>(placement.logical_experts), 0);
  std::vector<int32_t> candidates;
  for (int64_t p = 0; p < pairs; ++p) {
    const int32_t expert = experts[static_cast<std::size_t>(p)];
    if (expert == -1) continue;
    if (expert < 0 || expert >= placement.logical_experts)
      fail("expert dispatch: pair ", p, " routes to expert ", expert, " of ", placement.logical_experts);
    const int32_t source = source_gpu[static_cast<std::size_t>(p / top_k)];
    if (source < 0 || source >= gpus) fail("expert dispatch: token ", p / top_k, " on GPU ", source, " of ", gpus);
    const std::vector<int32_t>& replicas = placement.replicas[static_cast<std::size_t>(expert)];
    // Its own GPU, else its node, else anywhere.
    candidates.clear();
    for (const int32_t slot : replicas)
      if (slot / per_gpu == source) candidates.push_back(slot);
    if (candidates.empty())
      for (const int32_t slot : replicas)
        if (slot / per_gpu / gpus_per_node == source / gpus_per_node) candidates.push_back(slot);
    if (candidates.empty()) candidates = replicas;
    int64_t& next = turn[static_cast<std::size_t>(expert)];
    const int32_t slot = candidates[static_cast<std::size_t>(next++ % static_cast<int64_t>(candidates.size()))];
    plan.slot_of_pair[static_cast<std::size_t>(p)] = slot;
    plan.pairs_of_gpu[static_cast<std::size_t>(slot / per_gpu)].push_back(p);
  }
  return plan;
}

}  // namespace deepinfer::parallel
