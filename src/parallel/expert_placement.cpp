#include "parallel/expert_placement.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <numeric>

#include "core/error.h"

namespace deepinfer::parallel {
namespace {

using Index = std::vector<int64_t>;

std::size_t at(int64_t i) { return static_cast<std::size_t>(i); }

// EPLB's balanced_packing: items into `packs` packs of equal item counts, heaviest item first,
// each into the lightest pack that still has room (ties to the lower pack). pack[i], rank[i]:
// item i's pack and its place in it.
void balanced_packing(const std::vector<double>& weight, int64_t packs, Index& pack, Index& rank) {
  const auto items = static_cast<int64_t>(weight.size());
  const int64_t per_pack = items / packs;
  pack.assign(at(items), 0);
  rank.assign(at(items), 0);
  if (per_pack == 1) {
    std::iota(pack.begin(), pack.end(), 0);
    return;
  }
  Index order(at(items));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return weight[at(a)] > weight[at(b)]; });
  std::vector<double> pack_weight(at(packs), 0.0);
  Index pack_items(at(packs), 0);
  for (const int64_t item : order) {
    int64_t best = -1;
    for (int64_t p = 0; p < packs; ++p)
      if (pack_items[at(p)] < per_pack && (best < 0 || pack_weight[at(p)] < pack_weight[at(best)])) best = p;
    pack[at(item)] = best;
    rank[at(item)] = pack_items[at(best)]++;
    pack_weight[at(best)] += weight[at(item)];
  }
}

// EPLB's replicate_experts: `slots` physical experts over weight.size() logical ones, one each,
// then every further slot to the expert whose load per replica is largest (ties to the lower).
void replicate_experts(const std::vector<double>& weight, int64_t slots, Index& slot_expert, Index& count) {
  const auto experts = static_cast<int64_t>(weight.size());
  slot_expert.resize(at(slots));
  std::iota(slot_expert.begin(), slot_expert.begin() + experts, 0);
  count.assign(at(experts), 1);
  for (int64_t s = experts; s < slots; ++s) {
    int64_t best = 0;
    for (int64_t e = 1; e < experts; ++e)
      if (weight[at(e)] / static_cast<double>(count[at(e)]) > weight[at(best)] / static_cast<double>(count[at(best)]))
        best = e;
    slot_expert[at(s)] = best;
    ++count[at(best)];
  }
}

Index inverse(const Index& permutation) {
  Index out(permutation.size());
  for (std::size_t i = 0; i < permutation.size(); ++i) out[at(permutation[i])] = static_cast<int64_t>(i);
  return out;
}

// rebalance_experts_hierarchical for one layer: slot -> logical expert, node-major, then GPU, then
// the slot's place on its GPU.
Index hierarchical(const std::vector<double>& load, int64_t slots, int64_t groups, int64_t nodes, int64_t gpus) {
  const auto experts = static_cast<int64_t>(load.size());
  const int64_t group_size = experts / groups, groups_per_node = groups / nodes;
  const int64_t experts_per_node = experts / nodes, slots_per_node = slots / nodes;
  const int64_t gpus_per_node = gpus / nodes, slots_per_gpu = slots / gpus;

  // 1. Groups to nodes; "node-local" expert numbering: node n's experts are [n * experts_per_node, ...).
  std::vector<double> group_load(at(groups), 0.0);
  for (int64_t e = 0; e < experts; ++e) group_load[at(e / group_size)] += load[at(e)];
  Index group_pack, group_rank;
  balanced_packing(group_load, nodes, group_pack, group_rank);
  Index to_local(at(experts));
  for (int64_t e = 0; e < experts; ++e) {
    const int64_t g = e / group_size;
    to_local[at(e)] = (group_pack[at(g)] * groups_per_node + group_rank[at(g)]) * group_size + e % group_size;
  }
  const Index from_local = inverse(to_local);

  Index slot_to_logical(at(slots));
  for (int64_t node = 0; node < nodes; ++node) {
    // 2. Replicas within the node.
    std::vector<double> local_load(at(experts_per_node));
    for (int64_t i = 0; i < experts_per_node; ++i) local_load[at(i)] = load[at(from_local[at(node * experts_per_node + i)])];
    Index slot_expert, count;
    replicate_experts(local_load, slots_per_node, slot_expert, count);
    // 3. The node's slots to its GPUs by the load each replica carries.
    std::vector<double> slot_load(at(slots_per_node));
    for (int64_t s = 0; s < slots_per_node; ++s)
      slot_load[at(s)] = local_load[at(slot_expert[at(s)])] / static_cast<double>(count[at(slot_expert[at(s)])]);
    Index slot_pack, slot_rank;
    balanced_packing(slot_load, gpus_per_node, slot_pack, slot_rank);
    for (int64_t s = 0; s < slots_per_node; ++s) {
      const int64_t placed = node * slots_per_node + slot_pack[at(s)] * slots_per_gpu + slot_rank[at(s)];
      slot_to_logical[at(placed)] = from_local[at(node * experts_per_node + slot_expert[at(s)])];
    }
  }
  return slot_to_logical;
}

