#pragma once
// Where each routed (token, slot) pair of one MoE layer goes under an expert placement: the
// physical expert slot, and so the GPU, that computes it. This is the routing table an
// expert-parallel dispatch (all-to-all) follows; the host form here is the reference the device
// form must match, and what the unit tests check.
//
// Replica choice, when an expert has several: a replica on the token's own GPU if there is one
// (no transfer), else one on its node (no inter-node transfer), else any; among the candidates
// the expert's pairs take them in turn, in pair order, so a hot expert's replicas share its
// tokens evenly and the plan is a function of its inputs alone.
#include <cstdint>
#include <span>
#include <vector>

#include "parallel/expert_placement.h"

namespace deepinfer::parallel {

struct DispatchPlan {
  // [pairs] (pair p = token p / top_k, slot p % top_k): the physical slot computing it, or -1 where
  // the router chose no expert (-1).
  std::vector<int32_t> slot_of_pair;
  // [gpus]: the pairs each GPU computes, ascending: what the all-to-all sends it and what the
  // combine gathers back.
  std::vector<std::vector<int64_t>> pairs_of_gpu;
};

// experts: [tokens * top_k] logical experts (or -1); source_gpu: [tokens] the GPU each token's
// activations live on (attention data parallelism); gpus_per_node divides placement.gpus. An
// Error for an expert or GPU out of range.
DispatchPlan plan_dispatch(const ExpertPlacement& placement, std::span<const int32_t> experts, int64_t top_k,
                           std::span<const int32_t> source_gpu, int64_t gpus_per_node);

}  // namespace deepinfer::parallel
