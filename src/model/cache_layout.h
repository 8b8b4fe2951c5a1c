#pragma once
// What one sequence's cache costs, in the formats the model stores it (docs/MODELS.md, "State per
// layer" tables), split the way the cache manager holds it (docs/ENGINE.md, "Cache and prefix cache"):
//  * paged, per token: the compressed entries and index keys a layer owns. They grow with the
//    context and never change once written, so they live in fixed-size pool blocks of
//    `block_tokens` tokens and are shared between sequences by the prefix cache;
//  * fixed, per sequence: the sliding window's last W - 1 K=V rows, the compressors' open windows
//    and overlap rows, the Engram look-back. Bounded whatever the length, and rewritten by every
//    token, so a resume needs a snapshot of them taken at the block boundary.
#include <cstdint>
#include <vector>

#include "io/model_config.h"

namespace deepinfer::model {

// One decoder layer's share. Bytes are exact stored sizes (codes + scale bytes, or 4 per f32).
struct LayerCacheBytes {
  int64_t layer = 0;
  int64_t window_row_bytes = 0;  // one K=V row of the sliding window
  // Compressed entries owned by this layer (V4 ratio > 0 layers, V4.1 kv sources); 0 otherwise.
  int64_t ratio = 0;            // one entry (and one index key) per `ratio` tokens
  int64_t entry_bytes = 0;      // one compressed entry
  int64_t index_key_bytes = 0;  // one index key (V4 CSA indexer compressor entry, V4.1 kv source key)
  // Where this layer's rows sit inside one block payload (paged_rows.h): entry slot s at
  // entry_offset + s * entry_bytes, key slot s at index_key_offset + s * index_key_bytes. A block
  // owns the entries whose window closes inside it: ceil(block_tokens / ratio) slots of each.
  int64_t entry_offset = 0;
  int64_t entry_slots = 0;
  int64_t index_key_offset = 0;
  int64_t index_key_slots = 0;
  // One token's row in the compressors' open windows: kv + gate of every compressor of the layer.
  int64_t compressor_row_bytes = 0;
  bool overlap = false;  // V4 CSA: the last closed window's `ratio` rows are kept too
};

struct CacheLayout {
  int64_t block_tokens = 0;
  std::vector<LayerCacheBytes> layers;  // decoder layers only: MTP / DSpark layers are not run yet

  // Paged payload of one block: for every owning layer, room for the entries (and keys) whose
  // window closes inside `block_tokens` consecutive tokens at a block-aligned start. That is
  // ceil(block_tokens / ratio) entries, exact when `ratio` divides `block_tokens`. The sum of
  // every layer's regions, laid out layer by layer (entries, then keys).
  int64_t block_bytes = 0;
  // The context's growth rate, sum over layers of (entry + key) / ratio: what a cache that is
  // not paged would need per token. block_bytes / block_tokens exceeds it only by the ceil above.
  double bytes_per_token = 0;

  int64_t window_bytes = 0;  // (sliding_window - 1) rows, every layer
  // Compressor rows held at the worst position (r - 1 open rows, plus r overlap rows).
  int64_t compressor_tail_bytes = 0;
  // Compressor rows held at the worst block boundary (a multiple of block_tokens): open rows are
  // position mod r, at most r - gcd(block_tokens, r); zero when r divides block_tokens.
  int64_t boundary_compressor_tail_bytes = 0;
  int64_t engram_lookback_bytes = 0;  // (max_ngram_size - 1) compressed ids, int64

  // Fixed state a running sequence holds besides its blocks.
  int64_t sequence_state_bytes() const { return window_bytes + compressor_tail_bytes + engram_lookback_bytes; }
  // What a snapshot at a block boundary holds: everything a resume there needs besides the blocks.
  int64_t snapshot_bytes() const { return window_bytes + boundary_compressor_tail_bytes + engram_lookback_bytes; }
};

// Throws deepinfer::Error when block_tokens < 1.
CacheLayout cache_layout(const ModelConfig& config, int64_t block_tokens);

}  // namespace deepinfer::model
