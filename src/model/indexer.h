#pragma once
// The lightning indexer of CSA layers (v4_arch.md §2.4.2): its own overlapping ratio-4 compressor
// at index_head_dim builds index keys; query t scores every entry whose window closed at or before
// t, score = sum_h w_h * relu(q_h . k) * index_head_dim^-0.5, and keeps the top index_topk.
//
// Causal by construction: only visible entries are ever scored, so appending tokens cannot change
// an earlier query's choice. Exact score ties go to the lower entry index (a fixed rule, the same
// for every sequence length).
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "model/compressor.h"
#include "model/rope.h"
#include "model/weights.h"

namespace deepinfer::model {

struct IndexerWeights {
  kernels::WeightMatrix wq_b;          // [heads * head_dim, q_lora_rank]
  kernels::WeightMatrix weights_proj;  // [heads, D]
  CompressorWeights compressor;
  int64_t heads = 0;
  int64_t head_dim = 0;
  int64_t topk = 0;
};

IndexerWeights load_indexer(const Weights& weights, const std::string& prefix, const ModelConfig& config, int64_t ratio);

struct IndexerState {
  CompressorState compressor;
};

// x: [tokens, D] sublayer input; q_residual: [tokens, q_lora_rank] (the attention's normed low-rank
// query). Returns, per token, the selected entry indices in ascending order.
std::vector<std::vector<int64_t>> index_select(const IndexerWeights& weights, const RopeTable& rope, IndexerState& state,
                                               const float* x, const float* q_residual, int64_t tokens,
                                               int64_t first_position);

}  // namespace deepinfer::model
