#include "model/indexer.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "model/ops.h"
#include "model/parallel.h"

namespace deepinfer::model {

IndexerWeights load_indexer(const Weights& weights, const std::string& prefix, const ModelConfig& config, int64_t ratio) {
  IndexerWeights out{weights.matrix(prefix + "wq_b.weight"),
                     weights.matrix(prefix + "weights_proj.weight"),
                     load_compressor(weights, prefix + "compressor.", ratio, config.index_head_dim, /*overlap=*/true,
                                     static_cast<float>(config.rms_norm_eps)),
                     config.index_n_heads,
                     config.index_head_dim,
                     config.index_topk};
  if (out.wq_b.rows != out.heads * out.head_dim || out.weights_proj.rows != out.heads)
    fail(weights.path(), ": indexer ", prefix, " does not have ", out.heads, " heads of ", out.head_dim);
  return out;
}

std::vector<std::vector<int64_t>> index_select(const IndexerWeights& weights, const RopeTable& rope, IndexerState& state,
                                               const float* x, const float* q_residual, int64_t tokens,
                                               int64_t first_position) {
  const int64_t heads = weights.heads;
  const int64_t d = weights.head_dim;
  const int64_t ratio = weights.compressor.ratio;
  std::vector<float> q(static_cast<std::size_t>(tokens * heads * d));
  std::vector<float> head_weights(static_cast<std::size_t>(tokens * heads));
  kernels::linear(q_residual, tokens, weights.wq_b, q.data());
  kernels::linear(x, tokens, weights.weights_proj, head_weights.data());
  const float score_scale = 1.0f / std::sqrt(static_cast<float>(d));
  const float weight_scale = 1.0f / std::sqrt(static_cast<float>(heads));

  // Every entry closing inside the chunk exists before scoring; query t reads only those whose
  // window ended at or before t.
  compress(weights.compressor, rope, state.compressor, x, tokens, first_position);
  const int64_t key_count = state.compressor.entries.size();
  std::vector<float> keys(static_cast<std::size_t>(key_count * d));
  state.compressor.entries.read_rows(0, key_count, keys.data());
  parallel_items(tokens * heads, 4 * d, [&](int64_t begin, int64_t end) {
    for (int64_t pair = begin; pair < end; ++pair) rope.apply(q.data() + pair * d, d, first_position + pair / heads);
  });
  // Scores of every (token, visible entry) pair, each reduced over heads on its own, so the pairs
  // split across threads: a decode step's one token spreads its entries, a prefill its tokens.
  std::vector<int64_t> score_offset(static_cast<std::size_t>(tokens + 1), 0);
  for (int64_t t = 0; t < tokens; ++t) score_offset[t + 1] = score_offset[t] + (first_position + t + 1) / ratio;
  std::vector<float> scores(static_cast<std::size_t>(score_offset[tokens]));
  parallel_items(score_offset[tokens], 2 * heads * d, [&](int64_t begin, int64_t end) {
    int64_t t = std::upper_bound(score_offset.begin(), score_offset.end(), begin) - score_offset.begin() - 1;
    for (int64_t pair = begin; pair < end; ++pair) {
      while (pair >= score_offset[t + 1]) ++t;
      const float* token_q = q.data() + t * heads * d;
      const float* key = keys.data() + (pair - score_offset[t]) * d;
      float score = 0.0f;
      for (int64_t h = 0; h < heads; ++h) {
        const float relu = std::max(dot(token_q + h * d, key, d), 0.0f) * score_scale;
        score += relu * (head_weights[t * heads + h] * weight_scale);
      }
      scores[pair] = score;
    }
  });
  std::vector<std::vector<int64_t>> selected(static_cast<std::size_t>(tokens));
  parallel_items(tokens, score_offset[tokens] / tokens * 8 + 1, [&](int64_t begin, int64_t end) {
    std::vector<int64_t> order;
    for (int64_t t = begin; t < end; ++t) {
      const int64_t visible = score_offset[t + 1] - score_offset[t];
      const float* token_scores = scores.data() + score_offset[t];
      const int64_t keep = std::min(weights.topk, visible);
      order.resize(static_cast<std::size_t>(visible));
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + keep, order.end(), [&](int64_t a, int64_t b) {
        return token_scores[a] != token_scores[b] ? token_scores[a] > token_scores[b] : a < b;
      });
      selected[t].assign(order.begin(), order.begin() + keep);
      std::sort(selected[t].begin(), selected[t].end());
    }
  });
  return selected;
}

}  // namespace deepinfer::model
