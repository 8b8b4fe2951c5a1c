#include "model/cache_layout.h"

#include <algorithm>
#include <numeric>

#include "core/int_math.h"
#include "core/error.h"
#include "model/fake_quant.h"

namespace deepinfer::model {
namespace {

constexpr int64_t kF32 = 4;

// One stored vector of `width` values, as QuantizedRows lays it out: codes then one scale
// byte per block, or f32 when the width does not block.
int64_t stored_row_bytes(CacheFormat format, int64_t width) {
  if (format == CacheFormat::F32 || !quantizes(format, width)) return width * kF32;
  return code_bytes(format, width) + width / cache_block(format);
}

LayerCacheBytes v4_layer(const ModelConfig& config, int64_t layer) {
  LayerCacheBytes out;
  out.layer = layer;
  out.window_row_bytes = stored_row_bytes(CacheFormat::F32, config.head_dim);
  const AttentionKind kind = config.attention_kind(layer);
  if (kind == AttentionKind::SlidingWindow) return out;
  out.ratio = config.compress_ratio(layer);
  out.entry_bytes = config.head_dim * kF32;
  // Each compressor keeps kv and gate rows of c * d floats, c = 2 for the overlapping CSA scheme.
  if (kind == AttentionKind::CompressedSparse) {
    out.overlap = true;
    out.index_key_bytes = config.index_head_dim * kF32;  // the indexer compressor's entries
    out.compressor_row_bytes = 2 * (2 * config.head_dim) * kF32 + 2 * (2 * config.index_head_dim) * kF32;
  } else {
    out.compressor_row_bytes = 2 * config.head_dim * kF32;
  }
  return out;
}

LayerCacheBytes v41_layer(const ModelConfig& config, int64_t layer) {
  LayerCacheBytes out;
  out.layer = layer;
  out.window_row_bytes = stored_row_bytes(CacheFormat::Fp8Ue8m0x32, config.head_dim);
  // Only kv sources own compressed state; the rest of their group reads it.
  if (!config.is_kv_source(layer)) return out;
  out.ratio = config.compress_ratio(layer);
  out.entry_bytes = stored_row_bytes(CacheFormat::Fp4E4m3x16, config.head_dim);
  out.index_key_bytes = stored_row_bytes(CacheFormat::Fp4Ue8m0x32, config.index_head_dim);
  // Ratio 1 projects each token on its own: no open group.
  if (out.ratio > 1) out.compressor_row_bytes = 2 * config.head_dim * kF32;
  return out;
}


}  // namespace

CacheLayout cache_layout(const ModelConfig& config, int64_t block_tokens) {
  if (block_tokens < 1) fail("cache block of ", block_tokens, " tokens: it must hold at least one token");
  CacheLayout out;
  out.block_tokens = block_tokens;
  for (int64_t layer = 0; layer < config.num_layers; ++layer) {
    LayerCacheBytes bytes = config.family == ModelFamily::V41 ? v41_layer(config, layer) : v4_layer(config, layer);
    out.window_bytes += (config.sliding_window - 1) * bytes.window_row_bytes;
    if (bytes.ratio > 0) {
      const int64_t per_entry = bytes.entry_bytes + bytes.index_key_bytes;
      const int64_t slots = ceil_div(block_tokens, bytes.ratio);
      bytes.entry_offset = out.block_bytes;
      bytes.entry_slots = slots;
      out.block_bytes += slots * bytes.entry_bytes;
      bytes.index_key_offset = out.block_bytes;
      bytes.index_key_slots = bytes.index_key_bytes > 0 ? slots : 0;
      out.block_bytes += bytes.index_key_slots * bytes.index_key_bytes;
      out.bytes_per_token += static_cast<double>(per_entry) / static_cast<double>(bytes.ratio);
      const int64_t overlap_rows = bytes.overlap ? bytes.ratio : 0;
      out.compressor_tail_bytes += (bytes.ratio - 1 + overlap_rows) * bytes.compressor_row_bytes;
      const int64_t boundary_open_rows = bytes.ratio - std::gcd(block_tokens, bytes.ratio);
      out.boundary_compressor_tail_bytes += (boundary_open_rows + overlap_rows) * bytes.compressor_row_bytes;
    }
    out.layers.push_back(bytes);
  }
  if (!config.engram.layer_ids.empty())
    out.engram_lookback_bytes = (config.engram.max_ngram_size - 1) * static_cast<int64_t>(sizeof(int64_t));
  return out;
}

}  // namespace deepinfer::model
