#include "model/attention.h"

#include <algorithm>
#include <cmath>
#ifdef __AVX2__
#include <immintrin.h>
#endif

#include "core/error.h"
#include "model/fake_quant.h"
#include "model/ops.h"
#include "model/parallel.h"

namespace deepinfer::model {

namespace {

// V4.1 CSA2 roles. Refuses schedules whose sharing the reference leaves undefined: a compressed
// layer before any kv source, a kv source that is not an index source (its keys would never be
// built), a layer reading a group of another ratio, a layer whose picks come from another group.
void load_shared_branch(const Weights& weights, const std::string& attn, const ModelConfig& config, int64_t layer,
                        AttentionWeights& out) {
  const int64_t source = config.kv_source_of(layer);
  const int64_t picker = config.index_source_of(layer);
  if (source < 0) fail("config: layer ", layer, " has compress ratio ", out.ratio, " but no kv source at or before it");
  if (config.compress_ratio(source) != out.ratio)
    fail("config: layer ", layer, " (ratio ", out.ratio, ") reads kv source ", source, " of ratio ",
         config.compress_ratio(source));
  if (config.is_kv_source(layer) && !config.is_index_source(layer))
    fail("config: kv source ", layer, " is not an index source, so its group would have no index keys");
  if (picker < source)
    fail("config: layer ", layer, " would reuse the top-k of layer ", picker, " from before its kv source ", source);
  const int64_t candidates = config.candidate_source_layer_id;
  if (candidates >= 0 && config.is_index_source(layer) && candidates < layer && config.kv_source_of(candidates) != source)
    fail("config: index source ", layer, " filters by the candidate blocks of layer ", candidates,
         ", which belongs to another kv group");
  out.shared_compressed = true;
  if (config.is_kv_source(layer)) {
    out.latent_compressor = load_latent_compressor(weights, attn + "compressor.", out.ratio, out.head_dim, out.eps);
    out.index_keys = load_index_keys(weights, attn + "indexer.");
  }
  if (config.is_index_source(layer)) out.index_queries = load_index_queries(weights, attn + "indexer.", config, layer);
}

}  // namespace

AttentionState new_attention_state(const AttentionWeights& weights, const ModelConfig& config,
                                   const LayerCacheBytes& layout) {
  AttentionState state;
  state.window = QuantizedRows(weights.window_format, weights.head_dim);
  if (weights.latent_compressor) state.group = new_group_state(weights.head_dim, config.index_head_dim, layout);
  if (weights.compressor) {
    const CompressorWeights& main = *weights.compressor;
    state.compressor.entries =
        PagedRows(CacheFormat::F32, main.head_dim, main.ratio, layout.entry_offset, layout.entry_slots);
    if (state.compressor.entries.row_bytes() != layout.entry_bytes || main.ratio != layout.ratio)
      fail("cache layout of layer ", layout.layer, " does not match its compressor's entries");
  }
  if (weights.indexer) {
    const CompressorWeights& keys = weights.indexer->compressor;
    state.indexer.compressor.entries =
        PagedRows(CacheFormat::F32, keys.head_dim, keys.ratio, layout.index_key_offset, layout.index_key_slots);
    if (state.indexer.compressor.entries.row_bytes() != layout.index_key_bytes || keys.ratio != layout.ratio)
      fail("cache layout of layer ", layout.layer, " does not match its indexer's keys");
  }
  return state;
}

AttentionWeights load_attention(const Weights& weights, const std::string& prefix, const ModelConfig& config,
                                int64_t layer) {
  const std::string attn = prefix + "attn.";
  AttentionWeights out;
  out.wq_a = weights.matrix(attn + "wq_a.weight");
  out.wq_b = weights.matrix(attn + "wq_b.weight");
  out.wkv = weights.matrix(attn + "wkv.weight");
  out.wo_b = weights.matrix(attn + "wo_b.weight");
  for (int64_t g = 0; g < config.o_groups; ++g)
    out.wo_a_groups.push_back(weights.matrix_rows(attn + "wo_a.weight", g * config.o_lora_rank, config.o_lora_rank));
  out.q_norm = weights.floats(attn + "q_norm.weight");
  out.kv_norm = weights.floats(attn + "kv_norm.weight");
  out.sink = weights.floats(attn + "attn_sink");
  out.rope = RopeTable::for_layer(config, layer);
  out.heads = config.num_heads;
  out.head_dim = config.head_dim;
  out.window = config.sliding_window;
  out.ratio = config.compress_ratio(layer);
  out.eps = static_cast<float>(config.rms_norm_eps);
  if (config.family == ModelFamily::V41) {
    out.window_format = CacheFormat::Fp8Ue8m0x32;
    out.q_head_norm = false;
    if (out.ratio > 0) load_shared_branch(weights, attn, config, layer, out);
    return out;
  }
  const AttentionKind kind = config.attention_kind(layer);
  if (kind != AttentionKind::SlidingWindow && kind != AttentionKind::CompressedSparse &&
      kind != AttentionKind::HeavilyCompressed)
    fail("layer ", layer, ": attention kind ", attention_kind_name(kind), " is not a V4 kind");
  if (out.ratio > 0) {
    const bool sparse = kind == AttentionKind::CompressedSparse;
    out.compressor = load_compressor(weights, attn + "compressor.", out.ratio, out.head_dim, /*overlap=*/sparse, out.eps);
    if (sparse) out.indexer = load_indexer(weights, attn + "indexer.", config, out.ratio);
  }
  return out;
}

namespace {

// One head's sink attention over `keys` (K = V): softmax over scaled logits plus the sink logit,
// which takes probability mass but contributes no value.
void attend_head(const float* q, const std::vector<const float*>& keys, int64_t d, float scale, float sink,
                 std::vector<float>& logits, float* out) {
  const std::size_t n = keys.size();
  logits.resize(n);
  dots(q, keys.data(), static_cast<int64_t>(n), d, logits.data());
  float max_logit = sink;
  for (std::size_t j = 0; j < n; ++j) {
    logits[j] *= scale;
    // std::fmax without the library call: a NaN logit is skipped, a NaN running max replaced.
    if (logits[j] > max_logit || std::isnan(max_logit)) max_logit = logits[j];
  }
  float denominator = 0.0f;
  for (std::size_t j = 0; j < n; ++j) {
    logits[j] = std::exp(logits[j] - max_logit);
    denominator += logits[j];
  }
  denominator += std::exp(sink - max_logit);
  for (std::size_t j = 0; j < n; ++j) logits[j] /= denominator;
  // The weighted sum of the keys: one multiply-add a key and column, in key order. With AVX2, 64
  // columns at a time with their sums in registers across all keys (the same FMAs as the loop
  // over out[] below, which GCC contracts into FMAs too: the same bits), instead of storing and
  // reloading out[] for every key.
  int64_t e0 = 0;
#ifdef __AVX2__
  for (; e0 + 64 <= d; e0 += 64) {
    __m256 sums[8];
    for (auto& sum : sums) sum = _mm256_setzero_ps();
    for (std::size_t j = 0; j < n; ++j) {
      const __m256 p = _mm256_set1_ps(logits[j]);
      const float* key = keys[j] + e0;
      for (int v = 0; v < 8; ++v) sums[v] = _mm256_fmadd_ps(p, _mm256_loadu_ps(key + 8 * v), sums[v]);
    }
    for (int v = 0; v < 8; ++v) _mm256_storeu_ps(out + e0 + 8 * v, sums[v]);
  }
#endif
  std::fill(out + e0, out + d, 0.0f);
  for (std::size_t j = 0; j < n; ++j)
    for (int64_t e = e0; e < d; ++e) out[e] += logits[j] * keys[j][e];
}

}  // namespace

namespace {

// What one segment's queries read besides the shared projections: its decoded window rows, the
// compressed entries it attends and the per-token picks.
struct SegmentKeys {
  std::vector<float> window;  // rows [window_first, window_first + size) decoded
  int64_t window_first = 0;
  const float* entries = nullptr;
  std::vector<float> decoded_entries;
  std::vector<std::vector<int64_t>> picks;
};

// The stateful half of attention for one segment: the window store, the compressors and the
// indexer. kv holds the segment's projected (normed, rotated) K = V rows.
void update_segment(const AttentionWeights& weights, const AttentionSegment& segment, const float* x,
                    const float* q_residual, const float* kv, SegmentKeys& keys) {
  const int64_t d = weights.head_dim;
  const int64_t tokens = segment.rows;
  const int64_t first_position = segment.first_position;
  AttentionState& state = *segment.state;
  if (state.window.width() != d) fail("attention state was not made for this layer");
  if (state.window_first + state.window.size() != first_position)
    fail("attention fed position ", first_position, " after ", state.window_first + state.window.size(), " tokens");
  for (int64_t t = 0; t < tokens; ++t) state.window.append(kv + t * d);
  // Every stored row the segment's queries can see, decoded once.
  keys.window_first = state.window_first;
  keys.window.resize(static_cast<std::size_t>(state.window.size() * d));
  for (int64_t r = 0; r < state.window.size(); ++r) state.window.read(r, keys.window.data() + r * d);

  if (weights.compressor) {
    compress(*weights.compressor, weights.rope, state.compressor, x, tokens, first_position);
    const int64_t count = state.compressor.entries.size();
    keys.decoded_entries.resize(static_cast<std::size_t>(count * d));
    state.compressor.entries.read_rows(0, count, keys.decoded_entries.data());
    keys.entries = keys.decoded_entries.data();
  }
  if (weights.indexer)
    keys.picks = index_select(*weights.indexer, weights.rope, state.indexer, x, q_residual, tokens, first_position);
  if (weights.shared_compressed) {
    const GroupContext& shared = segment.group;
    if (!shared.group || !shared.selections) fail("CSA2 layer run without its group's state");
    if (weights.latent_compressor) {
      const Latents latents = compress_latents(*weights.latent_compressor, state.group.compressor, x, tokens, first_position);
      publish_latents(latents, *weights.index_keys, weights.rope, weights.ratio, weights.eps, state.group);
    }
    if (weights.index_queries)
      select_entries(*weights.index_queries, weights.rope, *shared.group, weights.ratio, x, q_residual, tokens,
                     first_position, *shared.selections);
    // No index source yet in this call: the reference masks every compressed entry off.
    if (shared.selections->picks) keys.picks = *shared.selections->picks;
    else keys.picks.assign(static_cast<std::size_t>(tokens), {});
    const int64_t count = shared.group->entries.size();
    keys.decoded_entries.resize(static_cast<std::size_t>(count * d));
    std::vector<char> needed(static_cast<std::size_t>(count), 0);
    for (const auto& token_picks : keys.picks)
      for (int64_t w : token_picks) {
        if (w < 0 || w >= count) fail("CSA2 pick ", w, " outside the group's ", count, " entries");
        needed[w] = 1;
      }
    for (int64_t w = 0; w < count; ++w)
      if (needed[w]) shared.group->entries.read(w, keys.decoded_entries.data() + w * d);
    keys.entries = keys.decoded_entries.data();
  }
}

// Keep only the window the segment's next first query can still see.
void trim_window(const AttentionWeights& weights, const AttentionSegment& segment) {
  AttentionState& state = *segment.state;
  const int64_t end = segment.first_position + segment.rows;
  const int64_t keep_from = std::max<int64_t>(state.window_first, end - (weights.window - 1));
  if (keep_from > state.window_first) {
    state.window.erase_front(keep_from - state.window_first);
    state.window_first = keep_from;
  }
}

}  // namespace

std::vector<int64_t> attention_positions(std::span<const AttentionSegment> segments, int64_t total_rows) {
  const int64_t tokens = total_rows;
  std::vector<int64_t> row_segment(static_cast<std::size_t>(tokens), -1);
  std::vector<int64_t> row_position(static_cast<std::size_t>(tokens), 0);
  for (std::size_t s = 0; s < segments.size(); ++s) {
    const AttentionSegment& segment = segments[s];
    if (segment.rows <= 0 || segment.row_begin < 0 || segment.row_begin + segment.rows > tokens || !segment.state)
      fail("attention: segment ", s, " does not lie within the call's ", tokens, " rows");
    for (int64_t t = 0; t < segment.rows; ++t) {
      if (row_segment[segment.row_begin + t] >= 0) fail("attention: segments ", s, " and ", row_segment[segment.row_begin + t], " overlap");
      row_segment[segment.row_begin + t] = static_cast<int64_t>(s);
      row_position[segment.row_begin + t] = segment.first_position + t;
    }
  }
  for (int64_t t = 0; t < tokens; ++t)
    if (row_segment[t] < 0) fail("attention: row ", t, " belongs to no segment");
  return row_position;
}

namespace {

// The shared K = V rows of inputs x at `positions`: wkv, kv_norm, RoPE.
void project_kv(const AttentionWeights& weights, const float* x, std::span<const int64_t> positions,
                std::vector<float>& kv) {
  const int64_t d = weights.head_dim;
  const auto tokens = static_cast<int64_t>(positions.size());
  kv.resize(static_cast<std::size_t>(tokens * d));
  kernels::linear(x, tokens, weights.wkv, kv.data());
  parallel_items(tokens, 4 * d, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      float* row = kv.data() + t * d;
      rms_norm(row, d, weights.kv_norm.data(), weights.eps, row);
      weights.rope.apply(row, d, positions[t]);
    }
  });
}

}  // namespace

