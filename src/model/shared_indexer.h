#pragma once
// V4.1 CSA2: the compressed KV and index keys of a group of layers, owned by the group's kv
// source and read by every later layer up to the next source, and the index sources' top-k.
//
//  * kv source: latents (latent_compressor.h) become compressed KV entries
//    FP4(rope(latent) at position entry * ratio; e2m1, e4m3 scale per 16) and index keys
//    FP4(rope(k_norm(wk(latent))); e2m1, ue8m0 scale per 32), both appended to the group state.
//  * index source: q = FP4(rope(wq_b(q_residual))) per indexer head; score of entry w for the
//    query at position p: sum_h relu(q_h . k_w) d^-1/2 * (x weights_proj)_h H^-1/2 over entries
//    w < (p + 1) / ratio; the candidate source keeps the best candidate_topk_blocks blocks of
//    candidate_block_size entries (block score = its best entry, the query's newest block
//    pinned) and later index sources score only inside them; top index_topk, ascending.
//  * other layers reuse the latest index source's picks of the same forward call.
//
// Exact score ties go to the lower entry (or block) index, a rule independent of the sequence
// length, so prefill in any chunks and decode pick the same entries.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "io/model_config.h"
#include "kernels/kernels.h"
#include "model/cache_layout.h"
#include "model/latent_compressor.h"
#include "model/paged_rows.h"
#include "model/rope.h"
#include "model/weights.h"

namespace deepinfer::model {

// Owned by a kv-source layer's state.
struct CompressedGroupState {
  LatentCompressorState compressor;
  PagedRows entries;     // [entries, head_dim], Fp4E4m3x16, in the sequence's cache blocks
  PagedRows index_keys;  // [entries, index_head_dim], Fp4Ue8m0x32, same blocks
};

struct IndexKeyWeights {
  kernels::WeightMatrix wk;  // [index_head_dim, head_dim]
  std::vector<float> k_norm;
};

struct IndexQueryWeights {
  kernels::WeightMatrix wq_b;          // [heads * index_head_dim, q_lora_rank]
  kernels::WeightMatrix weights_proj;  // [heads, D]
  int64_t heads = 0, head_dim = 0, topk = 0;
  bool candidate_source = false;  // publishes the candidate blocks
  bool uses_candidates = false;   // scores only inside them
  int64_t candidate_topk_blocks = 0, candidate_block_size = 0;
};

IndexKeyWeights load_index_keys(const Weights& weights, const std::string& indexer_prefix);
IndexQueryWeights load_index_queries(const Weights& weights, const std::string& indexer_prefix,
                                     const ModelConfig& config, int64_t layer);

// Per forward call: what index sources publish to later layers (one row per token of the call).
struct ChunkSelections {
  std::optional<std::vector<std::vector<int64_t>>> picks;        // ascending entry ids
  std::optional<std::vector<std::vector<char>>> candidate_blocks;  // per token, per block: kept
};

// `layout`: the kv source's regions in a cache block; throws when its row sizes differ.
CompressedGroupState new_group_state(int64_t head_dim, int64_t index_head_dim, const LayerCacheBytes& layout);

// kv source: appends the latents' compressed KV entries and index keys.
void publish_latents(const Latents& latents, const IndexKeyWeights& keys, const RopeTable& rope, int64_t ratio, float eps,
                     CompressedGroupState& group);

// index source: the top-k of each token against the group's keys; writes selections.picks (and,
// at the candidate source, selections.candidate_blocks).
void select_entries(const IndexQueryWeights& weights, const RopeTable& rope, const CompressedGroupState& group,
                    int64_t ratio, const float* x, const float* q_residual, int64_t tokens, int64_t first_position,
                    ChunkSelections& selections);

}  // namespace deepinfer::model
