#pragma once
// Where the routed experts of one MoE layer live when experts are spread over several GPUs
// (expert parallelism, issue 16): which logical expert each physical expert slot holds, and how
// the slots divide among the GPUs. Two placements:
//
//   contiguous_placement  no redundancy, expert e on GPU e / (experts / gpus): what every engine
//                         does before it has load statistics.
//   balance_experts       DeepSeek's EPLB (github.com/deepseek-ai/EPLB, eplb.py), from measured
//                         per-expert loads: the heaviest experts get redundant replicas and the
//                         replicas are packed so the GPUs' loads come out even. Hierarchical when
//                         the expert groups divide among the nodes (groups packed to nodes first,
//                         so a token's group-limited routing stays inside a node, then replicas
//                         made and packed to GPUs within each node); global otherwise.
//
// Both are pure functions of their inputs; a layer's placement is computed on the host and
// handed to the devices (the dispatch and the weights follow it).
#include <cstdint>
#include <span>
#include <vector>

namespace deepinfer::parallel {

struct ExpertPlacement {
  int64_t logical_experts = 0;
  int64_t gpus = 0;
  // [physical experts]: slot s holds this logical expert; GPU g holds slots
  // [g * slots_per_gpu, (g + 1) * slots_per_gpu).
  std::vector<int32_t> physical_to_logical;
  // [logical experts]: the slots holding each expert, ascending (at least one).
  std::vector<std::vector<int32_t>> replicas;

  int64_t physical_experts() const { return static_cast<int64_t>(physical_to_logical.size()); }
  int64_t slots_per_gpu() const { return gpus > 0 ? physical_experts() / gpus : 0; }
};

// Expert e on GPU e / (logical / gpus), one slot each. logical must be a positive multiple of gpus.
ExpertPlacement contiguous_placement(int64_t logical_experts, int64_t gpus);

struct BalanceShape {
  int64_t physical_experts = 0;  // slots in all: logical experts + redundant ones, a multiple of gpus
  int64_t groups = 1;            // expert groups of the router (group-limited routing); divides the experts
  int64_t nodes = 1;             // divides gpus
  int64_t gpus = 1;
};

// DeepSeek's EPLB for one layer from load[e] >= 0 (tokens routed to logical expert e over some
// window). Deterministic: ties go to the lower index (experts sorted by load, heaviest first,
// stably; a pack or replica choice among equals takes the first). An Error for shapes that do not
// divide as BalanceShape says, fewer slots than experts, or a negative or non-finite load.
ExpertPlacement balance_experts(std::span<const double> load, const BalanceShape& shape);

// Each GPU's load under a placement: an expert's load split evenly over its replicas (a
// dispatcher sends a token to one of them round-robin), summed per GPU.
std::vector<double> gpu_loads(const ExpertPlacement& placement, std::span<const double> load);

// max / mean of gpu_loads: 1 is perfect balance (1 also for no load at all).
double load_imbalance(const ExpertPlacement& placement, std::span<const double> load);

}  // namespace deepinfer::parallel