void attention_project(const AttentionWeights& weights, const float* x, std::span<const int64_t> positions,
                       AttentionProjections& out) {
  const int64_t heads = weights.heads;
  const int64_t d = weights.head_dim;
  const int64_t rank = weights.wq_a.rows;
  const auto tokens = static_cast<int64_t>(positions.size());
  // Low-rank query; q_residual also feeds the indexer.
  std::vector<float>& q_residual = out.q_residual;
  q_residual.resize(static_cast<std::size_t>(tokens * rank));
  kernels::linear(x, tokens, weights.wq_a, q_residual.data());
  parallel_items(tokens, 2 * rank, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t)
      rms_norm(q_residual.data() + t * rank, rank, weights.q_norm.data(), weights.eps, q_residual.data() + t * rank);
  });
  std::vector<float>& q = out.q;
  q.resize(static_cast<std::size_t>(tokens * heads * d));
  kernels::linear(q_residual.data(), tokens, weights.wq_b, q.data());
  parallel_items(tokens * heads, 4 * d, [&](int64_t begin, int64_t end) {
    for (int64_t pair = begin; pair < end; ++pair) {
      float* head = q.data() + pair * d;
      if (weights.q_head_norm) rms_norm(head, d, nullptr, weights.eps, head);
      weights.rope.apply(head, d, positions[pair / heads]);
    }
  });

  // The shared K = V head, normed and rotated (it joins the window store in attention_core).
  project_kv(weights, x, positions, out.kv);
}

