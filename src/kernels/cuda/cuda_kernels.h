#pragma once
// The CUDA kernels the CUDA backend (backend/cuda) composes into the model's coarse operations.
// Plain functions over device pointers, launched on the given stream, never synchronising: the
// backend decides when results come back to the host. Activations are f32; weights stay in their
// checkpoint encoding (kernels::WeightMatrix, whose data / scales point to device memory) and are
// decoded in registers. These are the simple, correct kernels of part 1 (docs/ARCHITECTURE.md,
// "CUDA backend"); part 2 replaces the hot ones.
//
// Batch invariance: every output element is reduced in an order fixed by the shapes of the
// weights alone (never by the number of rows in the call), so a row's result does not depend
// on what else is in the batch; linear with a split workspace is the one exception (the backend
// passes none under --batch-invariant).
#include <cstddef>
#include <cstdint>

#include "kernels/kernels.h"

struct CUstream_st;

namespace deepinfer::kernels::cuda {

using Stream = CUstream_st*;

// Raises deepinfer::Error naming `what` when the last CUDA call or launch failed.
void check_launch(const char* what);

// y[t, r] = sum_c x[t, c] * W[r, c]; x [tokens, cols], y [tokens, rows]. W in device memory.
// With a workspace whose tensor-core buffers are set, the weights linear_mma_supports runs on the
// tensor cores (linear_mma.cu: the f32 sum in another order, batch invariant), needing
// linear_mma_split_words and linear_mma_partial_floats of them (an Error when they are short);
// the rest run the SIMT kernel, in the batch-invariant order above: a weight of few rows cuts its
// columns into ranges by its shape alone and adds the ranges' sums in order. `split`, device
// memory of kLinearSplitFloats floats, lets a call of few blocks run the ranges on blocks of their
// own (faster at small batches; the same bits); null, each block walks its rows' ranges.
// (At most 264 blocks of 8 rows x 8 tokens split, into at most 16 ranges.)
inline constexpr int64_t kLinearSplitFloats = 264 * 8 * 8 * 16;
// Per token of a call, the most partial sums any linear_mma call needs (its column ranges only
// split matrices of fewer than 264 blocks of 128 rows).
inline constexpr int64_t kLinearMmaPartialFloatsPerToken = 2 * 264 * 128;
struct LinearWorkspace {
  float* split = nullptr;  // null: the SIMT kernel's blocks walk their column ranges
  uint32_t* x_split = nullptr;  // null: no tensor cores
  int64_t x_split_words = 0;
  float* partials = nullptr;
  int64_t partial_floats = 0;
  uint32_t* tile_counters = nullptr;  // kLinearMmaTileCounters zeroed words (linear_mma)
};
void linear(const float* x, int64_t tokens, const WeightMatrix& weight, float* y, Stream stream,
            const LinearWorkspace& workspace = {});

// The tensor-core linear itself (linear_mma.cu): FP8 e4m3 with E8M0 scales over blocks of a
// multiple of 32 columns, or BF16; rows a multiple of 16, columns of 128, data 16-byte aligned.
// x_split: linear_mma_split_words words; partials: linear_mma_partial_floats floats (0: none).
bool linear_mma_supports(const WeightMatrix& device_weight);
int64_t linear_mma_split_words(int64_t tokens, const WeightMatrix& weight);
// The most split words any linear_mma call of `tokens` tokens over x_columns columns needs
// (calls of many tokens on Hopper pad their tokens: sm90/linear_wgmma.cu).
int64_t linear_split_words(int64_t tokens, int64_t x_columns);
int64_t linear_mma_partial_floats(int64_t tokens, const WeightMatrix& weight);
// x and y rows may be strided (x_stride >= cols, y_stride >= rows floats apart: one group's
// slice of a grouped projection).
// tile_counters: kLinearMmaTileCounters words, zero before the first call, which each call leaves
// zero again; they let a call that splits columns add its ranges in its own launch (the last
// block of each output tile does). One buffer per stream: calls on one stream may share it,
// calls that can run at once may not. Null: a separate launch adds the ranges (same result).
inline constexpr int64_t kLinearMmaTileCounters = 16384;
void linear_mma(const float* x, int64_t x_stride, int64_t tokens, const WeightMatrix& weight, float* y,
                int64_t y_stride, uint32_t* x_split, float* partials, Stream stream,
                uint32_t* tile_counters = nullptr);
// A grouped projection in one launch (V4's grouped attention output, wo_a): for g < groups,
// group g's weight (group_weights[g], a device array of descriptors of one shape, `group` being
// one of them on the host) multiplies columns [g * cols, (g + 1) * cols) of each row of x into
// columns [g * rows, (g + 1) * rows) of that row of y. The same sums as `groups` linear_mma calls
// on strided slices, in the column ranges of the groups' rows taken together (so in another
// order, and batch invariant); one split of x and one launch instead of `groups` of each.
// `group.no_nan_codes` must hold for every group for the decode to skip its NaN test, and
// `group.max_e8m0` be the largest of every group's.
bool linear_mma_grouped_supports(const WeightMatrix& group);  // and rows a multiple of 32
int64_t linear_mma_grouped_split_words(int64_t tokens, const WeightMatrix& group, int64_t groups);
int64_t linear_mma_grouped_partial_floats(int64_t tokens, const WeightMatrix& group, int64_t groups);
void linear_mma_grouped(const float* x, int64_t x_stride, int64_t tokens, const WeightMatrix& group,
                        const WeightMatrix* group_weights, int64_t groups, float* y, int64_t y_stride,
                        uint32_t* x_split, float* partials, Stream stream, uint32_t* tile_counters = nullptr);
// Rows of x (x_stride floats apart) as three BF16 planes (hi, mid, lo) in the tensor-core
// kernels' operand order (mma_common.cuh): out [rows][3][cols / 2] words, split_words of them.
int64_t split_words(int64_t rows, int64_t cols);
void split_rows(const float* x, int64_t rows, int64_t cols, int64_t x_stride, uint32_t* out, Stream stream);

// One weight per output row of the call (mixture-of-experts): for pair p < pairs,
// y[p, r] = sum_c x[x_row[p], c] * W_{weights[weight_of[p]]}[r, c], with y [pairs, rows].
// `weights` is a device array of descriptors that all share rows and cols (and whose data
// point to device memory); x_row and weight_of are device arrays of `pairs` entries. A pair
// whose weight_of is negative gets zeros.
void linear_gathered(const float* x, const int32_t* x_row, int64_t pairs, const WeightMatrix* weights,
                     const int32_t* weight_of, int64_t rows, int64_t cols, float* y, Stream stream);

// out[t] = weight * x[t] / sqrt(mean(x[t]^2) + eps) for rows t < count of width n; weight may be
// null (unweighted); out may alias x.
void rms_norm(const float* x, int64_t count, int64_t n, const float* weight, float eps, float* out, Stream stream);

// rms_norm of every head row of x [count, heads, head_dim] in place (weight [head_dim] or null),
// then rope's forward rotation of it: the same values as the two calls, in one launch.
void rms_norm_rope(float* x, int64_t count, int64_t heads, int64_t head_dim, const float* weight, float eps,
                   int64_t rope_dims, const float* inv_freq, const int32_t* positions, Stream stream);

// RoPE over the trailing rope_dims of each head: x [count, heads, head_dim]; row t at position
// positions[t]; inv_freq [rope_dims / 2]. Interleaved pairs (2i, 2i+1), as model/rope.h.
void rope(float* x, int64_t count, int64_t heads, int64_t head_dim, int64_t rope_dims, const float* inv_freq,
          const int32_t* positions, bool inverse, Stream stream);

// streams [tokens, copies, width]: every copy of row t = table[ids[t]] (F32 or BF16 table).
void embed(const WeightMatrix& table, const int32_t* ids, int64_t tokens, int64_t copies, float* streams,
           Stream stream);

// mHC mixing weights of one site from the projected logits [tokens, (2 + n) * n]:
// pre = sigmoid(l * scale[0] + base) + hc_eps, post = 2 sigmoid(l * scale[1] + base),
// comb = truncated Sinkhorn of (l * scale[2] + base), exactly as model/hyper_connections.cpp.
// pre [tokens, n], post [tokens, n], comb [tokens, n, n]; base [(2 + n) * n], scale [3] device.
void hc_mix(const float* logits, int64_t tokens, int64_t n, const float* base, const float* scale, float hc_eps,
            int64_t sinkhorn_iters, float* pre, float* post, float* comb, Stream stream);
// A site's entry after its logits: hc_mix, then hc_collapse of `streams` [tokens, n, d] with
// carried_pre (V4.1's single pass: the pre of the site before, replaced by this site's pre once
// read) or, when null, this site's pre, then rms_norm with norm_weight into out [tokens, d]: the
// same bits in one launch. False, launching nothing, where that kernel does not apply (n != 4, or
// rows narrow enough for rms_norm's warp kernel); the caller then runs the four.
bool hc_enter(const float* logits, int64_t tokens, int64_t n, const float* base, const float* scale, float hc_eps,
              int64_t sinkhorn_iters, float* pre, float* post, float* comb, float* carried_pre,
              const float* streams, int64_t d, const float* norm_weight, float norm_eps, float* out, Stream stream);
// hc_collapse of `streams` with `pre` (V4.1's carried pre), then rms_norm with norm_weight into
// out [tokens, d]: hc_enter's collapse and norm without its mix, the same bits, so that the mix
// (the projection, then hc_mix) can run beside the sublayer it does not feed. False, launching
// nothing, where hc_enter would be.
bool hc_collapse_norm(const float* pre, const float* streams, int64_t tokens, int64_t n, int64_t d,
                      const float* norm_weight, float norm_eps, float* out, Stream stream);
// The V4 head's pre only: pre[t, i] = sigmoid(logits[t, i] * scale[0] + base[i]) + hc_eps.
void hc_head_pre(const float* logits, int64_t tokens, int64_t n, const float* base, const float* scale,
                 float hc_eps, float* pre, Stream stream);
// collapsed[t] = sum_i pre[t, i] * streams[t, i] over [tokens, n, d].
void hc_collapse(const float* pre, const float* streams, int64_t tokens, int64_t n, int64_t d, float* collapsed,
                 Stream stream);
// hc_post, then rms_norm (no weight, norm_eps) of each token's n * d streams into flat: the next
// site's first step, the same bits in one launch. False, launching nothing, where d is not a
// multiple of 256 or n * d is narrow enough for rms_norm's warp kernel; the caller runs hc_post.
bool hc_post_norm(const float* post, const float* comb, const float* output, int64_t tokens, int64_t n, int64_t d,
                  float* streams, float norm_eps, float* flat, Stream stream);
// V4.1's boundary between two sites: hc_post_norm, then hc_collapse_norm of the new streams with
// carried_pre and norm_weight (entry_eps) into entry [tokens, d]: the two launches' bits in one.
// False, launching nothing, where either would decline.
bool hc_post_enter(const float* post, const float* comb, const float* output, int64_t tokens, int64_t n, int64_t d,
                   float* streams, float norm_eps, float* flat, const float* carried_pre, const float* norm_weight,
                   float entry_eps, float* entry, Stream stream);
// streams[t, k] = post[t, k] * output[t] + sum_j comb[t, j, k] * streams[t, j], in place.
void hc_post(const float* post, const float* comb, const float* output, int64_t tokens, int64_t n, int64_t d,
             float* streams, Stream stream);

// How a MoE layer routes (model/moe.h, MoeWeights).
struct RouterParams {
  int32_t scoring = 0;  // 0 sqrt-softplus, 1 sigmoid, 2 softmax (model ScoringFunc order)
  int64_t experts = 0;
  int64_t top_k = 0;
  float gate_temperature = 1;
  float routed_scaling = 1;
  bool renormalize = true;
  float renormalize_eps = 0;
  // Rows of tid2eid (hash routing), for the bounds check: when > 0, a token id outside
  // [0, tid2eid_rows) routes to expert -1 with weight 0 (as does a table entry outside
  // [0, experts)); 0 leaves the token ids unchecked (the caller has validated them).
  int64_t tid2eid_rows = 0;
};
// From router logits [tokens, experts] (modified in place into scores): each token's top_k
// experts by score + bias (ties to the lower id), or by tid2eid[token_ids[t]] when tid2eid is
// non-null ([table_rows, top_k]); experts ascending, their weights renormalised and scaled.
// experts [tokens, top_k] int32, weights [tokens, top_k].
void route(float* logits, int64_t tokens, const RouterParams& params, const float* bias, const int32_t* tid2eid,
           const int32_t* token_ids, int32_t* experts, float* weights, Stream stream);

// Orders a MoE step's pairs p = (token p / top_k, slot p % top_k) by expert, stably: position i
// holds pair sorted_pair[i] of expert sorted_expert[i] and token sorted_token[i], and pair p sits
// at position_of[p]. scratch: device memory of at least moe_sort_scratch_bytes(pairs) bytes.
std::size_t moe_sort_scratch_bytes(int64_t pairs);
void moe_sort(const int32_t* experts, int64_t pairs, int64_t top_k, void* scratch, std::size_t scratch_bytes,
              int32_t* sorted_expert, int32_t* sorted_token, int64_t* sorted_pair, int64_t* position_of,
              Stream stream);

// The routed experts on the tensor cores (expert_mma.cu), for experts in the FP4 release encoding:
// after moe_sort, expert_tiles cuts each expert's run of sorted pairs into tiles of at most
// kExpertTilePairs pairs ([tile_bound][4] int32: expert, first sorted position, pairs, unused;
// the count at tile_count); the activations go in split (split_rows); expert_gate_up writes,
// split the same way, for each
// sorted position p, h[p] = swiglu(w1 x, w3 x) * pair_scale[p] (pair_scale may be null), x the
// split row x_row[p] of x_split; expert_down writes y[p] = w2 h[p] ([pairs, rows] f32).
// Results are the f32 linear's up to the order of the sums (activations keep their 24 bits) and
// batch-invariant. Grids are sized by tile_bound (expert_tile_bound), so a CUDA graph
// replays them whatever the routing.
inline constexpr int kExpertTilePairs = 4;
// Wide tiles, for steps whose pairs average 6 or more an expert (prefill chunks of hundreds of
// tokens): an expert's weights are decoded once for up to 8 pairs. expert_tile_pairs picks; a
// pair's bits do not depend on it (each pair is its own MMA columns, reduced in one fixed order).
inline constexpr int kExpertWideTilePairs = 8;
int expert_tile_pairs(int64_t pairs, int64_t experts);
// A row-major FP4 matrix of this shape and encoding can be copied to WeightLayout::ExpertTiles
// (FP4 e2m1, E8M0 scales per 32 columns, rows a multiple of 16, columns of 128): what the expert
// kernels take, checked on the host descriptor before upload.
bool expert_tiles_fit(const WeightMatrix& host_weight);
// tiled = row_major's codes ([rows][row_bytes], row_bytes = cols / 2) in the ExpertTiles layout
// (kernels.h); device memory, not overlapping.
void tile_expert_codes(const uint8_t* row_major, uint8_t* tiled, int64_t rows, int64_t row_bytes, Stream stream);
// The device descriptor (device pointers) fits these kernels: FP4 e2m1 with E8M0 scales per 32
// columns, rows a multiple of 16, columns of 128, data 16-byte aligned, codes in expert tiles
// (tile_expert_codes: a warp's loads are contiguous, and the bit order is the decode's).
bool expert_mma_supports(const WeightMatrix& device_weight);
// tile_pairs: kExpertTilePairs or kExpertWideTilePairs, the same in every call of one MoE layer.
int64_t expert_tile_bound(int64_t pairs, int64_t experts, int tile_pairs = kExpertTilePairs);
void expert_tiles(const int32_t* sorted_expert, int64_t pairs, int32_t* tiles, int32_t* tile_count, Stream stream,
                  int tile_pairs = kExpertTilePairs);
// moe_sort then expert_tiles in one launch, with the same results, for calls of at most 1024
// pairs (decode steps); false, launching nothing, for larger ones. With pair_weights [pairs],
// sorted_weight[p] = pair_weights[sorted_pair[p]] as well (gather_rows' result).
bool moe_sort_tiles(const int32_t* experts, int64_t pairs, int64_t top_k, int32_t* sorted_expert,
                    int32_t* sorted_token, int64_t* sorted_pair, int64_t* position_of, int32_t* tiles,
                    int32_t* tile_count, Stream stream, int tile_pairs = kExpertTilePairs,
                    const float* pair_weights = nullptr, float* sorted_weight = nullptr);
// max_e8m0: the largest scale byte of the call's matrices where known (WeightMatrix::max_e8m0);
// at most 128 the decode takes one multiply a word instead of two (the same bits).
// grid: a call whose grid would leave the SMs few warps (a decode step of a token or two) gives
// each warp one 16-row tile instead of two, twice the warps for the same bytes (kNarrow; 4-pair
// tiles only); kAuto picks by the grid's size against the SM count. The same bits either way.
enum class ExpertGrid { kAuto, kWide, kNarrow };
void expert_gate_up(const uint32_t* x_split, const int32_t* x_row, int64_t pairs, const int32_t* tiles,
                    const int32_t* tile_count, int64_t tile_bound, const WeightMatrix* w1, const WeightMatrix* w3,
                    int64_t inner, int64_t cols, float limit, const float* pair_scale, uint32_t* h_split,
                    Stream stream, int max_e8m0 = 255, int tile_pairs = kExpertTilePairs,
                    ExpertGrid grid = ExpertGrid::kAuto);
void expert_down(const uint32_t* h_split, int64_t pairs, const int32_t* tiles, const int32_t* tile_count,
                 int64_t tile_bound, const WeightMatrix* w2, int64_t rows, int64_t inner, float* y, Stream stream,
                 int max_e8m0 = 255, int tile_pairs = kExpertTilePairs, ExpertGrid grid = ExpertGrid::kAuto);

// The same experts for prefill-sized calls on Hopper (sm90/expert_wgmma.cu): tiles of
// tile_pairs = 16 or 32 pairs (expert_tiles cuts them), each tile's weights decoded once for all
// its pairs; a pair's results have expert_gate_up / expert_down's bits. expert_wgmma_tile_pairs
// says which tile a call of `pairs` over `experts` takes, 0 for expert_mma's kernels (too few
// pairs an expert to fill a tile, or not Hopper). staged: expert_wgmma_staged_words(tile_bound,
// cols, tile_pairs) words of device memory for the tiles' split activations, cols the wider of
// the call's two widths (the two launches reuse it). expert_gate_up_wgmma writes gate = w1 x and
// up = w3 x ([pairs, inner] f32, sorted pairs, x the row x_row[p] of x [.., cols]);
// expert_down_wgmma writes y[p] = w2 h[p], h[p] = swiglu(gate[p], up[p]) * pair_scale[p].
int expert_wgmma_tile_pairs(int64_t pairs, int64_t experts);
int64_t expert_wgmma_staged_words(int64_t tile_bound, int64_t cols, int tile_pairs);
void expert_gate_up_wgmma(const float* x, const int32_t* x_row, const int32_t* tiles, const int32_t* tile_count,
                          int64_t tile_bound, const WeightMatrix* w1, const WeightMatrix* w3, int64_t inner,
                          int64_t cols, uint32_t* staged, float* gate, float* up, Stream stream, int max_e8m0,
                          int tile_pairs);
void expert_down_wgmma(const float* gate, const float* up, float limit, const float* pair_scale, const int32_t* tiles,
                       const int32_t* tile_count, int64_t tile_bound, const WeightMatrix* w2, int64_t rows,
                       int64_t inner, uint32_t* staged, float* y, Stream stream, int max_e8m0, int tile_pairs);

// Clamped SwiGLU in place: gate[r, i] = silu(min(g, limit)) * clamp(u, -limit, limit) (no clamp
// when limit <= 0), times row_scale[r] when row_scale is non-null. gate and up [rows, inner].
void swiglu(float* gate, const float* up, int64_t rows, int64_t inner, float limit, const float* row_scale,
            Stream stream);

// out[t, c] = sum_s contributions[row(t * k + s), c] * (slot_scale ? slot_scale[t * k + s] : 1) in
// ascending s, then + shared[t, c] when shared is non-null. out [tokens, d]. row(i) = row_of[i]
// (the experts' sorted outputs read where moe_sort put each pair: its position_of), or i when
// row_of is null.
void moe_combine(const float* contributions, const int64_t* row_of, const float* slot_scale, int64_t tokens,
                 int64_t k, int64_t d, const float* shared, float* out, Stream stream);

// Engram's gate (model/engram.cpp Engram::apply after its projection): for each token t and
// stream s, with key = kv[t, s] and value = kv[t, hc] ([tokens, hc + 1, hidden]), the gate
// sigmoid(signed sqrt(h . (w_s * key) / (rms(h) rms(key) sqrt(hidden)))) adds gate * value to
// streams[t, s] ([tokens, hc, hidden]). gate_weight [hc, hidden] (q_weight * k_weight).
void engram_gate(float* streams, const float* kv, const float* gate_weight, int64_t tokens, int64_t hc,
                 int64_t hidden, double eps, Stream stream);

// dst[i] = src[i] for i < count, device to device.
void copy_floats(float* dst, const float* src, int64_t count, Stream stream);

// Whether any of `count` e4m3 codes (device memory) is a NaN (S.1111.111); waits for the answer.
// For WeightMatrix::no_nan_codes at upload.
bool has_e4m3_nan(const uint8_t* codes, int64_t count, Stream stream);
// out[i] = value for i < count.
void fill(int32_t* out, int64_t count, int32_t value, Stream stream);
// out[i] = i for i < count.
void iota(int32_t* out, int64_t count, Stream stream);

// out[r] = in[rows[r]] for r < count, rows of `width` floats (device index array).
// The token ids of a pass whose rows may continue an earlier pass's draws on the device (a
// chained decode step): ids[t] = drawn[sources[t]] where sources[t] >= 0, with drawn =
// *drawn_address (device memory holding the address, so a graph replays with each step's own
// source; read only where a row names a draw), 0 when that draw is not an id of the vocabulary
// (only a failed draw gives one: its step's requests end anyway); else staged[t].
void resolve_token_ids(const int32_t* staged, const int32_t* sources, const int32_t* const* drawn_address,
                       int64_t tokens, int64_t vocab, int32_t* ids, Stream stream);

void gather_rows(const float* in, const int64_t* rows, int64_t count, int64_t width, float* out, Stream stream);

// out[r, tap * d + e] = (sum over k in order of streams[r, k, e]) / n for r < rows: streams
// [rows, n, d], out [rows, taps * d] (the CPU backend's tap_streams, bit for bit).
void stream_means(const float* streams, int64_t rows, int64_t n, int64_t d, int64_t tap, int64_t taps, float* out,
                  Stream stream);

// out[r] = rows[r, :] . vector for r < count (rows [count, width]).
void row_dots(const float* rows, int64_t count, int64_t width, const float* vector, float* out, Stream stream);

// DSpark's greedy draft head after the target's head (model/backend.h greedy_draft_head;
// draft_head.cu): logits [blocks * gamma, V] are the head's rows, block b's row k at
// b * gamma + k; hidden_confidence [blocks * gamma] the collapsed-input part of each row's raw
// confidence; confidence_tail [rank] the rest of the confidence weights. For k in order, each
// block's embedding is markov_w1[previous] (anchors[b] at k = 0); tokens[row] = argmax of
// logits[row] + markov_w2 . embedding (ties to the lowest id, NaN loses) and confidence_raw[row] =
// hidden_confidence[row] + confidence_tail . embedding. Markov tables in F32 or BF16 of rank at
// most 64 (draft_head_supports); an Error otherwise.
struct DraftHeadScratch {
  float* embeddings = nullptr;      // [blocks, rank]
  float* partial_values = nullptr;  // [blocks, draft_head_chunks(V)]
  int32_t* partial_ids = nullptr;   // [blocks, draft_head_chunks(V)]
};
bool draft_head_supports(const WeightMatrix& markov_w1, const WeightMatrix& markov_w2);
int64_t draft_head_chunks(int64_t vocab);
void greedy_draft_head(const float* logits, const float* hidden_confidence, const WeightMatrix& markov_w1,
                       const WeightMatrix& markov_w2, const float* confidence_tail, const int32_t* anchors,
                       int64_t blocks, int64_t gamma, const DraftHeadScratch& scratch, int32_t* tokens,
                       float* confidence_raw, Stream stream);

}  // namespace deepinfer::kernels::cuda
