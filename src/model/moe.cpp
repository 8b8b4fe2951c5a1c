#include "model/moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "model/ops.h"
#include "model/parallel.h"

namespace deepinfer::model {
namespace {

ExpertWeights load_expert(const Weights& weights, const std::string& prefix) {
  return {weights.matrix(prefix + "w1.weight"), weights.matrix(prefix + "w2.weight"), weights.matrix(prefix + "w3.weight")};
}

// The clamped SwiGLU hidden activation of one expert for `tokens` rows: [tokens, I].
void swiglu(const ExpertWeights& expert, const float* x, int64_t tokens, float limit, std::vector<float>& gate,
            std::vector<float>& up) {
  const int64_t inner = expert.w1.rows;
  gate.resize(static_cast<std::size_t>(tokens * inner));
  up.resize(static_cast<std::size_t>(tokens * inner));
  kernels::linear(x, tokens, expert.w1, gate.data());
  kernels::linear(x, tokens, expert.w3, up.data());
  for (std::size_t i = 0; i < gate.size(); ++i) {
    float g = gate[i];
    float u = up[i];
    if (limit > 0) {
      g = std::fmin(g, limit);
      u = std::clamp(u, -limit, limit);
    }
    gate[i] = silu(g) * u;
  }
}

}  // namespace

MoeWeights load_moe(const Weights& weights, const std::string& prefix, const ModelConfig& config, int64_t layer) {
  const std::string ffn = prefix + "ffn.";
  MoeWeights out;
  out.gate = weights.matrix(ffn + "gate.weight");
  if (config.is_hash_moe_layer(layer)) {
    out.tid2eid = weights.integers(ffn + "gate.tid2eid");
  } else {
    out.bias = weights.floats(ffn + "gate.bias");
  }
  const int64_t experts = config.routed_experts_of(layer);
  for (int64_t e = 0; e < experts; ++e)
    out.experts.push_back(load_expert(weights, ffn + "experts." + std::to_string(e) + "."));
  if (config.n_shared_experts > 0) out.shared.push_back(load_expert(weights, ffn + "shared_experts."));
  out.scoring = config.scoring_func;
  out.top_k = config.num_experts_per_tok;
  if (config.is_mtp_layer(layer) && config.dspark) out.top_k = config.dspark->num_experts_per_tok;
  out.gate_temperature = static_cast<float>(config.gate_temperature);
  if (config.family == ModelFamily::V41) {
    out.renormalize = config.norm_topk_prob && out.top_k > 1;
    out.renormalize_eps = 1e-20f;
    out.weight_before_down = true;
  } else {
    out.renormalize = config.scoring_func != ScoringFunc::Softmax;
  }
  out.routed_scaling = static_cast<float>(config.routed_scaling_factor);
  out.swiglu_limit = static_cast<float>(config.swiglu_limit);
  for (int32_t id : out.tid2eid)
    if (id < 0 || id >= experts) fail(weights.path(), ": ", ffn, "gate.tid2eid names expert ", id, " of ", experts);
  return out;
}

void moe_forward(const MoeWeights& weights, const float* x, const int32_t* token_ids, int64_t tokens, float* out,
                 std::vector<Routing>* routing) {
  const int64_t experts = weights.gate.rows;
  const int64_t model_dim = weights.gate.cols;
  const int64_t k = weights.top_k;
  std::vector<float> scores(static_cast<std::size_t>(tokens * experts));
  kernels::linear(x, tokens, weights.gate, scores.data());

  std::vector<Routing> decisions(static_cast<std::size_t>(tokens));
  std::vector<int32_t> order(static_cast<std::size_t>(experts));
  std::vector<float> biased(static_cast<std::size_t>(experts));
  for (int64_t t = 0; t < tokens; ++t) {
    float* row = scores.data() + t * experts;
    if (weights.gate_temperature != 1.0f)
      for (int64_t e = 0; e < experts; ++e) row[e] /= weights.gate_temperature;
    switch (weights.scoring) {
      case ScoringFunc::SqrtSoftplus:
        for (int64_t e = 0; e < experts; ++e) row[e] = std::sqrt(softplus(row[e]));
        break;
      case ScoringFunc::Sigmoid:
        for (int64_t e = 0; e < experts; ++e) row[e] = sigmoid(row[e]);
        break;
      case ScoringFunc::Softmax: softmax(row, experts); break;
    }
    Routing& decision = decisions[t];
    if (!weights.tid2eid.empty()) {
      const int64_t table_rows = static_cast<int64_t>(weights.tid2eid.size()) / k;
      if (token_ids[t] < 0 || token_ids[t] >= table_rows) fail("token id ", token_ids[t], " outside tid2eid's ", table_rows, " rows");
      decision.experts.assign(weights.tid2eid.begin() + token_ids[t] * k, weights.tid2eid.begin() + (token_ids[t] + 1) * k);
    } else {
      // The bias steers only the choice; ties go to the lower expert id.
      for (int64_t e = 0; e < experts; ++e) biased[e] = row[e] + weights.bias[e];
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
        return biased[a] != biased[b] ? biased[a] > biased[b] : a < b;
      });
      decision.experts.assign(order.begin(), order.begin() + k);
    }
    std::sort(decision.experts.begin(), decision.experts.end());
    float sum = 0.0f;
    for (int32_t e : decision.experts) {
      decision.weights.push_back(row[e]);
      sum += row[e];
    }
    for (float& w : decision.weights)
      w = (weights.renormalize ? w / (sum + weights.renormalize_eps) : w) * weights.routed_scaling;
  }

  // Each expert runs once over the tokens routed to it; a token's contributions are then summed
  // in ascending expert order (fixed per token, independent of the batch). Experts are independent
  // items on the pool (their linears then run on the thread that took them: same bits, being
  // batch and thread invariant); the shared experts, which take every token, are the first items,
  // so the pool's chunks are claimed largest first.
  std::vector<std::vector<std::pair<int64_t, int64_t>>> members(static_cast<std::size_t>(experts));  // (token, slot)
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t s = 0; s < k; ++s) members[decisions[t].experts[s]].emplace_back(t, s);
  std::vector<int64_t> active;
  int64_t routed_rows = 0;
  for (int64_t e = 0; e < experts; ++e)
    if (!members[e].empty()) {
      active.push_back(e);
      routed_rows += static_cast<int64_t>(members[e].size());
    }
  const int64_t shared_count = static_cast<int64_t>(weights.shared.size());
  const int64_t items = static_cast<int64_t>(active.size()) + shared_count;
  std::vector<float> contributions(static_cast<std::size_t>(tokens * k * model_dim));
  std::vector<float> shared_out(static_cast<std::size_t>(shared_count * tokens * model_dim));
  const int64_t inner = weights.experts.empty() ? 0 : weights.experts.front().w1.rows;
  const int64_t work_per_item = (routed_rows + shared_count * tokens) / std::max<int64_t>(items, 1) * 3 * inner * model_dim;
  parallel_items(items, work_per_item, [&](int64_t begin, int64_t end) {
    std::vector<float> rows, gate, up;
    for (int64_t item = begin; item < end; ++item) {
      if (item < shared_count) {  // shared expert `item`
        const ExpertWeights& shared = weights.shared[item];
        swiglu(shared, x, tokens, weights.swiglu_limit, gate, up);
        kernels::linear(gate.data(), tokens, shared.w2, shared_out.data() + item * tokens * model_dim);
        continue;
      }
      const int64_t e = active[item - shared_count];
      const auto& expert_members = members[e];
      const int64_t count = static_cast<int64_t>(expert_members.size());
      rows.resize(static_cast<std::size_t>(count * model_dim));
      for (int64_t m = 0; m < count; ++m)
        std::copy_n(x + expert_members[m].first * model_dim, model_dim, rows.data() + m * model_dim);
      swiglu(weights.experts[e], rows.data(), count, weights.swiglu_limit, gate, up);
      const int64_t expert_inner = weights.experts[e].w1.rows;
      if (weights.weight_before_down)
        for (int64_t m = 0; m < count; ++m) {
          const float w = decisions[expert_members[m].first].weights[expert_members[m].second];
          for (int64_t i = 0; i < expert_inner; ++i) gate[m * expert_inner + i] *= w;
        }
      // The down projection lands in `rows` (free by now), then scales into each token's slot.
      rows.resize(static_cast<std::size_t>(count * model_dim));
      kernels::linear(gate.data(), count, weights.experts[e].w2, rows.data());
      for (int64_t m = 0; m < count; ++m) {
        const auto [t, s] = expert_members[m];
        const float w = weights.weight_before_down ? 1.0f : decisions[t].weights[s];  // x1 is exact
        float* slot = contributions.data() + (t * k + s) * model_dim;
        for (int64_t c = 0; c < model_dim; ++c) slot[c] = rows[m * model_dim + c] * w;
      }
    }
  });
  std::fill(out, out + tokens * model_dim, 0.0f);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t s = 0; s < k; ++s)
      for (int64_t c = 0; c < model_dim; ++c) out[t * model_dim + c] += contributions[(t * k + s) * model_dim + c];
  for (int64_t index = 0; index < shared_count; ++index)
    for (int64_t i = 0; i < tokens * model_dim; ++i) out[i] += shared_out[index * tokens * model_dim + i];
  if (routing) *routing = std::move(decisions);
}

}  // namespace deepinfer::model
