#include "backend/cuda/device_attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <vector>

#include "backend/cuda/arena_slots.h"
#include "backend/cuda/device_layer_state.h"
#include "core/error.h"
#include "kernels/cuda/attention_kernels.h"
#include "kernels/cuda/cuda_kernels.h"

namespace deepinfer::backend::cuda {
namespace {

namespace k = kernels::cuda;

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) fail("CUDA: ", what, ": ", cudaGetErrorString(status));
}

k::RowFormat row_format(model::CacheFormat format) { return static_cast<k::RowFormat>(format); }

// Where entry w of `rows` (a layer's paged region) sits in `pages` (model/paged_rows.h).
std::byte* entry_address(const model::CachePages& pages, const model::PagedRows& rows, int64_t w) {
  const int64_t block_tokens = pages.block_tokens;
  const int64_t k = ((w + 1) * rows.ratio() - 1) / block_tokens;
  const int64_t slot = w - k * block_tokens / rows.ratio();
  if (slot < 0 || slot >= rows.slots()) fail("cache entry ", w, " maps to slot ", slot, " of ", rows.slots());
  if (k >= static_cast<int64_t>(pages.blocks.size()) || pages.blocks[k] == nullptr)
    fail("cache block ", k, " is missing from the sequence's block table");
  return pages.blocks[k] + rows.region_offset() + slot * rows.row_bytes();
}

// A fixed-capacity launch's entry lists padded to `slots` (compressor_pool skips a negative
// segment; store_rows skips a null destination).
void pad_entries(int64_t slots, std::vector<int32_t>& segment, std::vector<int32_t>& index,
                 std::vector<int32_t>& position, std::vector<std::byte*>& destinations) {
  const auto size = static_cast<std::size_t>(slots);
  segment.resize(size, -1);
  index.resize(size, 0);
  position.resize(size, 0);
  destinations.resize(size, nullptr);
}

// No row of the call sees more keys: its window (up to the last position a row can have: the
// graph's context bound, which its replays keep to, or the call's own) and its entries (those
// visible at that position, and no more than the picks' stride where it picks).
int32_t max_row_keys(const k::AttentionParams& params, std::span<const model::AttentionSegment> segments,
                     int64_t context_bound) {
  int64_t last_position = context_bound > 0 ? context_bound - 1 : 0;
  for (const model::AttentionSegment& segment : segments)
    last_position = std::max(last_position, segment.first_position + segment.rows - 1);
  int64_t keys = std::min<int64_t>(params.window, last_position + 1);
  if (params.compressed == k::CompressedKeys::Visible && params.ratio > 0) keys += (last_position + 1) / params.ratio;
  if (params.compressed == k::CompressedKeys::Picked) {
    const int64_t ratio = params.entries.ratio;  // of the entries picked from
    keys += ratio > 0 ? std::min<int64_t>(params.pick_stride, (last_position + 1) / ratio) : params.pick_stride;
  }
  return static_cast<int32_t>(std::min<int64_t>(keys, std::numeric_limits<int32_t>::max()));
}

k::PagedRegion region_of(const model::CachePages& pages, const model::PagedRows& rows) {
  k::PagedRegion region;
  region.block_tokens = pages.block_tokens;
  region.ratio = rows.ratio();
  region.offset = rows.region_offset();
  region.row_bytes = rows.row_bytes();
  region.width = static_cast<int32_t>(rows.width());
  region.format = row_format(rows.format());
  return region;
}

}  // namespace

// One layer of one call: the segments as the kernels see them and their device states.
struct DeviceAttention::Layer {
  const model::AttentionWeights& weights;
  std::span<const model::AttentionSegment> segments;
  const AttentionInputs& in;
  std::vector<DeviceLayerState*> states;
  std::vector<k::SegmentRows> host_rows;
  const k::SegmentRows* rows = nullptr;      // device
  const int32_t* row_segment = nullptr;      // device
  const float* inv_freq = nullptr;
  int64_t rope_dims = 0;
  int64_t max_visible = 0;  // the largest (p + 1) / ratio among the rows
  bool picked = false;      // this layer's picks are in picks_
};