void attention_core(const AttentionWeights& weights, std::span<const AttentionSegment> segments, const float* x,
                    std::span<const int64_t> positions, AttentionProjections& projections, float* attended) {
  const int64_t heads = weights.heads;
  const int64_t d = weights.head_dim;
  const int64_t rank = weights.wq_a.rows;
  const int64_t model_dim = weights.wq_a.cols;
  const auto tokens = static_cast<int64_t>(positions.size());
  const std::vector<float>& q = projections.q;
  std::vector<int64_t> row_segment(static_cast<std::size_t>(tokens));
  for (std::size_t s = 0; s < segments.size(); ++s)
    for (int64_t t = 0; t < segments[s].rows; ++t) row_segment[segments[s].row_begin + t] = static_cast<int64_t>(s);
  std::vector<SegmentKeys> segment_keys(segments.size());
  for (std::size_t s = 0; s < segments.size(); ++s) {
    const AttentionSegment& segment = segments[s];
    update_segment(weights, segment, x + segment.row_begin * model_dim,
                   projections.q_residual.data() + segment.row_begin * rank,
                   projections.kv.data() + segment.row_begin * d, segment_keys[s]);
  }

  // Each query's keys, then every (token, head) pair on its own: pairs split across threads.
  std::vector<std::vector<const float*>> token_keys(static_cast<std::size_t>(tokens));
  int64_t key_count = 0;
  for (int64_t t = 0; t < tokens; ++t) {
    const SegmentKeys& source = segment_keys[row_segment[t]];
    const int64_t position = positions[t];
    const int64_t row_in_segment = t - segments[row_segment[t]].row_begin;
    std::vector<const float*>& keys = token_keys[t];
    // The store starts no later than the window, except after decoder window replay restarted it
    // at the prompt's trailing window (model.h): then keys start there.
    const int64_t oldest = std::max({int64_t{0}, position - weights.window + 1, source.window_first});
    for (int64_t p = oldest; p <= position; ++p)
      keys.push_back(source.window.data() + (p - source.window_first) * d);
    if (weights.indexer || weights.shared_compressed) {
      for (int64_t w : source.picks[row_in_segment]) keys.push_back(source.entries + w * d);
    } else if (weights.compressor) {
      const int64_t visible = (position + 1) / weights.ratio;
      for (int64_t w = 0; w < visible; ++w) keys.push_back(source.entries + w * d);
    }
    key_count += static_cast<int64_t>(keys.size());
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const int64_t work_per_pair = (key_count / tokens + 1) * 2 * d;
  parallel_items(tokens * heads, work_per_pair, [&](int64_t begin, int64_t end) {
    std::vector<float> logits;
    for (int64_t pair = begin; pair < end; ++pair) {
      const int64_t t = pair / heads;
      const int64_t h = pair % heads;
      float* head_out = attended + pair * d;
      attend_head(q.data() + pair * d, token_keys[t], d, scale, weights.sink[h], logits, head_out);
      // K = V carried RoPE into the output; rotate back at the query position.
      weights.rope.apply(head_out, d, positions[t], /*inverse=*/true);
    }
  });
  for (std::size_t s = 0; s < segments.size(); ++s) {
    if (segments[s].selected) *segments[s].selected = std::move(segment_keys[s].picks);
    trim_window(weights, segments[s]);
  }
}

void attention_output(const AttentionWeights& weights, const float* attended, int64_t rows, float* out) {
  const int64_t tokens = rows;
  const int64_t heads = weights.heads;
  const int64_t d = weights.head_dim;
  // Grouped low-rank output: group g's heads go through its own slice of wo_a, then wo_b mixes.
  const int64_t groups = static_cast<int64_t>(weights.wo_a_groups.size());
  const int64_t group_in = heads * d / groups;
  const int64_t group_out = weights.wo_a_groups.front().rows;
  std::vector<float> group_input(static_cast<std::size_t>(tokens * group_in));
  std::vector<float> group_result(static_cast<std::size_t>(tokens * group_out));
  std::vector<float> low_rank(static_cast<std::size_t>(tokens * groups * group_out));
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t t = 0; t < tokens; ++t)
      std::copy_n(attended + t * heads * d + g * group_in, group_in, group_input.data() + t * group_in);
    kernels::linear(group_input.data(), tokens, weights.wo_a_groups[g], group_result.data());
    for (int64_t t = 0; t < tokens; ++t)
      std::copy_n(group_result.data() + t * group_out, group_out, low_rank.data() + (t * groups + g) * group_out);
  }
  kernels::linear(low_rank.data(), tokens, weights.wo_b, out);
}

