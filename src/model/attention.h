#pragma once
// V4 attention (v4_arch.md §2.4): low-rank query with q-norm and a per-head unweighted RMS norm,
// one shared K = V head, partial interleaved RoPE, learned per-head sinks, the sliding window
// plus (ratio > 0 layers) compressed entries: all visible ones (HCA) or the indexer's top-k (CSA),
// then the grouped low-rank output projection.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "io/model_config.h"
#include "kernels/kernels.h"
#include "model/compressor.h"
#include "model/indexer.h"
#include "model/rope.h"
#include "model/weights.h"

namespace deepinfer::model {

struct AttentionWeights {
  kernels::WeightMatrix wq_a, wq_b, wkv, wo_b;
  std::vector<kernels::WeightMatrix> wo_a_groups;  // o_groups row slices of wo_a
  std::vector<float> q_norm, kv_norm, sink;
  std::optional<CompressorWeights> compressor;
  std::optional<IndexerWeights> indexer;
  RopeTable rope;
  int64_t heads = 0, head_dim = 0, window = 0, ratio = 0;
  float eps = 0;
};

// prefix: "layers.L." or "mtp.L."; `layer` indexes config's per-layer tables.
AttentionWeights load_attention(const Weights& weights, const std::string& prefix, const ModelConfig& config,
                                int64_t layer);

struct AttentionState {
  std::vector<float> window_kv;  // rows for positions [window_first, window_first + rows)
  int64_t window_first = 0;
  CompressorState compressor;
  IndexerState indexer;
};

// x: [tokens, D] normed sublayer input at positions first_position...; out: [tokens, D].
// selected (optional): receives the indexer's per-token choice on CSA layers.
void attention_forward(const AttentionWeights& weights, AttentionState& state, const float* x, int64_t tokens,
                       int64_t first_position, float* out, std::vector<std::vector<int64_t>>* selected);

}  // namespace deepinfer::model