ExpertPlacement from_slots(const Index& slot_to_logical, int64_t experts, int64_t gpus) {
  ExpertPlacement p;
  p.logical_experts = experts;
  p.gpus = gpus;
  p.replicas.resize(at(experts));
  for (std::size_t s = 0; s < slot_to_logical.size(); ++s) {
    p.physical_to_logical.push_back(static_cast<int32_t>(slot_to_logical[s]));
    p.replicas[at(slot_to_logical[s])].push_back(static_cast<int32_t>(s));
  }
  return p;
}

}  // namespace

ExpertPlacement contiguous_placement(int64_t logical_experts, int64_t gpus) {
  if (logical_experts <= 0 || gpus <= 0 || logical_experts % gpus != 0)
    fail("expert placement: ", logical_experts, " experts do not divide evenly over ", gpus, " GPUs");
  Index slots(at(logical_experts));
  std::iota(slots.begin(), slots.end(), 0);
  return from_slots(slots, logical_experts, gpus);
}

ExpertPlacement balance_experts(std::span<const double> load, const BalanceShape& shape) {
  const auto experts = static_cast<int64_t>(load.size());
  const int64_t slots = shape.physical_experts, groups = shape.groups, nodes = shape.nodes, gpus = shape.gpus;
  if (experts <= 0) fail("EPLB: no experts");
  if (groups <= 0 || nodes <= 0 || gpus <= 0)
    fail("EPLB: groups (", groups, "), nodes (", nodes, ") and GPUs (", gpus, ") must be positive");
  if (slots < experts) fail("EPLB: ", slots, " physical experts for ", experts, " logical ones");
  if (experts % groups != 0) fail("EPLB: ", experts, " experts do not divide into ", groups, " groups");
  if (gpus % nodes != 0) fail("EPLB: ", gpus, " GPUs do not divide over ", nodes, " nodes");
  if (slots % gpus != 0) fail("EPLB: ", slots, " physical experts do not divide over ", gpus, " GPUs");
  for (int64_t e = 0; e < experts; ++e)
    if (!(std::isfinite(load[at(e)]) && load[at(e)] >= 0)) fail("EPLB: expert ", e, " has load ", load[at(e)]);
  const std::vector<double> weights(load.begin(), load.end());
  // Hierarchical where the groups (and so the experts and slots) divide among the nodes; else one
  // node holding every GPU, as eplb.py's global policy.
  const bool by_node = groups % nodes == 0 && experts % nodes == 0 && slots % nodes == 0;
  const Index slot_to_logical =
      by_node ? hierarchical(weights, slots, groups, nodes, gpus) : hierarchical(weights, slots, 1, 1, gpus);
  return from_slots(slot_to_logical, experts, gpus);
}

std::vector<double> gpu_loads(const ExpertPlacement& placement, std::span<const double> load) {
  if (static_cast<int64_t>(load.size()) != placement.logical_experts)
    fail("expert placement: ", load.size(), " loads for ", placement.logical_experts, " experts");
  std::vector<double> out(at(placement.gpus), 0.0);
  const int64_t per_gpu = placement.slots_per_gpu();
  for (int64_t s = 0; s < placement.physical_experts(); ++s) {
    const int32_t e = placement.physical_to_logical[at(s)];
    out[at(s / per_gpu)] += load[at(e)] / static_cast<double>(placement.replicas[at(e)].size());
  }
  return out;
}

double load_imbalance(const ExpertPlacement& placement, std::span<const double> load) {
  const std::vector<double> loads = gpu_loads(placement, load);
  const double total = std::accumulate(loads.begin(), loads.end(), 0.0);
  if (total <= 0) return 1.0;
  return *std::max_element(loads.begin(), loads.end()) / (total / static_cast<double>(loads.size()));
}

}  // namespace deepinfer::parallel