std::byte* const* DeviceAttention::block_table(const model::CachePages* pages) {
  if (!pages || pages->block_bytes == 0) return nullptr;
  const auto found = tables_.find(pages);
  if (found == tables_.end()) fail("CUDA backend: a segment's block table was not seen at the pass's first layer");
  return found->second;
}

void DeviceAttention::join_window_store() {
  if (!window_store_) return;
  window_store_->join();
  window_store_.reset();
}

void DeviceAttention::restart_window(model::AttentionState& state, int64_t first_position) {
  join_window_store();
  if (!state.backend) {  // not on the device yet: its host form is the state
    state.window.erase_front(state.window.size());
    state.window_first = first_position;
    return;
  }
  auto& device = dynamic_cast<DeviceLayerState&>(*state.backend);
  if (device.compressor.present() || device.indexer.present() || device.latent.ratio > 0)
    fail("decoder window replay restarted a layer that has a compressor");
  device.window_first = first_position;
  device.length = first_position;
}

int64_t DeviceAttention::entry_slots(int64_t count) const {
  if (context_bound_ == 0) return count;
  // A decode step closes at most one entry per sequence and compressor: one slot per row of the
  // bucket.
  if (count > call_rows_) fail("CUDA backend: a fixed-size step closed ", count, " entries in ", call_rows_, " slots");
  return call_rows_;
}

int64_t DeviceAttention::segment_slots(const Layer& layer) const {
  return context_bound_ == 0 ? static_cast<int64_t>(layer.segments.size()) : call_rows_;
}

void DeviceAttention::compress(Layer& layer, const model::CompressorWeights& compressor, bool indexer_keys) {
  const int64_t rows = layer.in.rows;
  const int64_t width = compressor.width();
  const int64_t d = compressor.head_dim;
  const int64_t ratio = compressor.ratio;
  float* kv = arena_.get<float>(kCompressorKv, static_cast<std::size_t>(rows * width));
  float* gate = arena_.get<float>(kCompressorGate, static_cast<std::size_t>(rows * width));
  linear_(layer.in.x, rows, weights_.matrix(compressor.wkv), kv);
  linear_(layer.in.x, rows, weights_.matrix(compressor.wgate), gate);

  std::vector<int32_t> entry_segment, entry_index, entry_position;
  std::vector<std::byte*> destinations;
  std::vector<k::CompressorRing> rings;
  std::vector<int32_t> keep_from;
  for (std::size_t s = 0; s < layer.segments.size(); ++s) {
    const model::AttentionSegment& segment = layer.segments[s];
    DeviceCompressorRing& ring = indexer_keys ? layer.states[s]->indexer : layer.states[s]->compressor;
    const model::PagedRows& stored =
        indexer_keys ? segment.state->indexer.compressor.entries : segment.state->compressor.entries;
    const int64_t closed = (segment.first_position + segment.rows) / ratio;
    for (int64_t w = ring.entries; w < closed; ++w) {
      entry_segment.push_back(static_cast<int32_t>(s));
      entry_index.push_back(static_cast<int32_t>(w));
      entry_position.push_back(static_cast<int32_t>(w * ratio));
      destinations.push_back(entry_address(*segment.pages, stored, w));
    }
    rings.push_back(ring.ring());
    ring.entries = closed;
    keep_from.push_back(static_cast<int32_t>(ring.kept_from()));
  }
  k::CompressorParams params;
  params.ratio = static_cast<int32_t>(ratio);
  params.head_dim = static_cast<int32_t>(d);
  params.width = static_cast<int32_t>(width);
  params.overlap = compressor.overlap;
  params.ape = weights_.floats(compressor.ape);
  params.capacity = static_cast<int32_t>(compressor.overlap ? 2 * ratio : ratio);
  rings.resize(static_cast<std::size_t>(segment_slots(layer)));
  keep_from.resize(rings.size(), 0);
  const k::CompressorRing* device_rings = staging_.put(rings, stream_);
  const int64_t count = entry_slots(static_cast<int64_t>(entry_index.size()));
  pad_entries(count, entry_segment, entry_index, entry_position, destinations);
  if (count > 0) {
    float* pooled = arena_.get<float>(kPooled, static_cast<std::size_t>(count * d));
    k::compressor_pool(params, layer.rows, device_rings, staging_.put(entry_segment, stream_),
                       staging_.put(entry_index, stream_), count, kv, gate, pooled, stream_);
    k::rms_norm_rope(pooled, count, 1, d, weights_.floats(compressor.norm), compressor.eps, layer.rope_dims,
                     layer.inv_freq, staging_.put(entry_position, stream_), stream_);
    k::store_rows(pooled, count, d, k::RowFormat::F32, staging_.put(destinations, stream_),
                  stream_);
  }
  k::compressor_keep(params, layer.rows, device_rings, staging_.put(keep_from, stream_), segment_slots(layer), kv,
                     gate, stream_);
}