void attention_forward(const AttentionWeights& weights, std::span<const AttentionSegment> segments, const float* x,
                       int64_t total_rows, float* out) {
  if (total_rows == 0) return;
  const std::vector<int64_t> positions = attention_positions(segments, total_rows);
  AttentionProjections projections;
  attention_project(weights, x, positions, projections);
  std::vector<float> attended(static_cast<std::size_t>(total_rows * weights.heads * weights.head_dim));
  attention_core(weights, segments, x, positions, projections, attended.data());
  attention_output(weights, attended.data(), total_rows, out);
}

void store_window_rows(const AttentionWeights& weights, AttentionState& state, const float* x, int64_t rows,
                       int64_t keep) {
  const int64_t d = weights.head_dim;
  if (state.window.width() != d) fail("attention state was not made for this layer");
  const int64_t first = state.window_first + state.window.size();
  std::vector<int64_t> positions(static_cast<std::size_t>(rows));
  for (int64_t t = 0; t < rows; ++t) positions[t] = first + t;
  std::vector<float> kv;
  project_kv(weights, x, positions, kv);
  for (int64_t t = 0; t < rows; ++t) state.window.append(kv.data() + t * d);
  const int64_t drop = std::max<int64_t>(0, state.window.size() - keep);
  if (drop > 0) {
    state.window.erase_front(drop);
    state.window_first += drop;
  }
}

