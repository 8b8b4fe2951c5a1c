#pragma once
// V4 MoE (v4_arch.md §2.5): router scores (sqrt-softplus, softmax or sigmoid), experts chosen by
// score + bias (top-k layers) or by the token id through tid2eid (hash layers), weights
// renormalised and scaled, SwiGLU experts with the asymmetric clamp, plus the shared expert.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "io/model_config.h"
#include "kernels/kernels.h"
#include "model/weights.h"

namespace deepinfer::model {

struct ExpertWeights {
  kernels::WeightMatrix w1, w2, w3;  // gate [I, D], down [D, I], up [I, D]
};

struct MoeWeights {
  kernels::WeightMatrix gate;   // [experts, D]
  std::vector<float> bias;      // [experts]; empty on hash layers
  std::vector<int32_t> tid2eid; // [vocab, top_k]; empty on top-k layers
  std::vector<ExpertWeights> experts;
  std::vector<ExpertWeights> shared;
  ScoringFunc scoring = ScoringFunc::SqrtSoftplus;
  int64_t top_k = 0;
  float routed_scaling = 1;
  float swiglu_limit = 0;  // <= 0: no clamp
  float gate_temperature = 1;  // router logits are divided by it (V4.1 gate_temp)
  // V4: renormalise the picked scores unless scoring is softmax (model.py), no epsilon, weight
  // applied to the expert's output. V4.1: renormalise when norm_topk_prob and top_k > 1, sum +
  // 1e-20, weight applied to the SwiGLU activation before w2 (the reference's order).
  bool renormalize = true;
  float renormalize_eps = 0;
  bool weight_before_down = false;
};

MoeWeights load_moe(const Weights& weights, const std::string& prefix, const ModelConfig& config, int64_t layer);

// Routing decision of one token: experts in ascending id order, with their weights.
struct Routing {
  std::vector<int32_t> experts;
  std::vector<float> weights;
};

// x: [tokens, D] normed input; token_ids: the tokens' ids (hash routing); out: [tokens, D].
// routing (optional) receives each token's decision.
void moe_forward(const MoeWeights& weights, const float* x, const int32_t* token_ids, int64_t tokens, float* out,
                 std::vector<Routing>* routing);

}  // namespace deepinfer::model