// V4.1 kv source: the latents of the groups that close in this call become the group's FP4
// entries and index keys (model/shared_indexer.cpp publish_latents).
void DeviceAttention::publish_latents(Layer& layer, cudaStream_t stream, const LinearRunner& linear) {
  const model::LatentCompressorWeights& latent = *layer.weights.latent_compressor;
  const model::IndexKeyWeights& keys = *layer.weights.index_keys;
  const int64_t rows = layer.in.rows;
  const int64_t d = latent.head_dim;
  const int64_t ratio = latent.ratio;
  float* kv = arena_.get<float>(kCompressorKv, static_cast<std::size_t>(rows * d));
  linear(layer.in.x, rows, weights_.matrix(latent.wkv), kv);
  float* gate = nullptr;
  if (latent.wgate) {
    gate = arena_.get<float>(kCompressorGate, static_cast<std::size_t>(rows * d));
    linear(layer.in.x, rows, weights_.matrix(*latent.wgate), gate);
  }
  std::vector<int32_t> entry_segment, entry_index, entry_position;
  std::vector<std::byte*> entry_destinations, key_destinations;
  std::vector<k::CompressorRing> rings;
  std::vector<int32_t> keep_from;
  for (std::size_t s = 0; s < layer.segments.size(); ++s) {
    const model::AttentionSegment& segment = layer.segments[s];
    DeviceCompressorRing& ring = layer.states[s]->latent;
    const model::CompressedGroupState& group = segment.state->group;
    const int64_t closed = (segment.first_position + segment.rows) / ratio;
    for (int64_t w = ring.entries; w < closed; ++w) {
      entry_segment.push_back(static_cast<int32_t>(s));
      entry_index.push_back(static_cast<int32_t>(w));
      entry_position.push_back(static_cast<int32_t>(w * ratio));
      entry_destinations.push_back(entry_address(*segment.pages, group.entries, w));
      key_destinations.push_back(entry_address(*segment.pages, group.index_keys, w));
    }
    rings.push_back(ring.ring());
    ring.entries = closed;
    keep_from.push_back(static_cast<int32_t>(closed * ratio));
  }
  int64_t count = static_cast<int64_t>(entry_index.size());
  float* latents = kv;  // ratio 1: each row is its own latent, in row order = entry order
  if (ratio > 1) {
    count = entry_slots(count);
    rings.resize(static_cast<std::size_t>(segment_slots(layer)));
    keep_from.resize(rings.size(), 0);
    pad_entries(count, entry_segment, entry_index, entry_position, entry_destinations);
    key_destinations.resize(static_cast<std::size_t>(count), nullptr);
    k::CompressorParams params;
    params.ratio = static_cast<int32_t>(ratio);
    params.head_dim = static_cast<int32_t>(d);
    params.width = static_cast<int32_t>(d);
    params.capacity = static_cast<int32_t>(ratio);
    const k::CompressorRing* device_rings = staging_.put(rings, stream);
    if (count > 0) {
      latents = arena_.get<float>(kPooled, static_cast<std::size_t>(count * d));
      k::compressor_pool(params, layer.rows, device_rings, staging_.put(entry_segment, stream),
                         staging_.put(entry_index, stream), count, kv, gate, latents, stream);
    }
    k::compressor_keep(params, layer.rows, device_rings, staging_.put(keep_from, stream), segment_slots(layer), kv,
                       gate, stream);
  } else {
    if (context_bound_ > 0) {  // the bucket's padding rows close nothing
      count = rows;
      pad_entries(count, entry_segment, entry_index, entry_position, entry_destinations);
      key_destinations.resize(static_cast<std::size_t>(count), nullptr);
    }
    if (count != rows) fail("CUDA backend: a ratio-1 kv source closed ", count, " entries for ", rows, " rows");
  }
  if (count == 0) return;
  k::rms_norm(latents, count, d, weights_.floats(latent.norm), latent.eps, latents, stream);
  // Index keys from the unrotated latent, then the entries from the rotated one.
  const int64_t index_d = keys.wk.rows;
  const int32_t* positions = staging_.put(entry_position, stream);
  float* key_rows = arena_.get<float>(kLatentKeys, static_cast<std::size_t>(count * index_d));
  linear(latents, count, weights_.matrix(keys.wk), key_rows);
  k::rms_norm_rope(key_rows, count, 1, index_d, weights_.floats(keys.k_norm), layer.weights.eps, layer.rope_dims,
                   layer.inv_freq, positions, stream);
  k::store_rows(key_rows, count, index_d, k::RowFormat::Fp4Ue8m0x32,
                staging_.put(key_destinations, stream), stream);
  k::rope(latents, count, 1, d, layer.rope_dims, layer.inv_freq, positions, /*inverse=*/false, stream);
  k::store_rows(latents, count, d, k::RowFormat::Fp4E4m3x16,
                staging_.put(entry_destinations, stream), stream);
}