void draft_block_attention(const AttentionWeights& weights, std::span<const AttentionSegment> segments,
                           const float* x, int64_t total_rows, float* out) {
  if (total_rows == 0) return;
  const std::vector<int64_t> positions = attention_positions(segments, total_rows);
  AttentionProjections projections;
  attention_project(weights, x, positions, projections);
  std::vector<float> attended(static_cast<std::size_t>(total_rows * weights.heads * weights.head_dim));
  draft_block_core(weights, segments, projections.q.data(), projections.kv.data(), total_rows, attended.data());
  attention_output(weights, attended.data(), total_rows, out);
}

void draft_block_core(const AttentionWeights& weights, std::span<const AttentionSegment> segments, const float* q,
                      const float* kv, int64_t total_rows, float* attended) {
  if (total_rows == 0) return;
  const int64_t heads = weights.heads;
  const int64_t d = weights.head_dim;
  const std::vector<int64_t> positions = attention_positions(segments, total_rows);
  // Per segment: its context rows decoded, then its block's rows as the window would store them
  // (the reference keeps draft rows in the same quantised cache).
  std::vector<std::vector<float>> segment_keys(segments.size());
  std::vector<std::vector<const float*>> keys(segments.size());
  for (std::size_t s = 0; s < segments.size(); ++s) {
    const AttentionSegment& segment = segments[s];
    const AttentionState& state = *segment.state;
    if (state.window.width() != d) fail("draft attention: the state was not made for this layer");
    if (state.window_first + state.window.size() != segment.first_position)
      fail("draft attention: the block at position ", segment.first_position, " follows a context that ends at ",
           state.window_first + state.window.size());
    const int64_t oldest = std::max(state.window_first, segment.first_position - weights.window);
    const int64_t context = segment.first_position - oldest;
    QuantizedRows block(weights.window_format, d);
    for (int64_t t = 0; t < segment.rows; ++t) block.append(kv + (segment.row_begin + t) * d);
    std::vector<float>& decoded = segment_keys[s];
    decoded.resize(static_cast<std::size_t>((context + segment.rows) * d));
    for (int64_t r = 0; r < context; ++r) state.window.read(oldest - state.window_first + r, decoded.data() + r * d);
    for (int64_t t = 0; t < segment.rows; ++t) block.read(t, decoded.data() + (context + t) * d);
    for (int64_t r = 0; r < context + segment.rows; ++r) keys[s].push_back(decoded.data() + r * d);
  }
  std::vector<int64_t> row_segment(static_cast<std::size_t>(total_rows));
  for (std::size_t s = 0; s < segments.size(); ++s)
    for (int64_t t = 0; t < segments[s].rows; ++t) row_segment[segments[s].row_begin + t] = static_cast<int64_t>(s);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  parallel_items(total_rows * heads, (weights.window + 8) * 2 * d, [&](int64_t begin, int64_t end) {
    std::vector<float> logits;
    for (int64_t pair = begin; pair < end; ++pair) {
      const int64_t t = pair / heads;
      const int64_t h = pair % heads;
      float* head_out = attended + pair * d;
      attend_head(q + pair * d, keys[row_segment[t]], d, scale, weights.sink[h], logits, head_out);
      weights.rope.apply(head_out, d, positions[t], /*inverse=*/true);
    }
  });
}

}  // namespace deepinfer::model
