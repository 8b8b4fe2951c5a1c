#pragma once
// V4 / V4.1 attention (v4_arch.md §2.4, §2.10): low-rank query with q-norm (V4: and a per-head
// unweighted RMS norm; the V4.1 reference has none), one shared K = V head, partial interleaved RoPE, learned per-head sinks,
// the sliding window plus (ratio > 0 layers) compressed entries, then the grouped low-rank output
// projection. V4: the layer's own compressor, all visible entries (HCA) or its indexer's top-k
// (CSA). V4.1 (CSA2): the entries of its group's kv source, picked by the latest index source
// (shared_indexer.h); the window rows are stored FP8 (the reference's fake quantisation).
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "io/model_config.h"
#include "kernels/kernels.h"
#include "model/cache_layout.h"
#include "model/compressor.h"
#include "model/indexer.h"
#include "model/quantized_rows.h"
#include "model/rope.h"
#include "model/shared_indexer.h"
#include "model/weights.h"

namespace deepinfer::model {

struct AttentionWeights {
  kernels::WeightMatrix wq_a, wq_b, wkv, wo_b;
  std::vector<kernels::WeightMatrix> wo_a_groups;  // o_groups row slices of wo_a
  std::vector<float> q_norm, kv_norm, sink;
  std::optional<CompressorWeights> compressor;
  std::optional<IndexerWeights> indexer;
  // V4.1: a kv source's compressor and index-key projection, an index source's query side; any
  // ratio > 0 layer attends its group's picked entries.
  std::optional<LatentCompressorWeights> latent_compressor;
  std::optional<IndexKeyWeights> index_keys;
  std::optional<IndexQueryWeights> index_queries;
  bool shared_compressed = false;
  bool q_head_norm = true;  // V4 only
  CacheFormat window_format = CacheFormat::F32;
  RopeTable rope;
  int64_t heads = 0, head_dim = 0, window = 0, ratio = 0;
  float eps = 0;
};

// prefix: "layers.L." or "mtp.L."; `layer` indexes config's per-layer tables.
AttentionWeights load_attention(const Weights& weights, const std::string& prefix, const ModelConfig& config,
                                int64_t layer);

// A backend's own copy of one layer's state (backend/cuda: in device memory). While a layer has
// one, the backend's copy is the state and the host fields below are not kept up to date: the
// backend gives them back for snapshots (Backend::download_layers) and takes them from a restored
// snapshot (Backend::upload_layers).
struct BackendLayerState {
  virtual ~BackendLayerState() = default;
};

struct AttentionState {
  std::shared_ptr<BackendLayerState> backend;
  QuantizedRows window;  // K = V rows for positions [window_first, window_first + rows)
  int64_t window_first = 0;
  CompressorState compressor;  // V4
  IndexerState indexer;        // V4 CSA
  CompressedGroupState group;  // V4.1 kv source: the group's shared entries and index keys
};

// `layout`: this layer's share of a cache block (its entry and index-key regions); the state's
// paged rows are bound to a block table by SequenceState.
AttentionState new_attention_state(const AttentionWeights& weights, const ModelConfig& config,
                                   const LayerCacheBytes& layout);

// What a V4.1 layer shares with the rest of its group during one forward call.
struct GroupContext {
  CompressedGroupState* group = nullptr;  // the kv source's state (null: no source yet)
  ChunkSelections* selections = nullptr;
};

// One sequence's rows in a batched attention call: rows [row_begin, row_begin + rows) of the
// call's x and out are that sequence's tokens at positions first_position...
struct AttentionSegment {
  AttentionState* state = nullptr;
  GroupContext group;
  int64_t row_begin = 0;
  int64_t rows = 0;
  int64_t first_position = 0;
  CachePages* pages = nullptr;  // the sequence's block table (backends that place rows themselves)
  // Optional: receives the per-token compressed entries attended on CSA / CSA2 layers.
  std::vector<std::vector<int64_t>>* selected = nullptr;
};

// x: [total rows, D] normed sublayer input of every segment; out: [total rows, D]. The
// projections run once over all rows (the weights are read once per call); the window, the
// compressors, the indexer and the attention itself run per segment against its own state. Each
// row's arithmetic is the same whatever else is in the call (kernels/kernels.h: batch-invariant
// linears), so a sequence's output does not depend on its batch.
void attention_forward(const AttentionWeights& weights, std::span<const AttentionSegment> segments, const float* x,
                       int64_t total_rows, float* out);

// attention_forward's three parts, for backends that run the stateless projections themselves
// (backend/cuda) and the stateful middle on the host:
//  * project: q_residual [rows, q_rank] (normed), q [rows, heads, d] (normed per head on V4,
//    rotated), kv [rows, d] (normed, rotated), at the segments' positions;
//  * core: the window store, compressors and indexer of each segment, then every (row, head)'s
//    sink attention over its keys, rotated back: attended [rows, heads, d];
//  * output: the grouped low-rank output projection, attended -> out [rows, D].
struct AttentionProjections {
  std::vector<float> q_residual, q, kv;
};
// Each row's absolute position, checked against the segments (which must tile the rows).
std::vector<int64_t> attention_positions(std::span<const AttentionSegment> segments, int64_t total_rows);
void attention_project(const AttentionWeights& weights, const float* x, std::span<const int64_t> positions,
                       AttentionProjections& out);
void attention_core(const AttentionWeights& weights, std::span<const AttentionSegment> segments, const float* x,
                    std::span<const int64_t> positions, AttentionProjections& projections, float* attended);
void attention_output(const AttentionWeights& weights, const float* attended, int64_t rows, float* out);

// DSpark drafter (docs/MODELS.md, "DSpark drafter"), window-only layers:
//  * store_window_rows: the K = V rows of inputs x [rows, D] (normed sublayer inputs: the fused
//    target taps) at positions window_first + size .., appended to the state's window, which then
//    keeps its last `keep` rows;
//  * draft_block_attention: each segment is one draft block at positions first_position .. whose
//    state's window holds the drafter's context, exactly the positions below first_position. Every
//    block row attends, with the sinks, to the context rows at positions
//    [first_position - window, first_position) and to every row of its own block (no causal mask);
//    the block's rows are not stored.
void store_window_rows(const AttentionWeights& weights, AttentionState& state, const float* x, int64_t rows,
                       int64_t keep);
void draft_block_attention(const AttentionWeights& weights, std::span<const AttentionSegment> segments,
                           const float* x, int64_t total_rows, float* out);
// draft_block_attention's middle, for a backend that projects and outputs elsewhere: from the
// block rows' projections (q [rows, heads, d] normed and rotated, kv [rows, d] normed and rotated,
// as attention_project makes them) to the attended rows [rows, heads, d], rotated back, before the
// output projection.
void draft_block_core(const AttentionWeights& weights, std::span<const AttentionSegment> segments, const float* q,
                      const float* kv, int64_t total_rows, float* attended);

}  // namespace deepinfer::model