// The scores of every row against its visible keys, then (candidate source) the kept blocks and
// the top-k. q [rows, heads, head_dim] rotated (V4.1: fake-quantised too).
namespace {
struct Selection {
  int64_t heads = 0, head_dim = 0, ratio = 0, topk = 0;
  const float* q = nullptr;
  const float* head_weights = nullptr;
  k::PagedRegion keys;
};
}  // namespace

void DeviceAttention::index_v4(Layer& layer) {
  const model::IndexerWeights& indexer = *layer.weights.indexer;
  const int64_t rows = layer.in.rows;
  const int64_t heads = indexer.heads;
  const int64_t d = indexer.head_dim;
  float* q = arena_.get<float>(kIndexQuery, static_cast<std::size_t>(rows * heads * d));
  float* head_weights = arena_.get<float>(kIndexWeights, static_cast<std::size_t>(rows * heads));
  linear_(layer.in.q_residual, rows, weights_.matrix(indexer.wq_b), q);
  linear_(layer.in.x, rows, weights_.matrix(indexer.weights_proj), head_weights);
  compress(layer, indexer.compressor, /*indexer_keys=*/true);
  k::rope(q, rows, heads, d, layer.rope_dims, layer.inv_freq, layer.in.positions, /*inverse=*/false, stream_);
  select(layer);
}

