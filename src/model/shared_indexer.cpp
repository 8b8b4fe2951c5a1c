#include "model/shared_indexer.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "model/fake_quant.h"
#include "model/ops.h"
#include "model/parallel.h"

namespace deepinfer::model {
namespace {

// The first `keep` indices of `scores` by descending score, exact ties to the lower index, then
// sorted ascending.
std::vector<int64_t> top_indices(const std::vector<float>& scores, const std::vector<int64_t>& allowed, int64_t keep) {
  std::vector<int64_t> order = allowed;
  keep = std::min<int64_t>(keep, static_cast<int64_t>(order.size()));
  std::partial_sort(order.begin(), order.begin() + keep, order.end(), [&](int64_t a, int64_t b) {
    return scores[a] != scores[b] ? scores[a] > scores[b] : a < b;
  });
  order.resize(static_cast<std::size_t>(keep));
  std::sort(order.begin(), order.end());
  return order;
}

}  // namespace

IndexKeyWeights load_index_keys(const Weights& weights, const std::string& indexer_prefix) {
  return {weights.matrix(indexer_prefix + "wk.weight"), weights.floats(indexer_prefix + "k_norm.weight")};
}

IndexQueryWeights load_index_queries(const Weights& weights, const std::string& indexer_prefix,
                                     const ModelConfig& config, int64_t layer) {
  IndexQueryWeights out;
  out.wq_b = weights.matrix(indexer_prefix + "wq_b.weight");
  out.weights_proj = weights.matrix(indexer_prefix + "weights_proj.weight");
  out.heads = config.index_n_heads;
  out.head_dim = config.index_head_dim;
  out.topk = config.index_topk;
  out.candidate_source = layer == config.candidate_source_layer_id;
  out.uses_candidates = config.candidate_source_layer_id >= 0 && config.candidate_source_layer_id < layer;
  out.candidate_topk_blocks = config.candidate_topk_blocks;
  out.candidate_block_size = config.candidate_block_size;
  if (out.wq_b.rows != out.heads * out.head_dim || out.weights_proj.rows != out.heads)
    fail(weights.path(), ": indexer ", indexer_prefix, " does not have ", out.heads, " heads of ", out.head_dim);
  if ((out.candidate_source || out.uses_candidates) && (out.candidate_block_size <= 0 || out.candidate_topk_blocks <= 0))
    fail("config: candidate_source_layer_id is set but candidate_block_size / candidate_topk_blocks are not positive");
  return out;
}

CompressedGroupState new_group_state(int64_t head_dim, int64_t index_head_dim, const LayerCacheBytes& layout) {
  CompressedGroupState group;
  group.entries = PagedRows(CacheFormat::Fp4E4m3x16, head_dim, layout.ratio, layout.entry_offset, layout.entry_slots);
  group.index_keys = PagedRows(CacheFormat::Fp4Ue8m0x32, index_head_dim, layout.ratio, layout.index_key_offset,
                               layout.index_key_slots);
  if (group.entries.row_bytes() != layout.entry_bytes || group.index_keys.row_bytes() != layout.index_key_bytes)
    fail("cache layout of layer ", layout.layer, " does not match its kv source's rows");
  return group;
}

void publish_latents(const Latents& latents, const IndexKeyWeights& keys, const RopeTable& rope, int64_t ratio, float eps,
                     CompressedGroupState& group) {
  const int64_t d = group.entries.width();
  const int64_t index_d = group.index_keys.width();
  if (latents.count == 0) return;
  if (latents.first_entry != group.entries.size())
    fail("compressed group holds ", group.entries.size(), " entries, latents start at ", latents.first_entry);
  std::vector<float> key(static_cast<std::size_t>(latents.count * index_d));
  kernels::linear(latents.values.data(), latents.count, keys.wk, key.data());
  std::vector<float> entry(static_cast<std::size_t>(d));
  for (int64_t g = 0; g < latents.count; ++g) {
    const int64_t position = (latents.first_entry + g) * ratio;
    float* k = key.data() + g * index_d;
    rms_norm(k, index_d, keys.k_norm.data(), eps, k);
    rope.apply(k, index_d, position);
    group.index_keys.write(group.index_keys.size(), k);
    std::copy_n(latents.values.data() + g * d, d, entry.data());
    rope.apply(entry.data(), d, position);
    group.entries.write(group.entries.size(), entry.data());
  }
}

void select_entries(const IndexQueryWeights& weights, const RopeTable& rope, const CompressedGroupState& group,
                    int64_t ratio, const float* x, const float* q_residual, int64_t tokens, int64_t first_position,
                    ChunkSelections& selections) {
  const int64_t heads = weights.heads;
  const int64_t d = weights.head_dim;
  if (group.index_keys.width() != d) fail("index keys of width ", group.index_keys.width(), ", queries of ", d);
  std::vector<float> q(static_cast<std::size_t>(tokens * heads * d));
  std::vector<float> head_weights(static_cast<std::size_t>(tokens * heads));
  kernels::linear(q_residual, tokens, weights.wq_b, q.data());
  kernels::linear(x, tokens, weights.weights_proj, head_weights.data());
  const float score_scale = 1.0f / std::sqrt(static_cast<float>(d));
  const float weight_scale = 1.0f / std::sqrt(static_cast<float>(heads));

  // Keys visible to the last token of the call, decoded once.
  const int64_t last_visible = std::min(group.index_keys.size(), (first_position + tokens) / ratio);
  std::vector<float> keys(static_cast<std::size_t>(last_visible * d));
  for (int64_t w = 0; w < last_visible; ++w) group.index_keys.read(w, keys.data() + w * d);

  std::vector<std::vector<int64_t>> picks(static_cast<std::size_t>(tokens));
  std::vector<std::vector<char>> candidates;
  if (weights.candidate_source) candidates.resize(static_cast<std::size_t>(tokens));
  const bool filter = weights.uses_candidates && selections.candidate_blocks.has_value();
  if (filter && static_cast<int64_t>(selections.candidate_blocks->size()) != tokens)
    fail("candidate blocks published for ", selections.candidate_blocks->size(), " tokens, not ", tokens);
  auto visible_of = [&](int64_t t) { return std::min(last_visible, (first_position + t + 1) / ratio); };
  parallel_items(tokens * heads, 8 * d, [&](int64_t begin, int64_t end) {
    for (int64_t pair = begin; pair < end; ++pair) {
      float* head_q = q.data() + pair * d;
      rope.apply(head_q, d, first_position + pair / heads);
      fake_quantize(CacheFormat::Fp4Ue8m0x32, std::span<float>(head_q, static_cast<std::size_t>(d)));
    }
  });
  // Scores of every (token, visible key) pair, each reduced over heads on its own, so the pairs
  // split across threads: a decode step's one token spreads its keys, a prefill its tokens.
  std::vector<int64_t> score_offset(static_cast<std::size_t>(tokens + 1), 0);
  for (int64_t t = 0; t < tokens; ++t) score_offset[t + 1] = score_offset[t] + visible_of(t);
  std::vector<float> all_scores(static_cast<std::size_t>(score_offset[tokens]));
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
      all_scores[pair] = score;
    }
  });
  parallel_items(tokens, score_offset[tokens] / tokens * 8 + 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores;
    std::vector<int64_t> allowed;
    for (int64_t t = begin; t < end; ++t) {
      const int64_t visible = visible_of(t);
      scores.assign(all_scores.begin() + score_offset[t], all_scores.begin() + score_offset[t + 1]);
      allowed.resize(static_cast<std::size_t>(visible));
      std::iota(allowed.begin(), allowed.end(), 0);
      if (weights.candidate_source && visible > 0) {
        const int64_t size = weights.candidate_block_size;
        const int64_t blocks = (visible + size - 1) / size;
        std::vector<float> block_scores(static_cast<std::size_t>(blocks), -INFINITY);
        for (int64_t w = 0; w < visible; ++w) block_scores[w / size] = std::fmax(block_scores[w / size], scores[w]);
        block_scores[(visible - 1) / size] = INFINITY;  // the newest, partly filled block stays in
        std::vector<int64_t> all_blocks(static_cast<std::size_t>(blocks));
        std::iota(all_blocks.begin(), all_blocks.end(), 0);
        candidates[t].assign(static_cast<std::size_t>(blocks), 0);
        for (int64_t b : top_indices(block_scores, all_blocks, weights.candidate_topk_blocks)) candidates[t][b] = 1;
      } else if (filter) {
        const auto& kept = (*selections.candidate_blocks)[t];
        std::erase_if(allowed, [&](int64_t w) {
          const auto block = static_cast<std::size_t>(w / weights.candidate_block_size);
          return block >= kept.size() || !kept[block];
        });
      }
      picks[t] = top_indices(scores, allowed, weights.topk);
    }
  });
  selections.picks = std::move(picks);
  if (weights.candidate_source) selections.candidate_blocks = std::move(candidates);
}

}  // namespace deepinfer::model