void DeviceAttention::select(Layer& layer) {
  const model::AttentionWeights& w = layer.weights;
  const int64_t rows = layer.in.rows;
  const model::AttentionSegment& first = layer.segments.front();
  Selection selection;
  const model::IndexQueryWeights* shared = w.index_queries ? &*w.index_queries : nullptr;
  if (shared) {
    selection.heads = shared->heads;
    selection.head_dim = shared->head_dim;
    selection.ratio = w.ratio;
    selection.topk = shared->topk;
    selection.keys = region_of(*first.pages, first.group.group->index_keys);
  } else {
    selection.heads = w.indexer->heads;
    selection.head_dim = w.indexer->head_dim;
    selection.ratio = w.indexer->compressor.ratio;
    selection.topk = w.indexer->topk;
    selection.keys = region_of(*first.pages, first.state->indexer.compressor.entries);
  }
  selection.q = arena_.get<float>(kIndexQuery, static_cast<std::size_t>(rows * selection.heads * selection.head_dim));
  selection.head_weights = arena_.get<float>(kIndexWeights, static_cast<std::size_t>(rows * selection.heads));
  int64_t max_visible = 0;
  for (int64_t p : layer.in.host_positions) max_visible = std::max(max_visible, (p + 1) / selection.ratio);
  if (context_bound_ > 0) {
    if (max_visible > context_bound_ / selection.ratio)
      fail("CUDA backend: a fixed-size step sees ", max_visible, " entries, past its bound ", context_bound_);
    max_visible = context_bound_ / selection.ratio;
  }
  if (pick_stride_ != 0 && pick_stride_ != selection.topk)
    fail("CUDA backend: index sources of one model pick ", pick_stride_, " and ", selection.topk, " entries");
  pick_stride_ = selection.topk;
  if (!picks_) {
    picks_ = arena_.get<int32_t>(kPicks, static_cast<std::size_t>(std::max<int64_t>(call_rows_ * pick_stride_, 1)));
    pick_count_ = arena_.get<int32_t>(kPickCount, static_cast<std::size_t>(call_rows_));
  }
  int32_t* picks = picks_ + layer.in.first_row * pick_stride_;
  int32_t* pick_count = pick_count_ + layer.in.first_row;
  layer.picked = true;
  if (max_visible == 0) {  // nothing is visible to any row yet
    k::fill(pick_count, rows, 0, stream_);
    return;
  }
  float* scores = arena_.get<float>(kScores, static_cast<std::size_t>(rows * max_visible));
  k::IndexerParams params;
  params.heads = static_cast<int32_t>(selection.heads);
  params.head_dim = static_cast<int32_t>(selection.head_dim);
  params.ratio = static_cast<int32_t>(selection.ratio);
  params.score_scale = 1.0f / std::sqrt(static_cast<float>(selection.head_dim));
  params.weight_scale = 1.0f / std::sqrt(static_cast<float>(selection.heads));
  params.keys = selection.keys;
  params.tensor_cores = tensor_cores_;
  params.max_visible = static_cast<int32_t>(max_visible);
  k::index_scores(params, layer.rows, layer.row_segment, rows, selection.q, selection.head_weights, scores, stream_);

  k::CandidateParams candidates;
  const uint8_t* mask = nullptr;
  if (shared && (shared->candidate_source || shared->uses_candidates)) {
    candidates.block_size = static_cast<int32_t>(shared->candidate_block_size);
    candidates.topk_blocks = static_cast<int32_t>(shared->candidate_topk_blocks);
    candidates.max_blocks = static_cast<int32_t>((max_visible + shared->candidate_block_size - 1) /
                                                 shared->candidate_block_size);
  }
  if (shared && shared->candidate_source) {
    mask_stride_ = candidates.max_blocks;
    candidate_mask_ = arena_.get<uint8_t>(kCandidateMask, static_cast<std::size_t>(call_rows_ * mask_stride_));
    k::candidate_blocks(candidates, layer.rows, layer.row_segment, rows, params.ratio, scores, params.max_visible,
                        candidate_mask_ + layer.in.first_row * mask_stride_, stream_);
  } else if (shared && shared->uses_candidates && candidate_mask_) {
    if (candidates.max_blocks > mask_stride_)
      fail("CUDA backend: an index source sees ", candidates.max_blocks, " candidate blocks, its source ", mask_stride_);
    candidates.max_blocks = static_cast<int32_t>(mask_stride_);
    mask = candidate_mask_ + layer.in.first_row * mask_stride_;
  }
  k::top_k_entries(layer.rows, layer.row_segment, rows, params.ratio, scores, params.max_visible, mask, candidates,
                   static_cast<int32_t>(selection.topk), picks, pick_count, stream_);

  // Traces read the candidate source's blocks from the host's selections.
  if (shared && shared->candidate_source)
    for (const model::AttentionSegment& segment : layer.segments) {
      if (!segment.selected || !segment.group.selections) continue;
      std::vector<uint8_t> host(static_cast<std::size_t>(segment.rows * mask_stride_));
      check(cudaMemcpyAsync(host.data(), candidate_mask_ + (layer.in.first_row + segment.row_begin) * mask_stride_,
                            host.size(), cudaMemcpyDeviceToHost, stream_),
            "download");
      check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
      auto& kept = segment.group.selections->candidate_blocks.emplace();
      for (int64_t t = 0; t < segment.rows; ++t) {
        const int64_t visible = (segment.first_position + t + 1) / selection.ratio;
        const int64_t blocks = (visible + shared->candidate_block_size - 1) / shared->candidate_block_size;
        kept.emplace_back(host.begin() + t * mask_stride_, host.begin() + t * mask_stride_ + blocks);
      }
    }
}

void DeviceAttention::download_picks(Layer& layer, bool picked) {
  for (const model::AttentionSegment& segment : layer.segments) {
    if (!segment.selected) continue;
    segment.selected->assign(static_cast<std::size_t>(segment.rows), {});
    if (!picked) continue;
    const int64_t first = layer.in.first_row + segment.row_begin;
    std::vector<int32_t> picks(static_cast<std::size_t>(segment.rows * pick_stride_));
    std::vector<int32_t> counts(static_cast<std::size_t>(segment.rows));
    check(cudaMemcpyAsync(picks.data(), picks_ + first * pick_stride_, picks.size() * 4, cudaMemcpyDeviceToHost,
                          stream_),
          "download");
    check(cudaMemcpyAsync(counts.data(), pick_count_ + first, counts.size() * 4, cudaMemcpyDeviceToHost, stream_),
          "download");
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    for (int64_t t = 0; t < segment.rows; ++t)
      (*segment.selected)[t].assign(picks.begin() + t * pick_stride_, picks.begin() + t * pick_stride_ + counts[t]);
  }
}

void DeviceAttention::run(const model::AttentionWeights& weights, std::span<const model::AttentionSegment> segments,
                          const AttentionInputs& in, float* attended) {
  join_window_store();
  const int64_t rows = in.rows;
  const int64_t d = weights.head_dim;
  Layer layer{weights, segments, in, {}, {}, nullptr, nullptr, nullptr, 0, 0, false};
  layer.inv_freq = weights_.floats(weights.rope.inv_freq());
  layer.rope_dims = weights.rope.rope_dims();

  // The sequences' block tables, once per pass: they do not change between layers.
  if (!tables_ready_) {
    std::vector<std::byte*> flat;
    int64_t table_stride = 0;
    std::vector<std::pair<const model::CachePages*, std::size_t>> offsets;
    for (const model::AttentionSegment& segment : segments) {
      const model::CachePages* pages = segment.pages;
      if (!pages || pages->block_bytes == 0) continue;
      offsets.emplace_back(pages, flat.size());
      if (context_bound_ == 0) {
        flat.insert(flat.end(), pages->blocks.begin(), pages->blocks.end());
        continue;
      }
      // Fixed size: the blocks of the first context_bound tokens (those past the sequence's
      // length, if any, are never read).
      table_stride = (context_bound_ + pages->block_tokens - 1) / pages->block_tokens;
      const auto held = std::min(pages->blocks.size(), static_cast<std::size_t>(table_stride));
      flat.insert(flat.end(), pages->blocks.begin(), pages->blocks.begin() + static_cast<std::ptrdiff_t>(held));
      flat.resize(flat.size() + static_cast<std::size_t>(table_stride) - held, nullptr);
    }
    // A bucket's padding rows own no table.
    if (context_bound_ > 0) flat.resize(static_cast<std::size_t>(call_rows_ * table_stride), nullptr);
    std::byte** device = staging_.put(flat, stream_);
    for (const auto& [pages, offset] : offsets) tables_[pages] = device + offset;
    tables_ready_ = true;
  }

  std::vector<int32_t> row_segment(static_cast<std::size_t>(rows), -1);  // -1: a bucket's padding row
  for (std::size_t s = 0; s < segments.size(); ++s) {
    const model::AttentionSegment& segment = segments[s];
    DeviceLayerState& state = device_state(*segment.state, weights, setup_stream_);
    if (state.length != segment.first_position)
      fail("attention fed position ", segment.first_position, " after ", state.length, " tokens");
    layer.states.push_back(&state);
    k::SegmentRows described;
    described.row_begin = static_cast<int32_t>(segment.row_begin);
    described.rows = static_cast<int32_t>(segment.rows);
    described.first_position = static_cast<int32_t>(segment.first_position);
    described.window_first = static_cast<int32_t>(state.window_first);
    described.window_ring = state.window_ring();
    described.blocks = block_table(segment.pages);
    layer.host_rows.push_back(described);
    std::fill_n(row_segment.begin() + segment.row_begin, segment.rows, static_cast<int32_t>(s));
  }
  // A bucket's padding segments have no rows (the compressors keep nothing for them).
  layer.host_rows.resize(static_cast<std::size_t>(segment_slots(layer)));
  layer.rows = staging_.put(layer.host_rows, stream_);
  layer.row_segment = staging_.put(row_segment, stream_);

  // The call's own K = V rows, stored as the window stores them (FP8 on V4.1).
  const int64_t row_bytes = layer.states.front()->window_row_bytes();
  const k::RowFormat window_format = row_format(weights.window_format);
  std::byte* call_rows = arena_.get<std::byte>(kCallRows, static_cast<std::size_t>(rows * row_bytes));
  std::vector<std::byte*> call_destinations(static_cast<std::size_t>(rows));
  for (int64_t t = 0; t < rows; ++t) call_destinations[t] = call_rows + t * row_bytes;
  k::store_rows(in.kv, rows, d, window_format, staging_.put(call_destinations, stream_),
                stream_);

  k::AttentionParams params;
  params.heads = static_cast<int32_t>(weights.heads);
  params.head_dim = static_cast<int32_t>(d);
  params.window = static_cast<int32_t>(weights.window);
  params.window_capacity = static_cast<int32_t>(layer.states.front()->window_capacity());
  params.window_row_bytes = row_bytes;
  params.window_format = window_format;
  params.scale = 1.0f / std::sqrt(static_cast<float>(d));
  params.sink = weights_.floats(weights.sink);
  params.call_rows = call_rows;
  params.ratio = static_cast<int32_t>(weights.ratio);
  params.tensor_cores = tensor_cores_;
  const model::AttentionSegment& first = segments.front();
  if (weights.compressor) {
    const OpProfile::Section timed(profile_, "attention.core: compress", stream_);
    compress(layer, *weights.compressor, /*indexer_keys=*/false);
    params.entries = region_of(*first.pages, first.state->compressor.entries);
    params.compressed = k::CompressedKeys::Visible;
  }
  if (weights.indexer) {
    const OpProfile::Section timed(profile_, "attention.core: index", stream_);
    index_v4(layer);
  }
  if (weights.shared_compressed) {
    if (!first.group.group) fail("CSA2 layer run without its group's state");
    // The latents (which the picks read as keys) beside the index queries' projections.
    std::optional<SideBranch> side;
    if (weights.latent_compressor) {
      const OpProfile::Section timed(profile_, "attention.core: latents", stream_);
      if (weights.index_queries) side.emplace(side_);
      publish_latents(layer, side ? side->stream() : stream_, side ? side->linear() : linear_);
    }
    if (weights.index_queries) {
      const OpProfile::Section timed(profile_, "attention.core: select", stream_);
      const model::IndexQueryWeights& queries = *weights.index_queries;
      const int64_t q_count = rows * queries.heads;
      float* q = arena_.get<float>(kIndexQuery, static_cast<std::size_t>(q_count * queries.head_dim));
      float* head_weights = arena_.get<float>(kIndexWeights, static_cast<std::size_t>(rows * queries.heads));
      linear_(in.q_residual, rows, weights_.matrix(queries.wq_b), q);
      linear_(in.x, rows, weights_.matrix(queries.weights_proj), head_weights);
      k::rope(q, rows, queries.heads, queries.head_dim, layer.rope_dims, layer.inv_freq, in.positions,
              /*inverse=*/false, stream_);
      k::fake_quantize_rows(q, q_count, queries.head_dim, k::RowFormat::Fp4Ue8m0x32, stream_);
      if (side) side->join();
      select(layer);
    }
    params.entries = region_of(*first.pages, first.group.group->entries);
  }
  // CSA and CSA2 layers attend their (group's) picks; with no index source yet in this call the
  // reference masks every compressed entry off.
  const bool picks_available = pick_stride_ > 0 && picks_ != nullptr;
  if (weights.indexer || weights.shared_compressed) {
    params.compressed = picks_available ? k::CompressedKeys::Picked : k::CompressedKeys::None;
    params.picks = picks_ + in.first_row * pick_stride_;
    params.pick_count = pick_count_ + in.first_row;
    params.pick_stride = static_cast<int32_t>(pick_stride_);
  }
  {
    const OpProfile::Section timed(profile_, "attention.core: sink", stream_);
    params.max_row_keys = max_row_keys(params, segments, context_bound_);
    params.range_keys = range_keys_;
    const int64_t split_floats = k::sink_attention_on_tensor_cores(params)
                                     ? k::sink_attention_split_floats(rows, params.heads, params.head_dim,
                                                                      params.max_row_keys, params.range_keys)
                                     : 0;
    if (split_floats > 0) params.split_workspace = arena_.get<float>(kSinkSplits, static_cast<std::size_t>(split_floats));
    k::sink_attention(params, layer.rows, layer.row_segment, rows, in.q, attended, stream_);
  }
  k::rope(attended, rows, weights.heads, d, layer.rope_dims, layer.inv_freq, in.positions, /*inverse=*/true, stream_);

  // The window keeps the last W - 1 rows for the next call.
  std::vector<std::byte*> window_destinations(static_cast<std::size_t>(rows), nullptr);
  for (std::size_t s = 0; s < segments.size(); ++s) {
    const model::AttentionSegment& segment = segments[s];
    DeviceLayerState& state = *layer.states[s];
    const int64_t end = segment.first_position + segment.rows;
    const int64_t keep_from = std::max(state.window_first, end - (weights.window - 1));
    for (int64_t p = std::max(segment.first_position, keep_from); p < end; ++p)
      window_destinations[segment.row_begin + p - segment.first_position] =
          state.window_ring() + (p % state.window_capacity()) * row_bytes;
    state.window_first = keep_from;
    state.length = end;
  }
  std::byte* const* destinations = staging_.put(window_destinations, stream_);
  window_store_.emplace(side_);
  k::store_rows(in.kv, rows, d, window_format, destinations, window_store_->stream());
  if (std::any_of(segments.begin(), segments.end(), [](const model::AttentionSegment& s) { return s.selected; }))
    download_picks(layer, (weights.indexer || weights.shared_compressed) && picks_available);
}

}  // namespace deepinfer::backend::cuda
