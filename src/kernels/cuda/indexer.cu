// The lightning indexer on the device (model/indexer.cpp, model/shared_indexer.cpp): scores of
// every visible entry, V4.1's candidate blocks, and each row's top-k.
//
// Scores are bit-identical to the CPU's for the same inputs: every dot product runs in
// model::dot's fixed order (dot_as_cpu) and the head sum in the CPU's order with the CPU's
// rounding steps, so a top-k over them picks exactly the CPU's entries, ties included. V4.1's
// FP4 queries and keys take the tensor-core kernel of indexer_mma.cu, whose integer sums give
// the same bits (it says why); this SIMT kernel serves the rest (V4's F32 keys).
//
// The top-k is a radix select per row: four 8-bit histogram passes over an order-preserving
// integer form of the scores find the k-th best value T, then one pass in index order takes
// everything above T and the lowest-index entries equal to T; a block-wide running count places
// each taken entry, so the output comes out ascending with no sort.
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "core/error.h"
#include "kernels/cuda/attention_kernels.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/indexer_mma.h"
#include "kernels/cuda/indexer_rows.cuh"
#include "kernels/cuda/launch_gate.h"

namespace deepinfer::kernels::cuda {
namespace {

using namespace detail;

// ---- scores ----

constexpr int kScoreThreads = 256;
constexpr int kTileEntries = 32;  // entries per block: their keys are decoded once into shared memory

// Shared memory of one scoring block, in floats after the tile's row addresses. Rows are padded
// by one float so that threads reading the same element of different heads / entries hit
// different banks.
struct ScoreTileLayout {
  int32_t q_stride = 0;      // head_dim + 1
  int32_t term_stride = 0;   // heads + 1
  int64_t q_floats = 0;      // [heads, q_stride]
  int64_t key_floats = 0;    // [kTileEntries, q_stride]
  int64_t term_floats = 0;   // [kTileEntries, term_stride]
  int64_t weight_floats = 0; // [heads]
  std::size_t bytes() const {
    return sizeof(const uint8_t*) * kTileEntries +
           sizeof(float) * static_cast<std::size_t>(q_floats + key_floats + term_floats + weight_floats);
  }
};

ScoreTileLayout score_tile_layout(int32_t heads, int32_t head_dim) {
  ScoreTileLayout layout;
  layout.q_stride = head_dim + 1;
  layout.term_stride = heads + 1;
  layout.q_floats = int64_t{heads} * layout.q_stride;
  layout.key_floats = int64_t{kTileEntries} * layout.q_stride;
  layout.term_floats = int64_t{kTileEntries} * layout.term_stride;
  layout.weight_floats = heads;
  return layout;
}

// Block (row, tile): the scores of entries [tile * kTileEntries, ...) of one row. Each thread
// computes whole (entry, head) dot products, so one entry's head terms are summed by one thread
// in ascending head order, as the CPU sums them.
__global__ void index_scores_kernel(IndexerParams params, StoredRowLayout key_layout, ScoreTileLayout tile,
                                    const SegmentRows* __restrict__ segments, const int32_t* __restrict__ row_segment,
                                    const float* __restrict__ q, const float* __restrict__ head_weights,
                                    float* __restrict__ scores) {
  await_previous_grid();
  extern __shared__ float4 shared_words[];
  const int64_t row = blockIdx.x;
  const int32_t visible = visible_entries(segments, row_segment, row, params.ratio, params.max_visible);
  const int32_t first_entry = static_cast<int32_t>(blockIdx.y) * kTileEntries;
  if (first_entry >= visible) return;
  const int32_t entries = min(kTileEntries, visible - first_entry);
  const int32_t heads = params.heads;
  const int32_t d = params.head_dim;

  auto** key_rows = reinterpret_cast<const uint8_t**>(shared_words);
  float* q_tile = reinterpret_cast<float*>(key_rows + kTileEntries);
  float* key_tile = q_tile + tile.q_floats;
  float* terms = key_tile + tile.key_floats;
  float* weights = terms + tile.term_floats;

  const float* row_q = q + row * heads * d;
  for (int32_t i = threadIdx.x; i < heads * d; i += blockDim.x) q_tile[(i / d) * tile.q_stride + i % d] = row_q[i];
  for (int32_t h = threadIdx.x; h < heads; h += blockDim.x)
    weights[h] = __fmul_rn(head_weights[row * heads + h], params.weight_scale);
  const SegmentRows& segment = segments[row_segment[row]];  // visible > 0: a real row
  if (static_cast<int32_t>(threadIdx.x) < entries)
    key_rows[threadIdx.x] = entry_row(params.keys, segment.blocks, first_entry + static_cast<int32_t>(threadIdx.x));
  __syncthreads();
  for (int32_t i = threadIdx.x; i < entries * d; i += blockDim.x) {
    const int32_t e = i / d;
    const int32_t c = i - e * d;
    key_tile[e * tile.q_stride + c] = stored_value(key_rows[e], c, key_layout);
  }
  __syncthreads();
  for (int32_t pair = threadIdx.x; pair < entries * heads; pair += blockDim.x) {
    const int32_t e = pair / heads;
    const int32_t h = pair - e * heads;
    const float* q_head = q_tile + h * tile.q_stride;
    const float* key = key_tile + e * tile.q_stride;
    const float dot = dot_as_cpu([&](int32_t i) { return q_head[i]; }, [&](int32_t i) { return key[i]; }, d);
    // std::max(dot, 0.0f): keeps dot unless it is below zero (a -0 stays -0).
    terms[e * tile.term_stride + h] = __fmul_rn(dot < 0.0f ? 0.0f : dot, params.score_scale);
  }
  __syncthreads();
  if (static_cast<int32_t>(threadIdx.x) < entries) {
    const float* entry_terms = terms + threadIdx.x * tile.term_stride;
    float score = 0.0f;
    // The CPU's `score += relu * (w * weight_scale)`, as GCC compiles it for x86-64-v3 (the
    // default build, DEEPINFER_AVX2): contracted into one FMA.
    for (int32_t h = 0; h < heads; ++h) score = fmaf(entry_terms[h], weights[h], score);
    scores[row * params.max_visible + first_entry + threadIdx.x] = score;
  }
}

// Rows of 128 values (V4's index heads) take a register-tiled kernel with the same sums: a block
// scores 64 entries for up to 64 heads, each thread 4 entries x 4 heads. model::dot's order at 128
// values is 32 lane sums of 4 FMAs each (lane (j, s) taking elements 32 i + 8 s + j), so q and
// the keys sit in shared memory with each lane sum's 4 values side by side: one 16-byte load
// gives a lane sum's operands, and a thread reads 8 of them for 64 FMAs where the general kernel
// reads two floats an FMA.
constexpr int kTiledDim = 128;
constexpr int kTiledHeads = 64;
constexpr int kTiledEntries = 64;
constexpr int kTiledPitch = kTiledDim + 4;  // floats: a warp's 16 key rows fall in distinct bank groups
constexpr int kTiledTermPitch = kTiledHeads + 1;

struct TiledShared {
  float q[kTiledHeads * kTiledPitch];
  float keys[kTiledEntries * kTiledPitch];
  float terms[kTiledEntries * kTiledTermPitch];
  float weights[kTiledHeads];
  const uint8_t* key_rows[kTiledEntries];
};

// Where element c of a 128-value row sits: lane sum (j = c % 8, s = c / 8 % 4) at 4 (4 j + s),
// its i-th value (c / 32) after that.
__device__ __forceinline__ int32_t tiled_position(int32_t c) { return ((c % 8) * 4 + c / 8 % 4) * 4 + c / 32; }

__global__ void __launch_bounds__(kScoreThreads, 2)
    index_scores_tiled_kernel(IndexerParams params, StoredRowLayout key_layout,
                              const SegmentRows* __restrict__ segments, const int32_t* __restrict__ row_segment,
                              const float* __restrict__ q, const float* __restrict__ head_weights,
                              float* __restrict__ scores) {
  await_previous_grid();
  extern __shared__ float4 tiled_words[];
  TiledShared& s = *reinterpret_cast<TiledShared*>(tiled_words);
  const int64_t row = blockIdx.x;
  const int32_t visible = visible_entries(segments, row_segment, row, params.ratio, params.max_visible);
  const int32_t first_entry = static_cast<int32_t>(blockIdx.y) * kTiledEntries;
  if (first_entry >= visible) return;
  const int32_t entries = min(kTiledEntries, visible - first_entry);
  const int32_t heads = params.heads;
  const int thread = static_cast<int>(threadIdx.x);

  const float* row_q = q + row * heads * kTiledDim;
  for (int32_t i = thread; i < kTiledHeads * kTiledDim; i += kScoreThreads) {
    const int32_t h = i / kTiledDim;
    const int32_t c = i % kTiledDim;
    s.q[h * kTiledPitch + tiled_position(c)] = h < heads ? row_q[i] : 0.0f;
  }
  for (int32_t h = thread; h < heads; h += kScoreThreads)
    s.weights[h] = __fmul_rn(head_weights[row * heads + h], params.weight_scale);
  const SegmentRows& segment = segments[row_segment[row]];  // visible > 0: a real row
  if (thread < entries) s.key_rows[thread] = entry_row(params.keys, segment.blocks, first_entry + thread);
  __syncthreads();
  for (int32_t i = thread; i < kTiledEntries * kTiledDim; i += kScoreThreads) {
    const int32_t e = i / kTiledDim;
    const int32_t c = i % kTiledDim;
    s.keys[e * kTiledPitch + tiled_position(c)] = e < entries ? stored_value(s.key_rows[e], c, key_layout) : 0.0f;
  }
  __syncthreads();

  // Thread (entry group, head group): entries eg + 16 k and heads hg + 16 m.
  const int eg = thread % 16;
  const int hg = thread / 16;
  float held[4][4][4];  // [k][m]: lane sums 0..3, lanes 4..7 folded into them as they come
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    float pair_sum[4][4];  // (sums[0] + sums[1]), then the lane's whole sum
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float sums[2][4][4];
#pragma unroll
      for (int t = 0; t < 2; ++t) {
        const int slot = (4 * j + 2 * half + t) * 4;
        float4 key[4], query[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) key[k] = *reinterpret_cast<const float4*>(&s.keys[(eg + 16 * k) * kTiledPitch + slot]);
#pragma unroll
        for (int m = 0; m < 4; ++m) query[m] = *reinterpret_cast<const float4*>(&s.q[(hg + 16 * m) * kTiledPitch + slot]);
#pragma unroll
        for (int k = 0; k < 4; ++k)
#pragma unroll
          for (int m = 0; m < 4; ++m) {
            float sum = fmaf(query[m].x, key[k].x, 0.0f);
            sum = fmaf(query[m].y, key[k].y, sum);
            sum = fmaf(query[m].z, key[k].z, sum);
            sums[t][k][m] = fmaf(query[m].w, key[k].w, sum);
          }
      }
#pragma unroll
      for (int k = 0; k < 4; ++k)
#pragma unroll
        for (int m = 0; m < 4; ++m) {
          const float two = sums[0][k][m] + sums[1][k][m];
          pair_sum[k][m] = half == 0 ? two : pair_sum[k][m] + two;
        }
    }
#pragma unroll
    for (int k = 0; k < 4; ++k)
#pragma unroll
      for (int m = 0; m < 4; ++m) held[k][m][j % 4] = j < 4 ? pair_sum[k][m] : held[k][m][j % 4] + pair_sum[k][m];
  }
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const int e = eg + 16 * k;
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      const int h = hg + 16 * m;
      const float dot = (held[k][m][0] + held[k][m][2]) + (held[k][m][1] + held[k][m][3]);
      if (h < heads) s.terms[e * kTiledTermPitch + h] = __fmul_rn(dot < 0.0f ? 0.0f : dot, params.score_scale);
    }
  }
  __syncthreads();
  if (thread < entries) {
    const float* entry_terms = s.terms + thread * kTiledTermPitch;
    float score = 0.0f;
    for (int32_t h = 0; h < heads; ++h) score = fmaf(entry_terms[h], s.weights[h], score);
    scores[row * params.max_visible + first_entry + thread] = score;
  }
}

// ---- selection ----

constexpr int kSelectThreads = 512;
constexpr int kBins = 256;

struct SelectShared {
  uint32_t histogram[kBins];
  int32_t warp_counts[32];
  uint32_t prefix;
  int32_t remaining;
};

// Unsigned keys in the order of the floats (the larger score, the larger key); -0 is +0, since
// the CPU's comparisons see them as a tie.
__device__ __forceinline__ uint32_t order_key(float score) {
  uint32_t bits = __float_as_uint(score);
  if ((bits << 1) == 0) bits = 0;
  return (bits & 0x80000000u) ? ~bits : bits | 0x80000000u;
}

// A row's visible entries, those outside the kept candidate blocks (when a mask is given) not allowed.
struct EntryItems {
  const float* scores;
  const uint8_t* mask;  // null: every entry allowed
  int32_t block_size;
  __device__ bool key(int32_t w, uint32_t& out) const {
    if (mask != nullptr && mask[w / block_size] == 0) return false;
    out = order_key(scores[w]);
    return true;
  }
};

// A row's candidate blocks: the best score of each, the newest block pinned at +inf.
struct BlockItems {
  const float* scores;
  int32_t visible;
  int32_t block_size;
  int32_t blocks;
  __device__ bool key(int32_t b, uint32_t& out) const {
    if (b == blocks - 1) {
      out = order_key(INFINITY);
      return true;
    }
    float best = -INFINITY;
    const int32_t end = min(visible, (b + 1) * block_size);
    for (int32_t w = b * block_size; w < end; ++w) best = fmaxf(best, scores[w]);
    out = order_key(best);
    return true;
  }
};

// Take every allowed item with key > `key`, and the first `equal_taken` (by index) with key == `key`.
struct Threshold {
  uint32_t key;
  int32_t equal_taken;
};

// The number of threads below this one whose flag is set, and in `total` all of them. Every
// thread of the block must call it; it ends with a barrier, so `warp_counts` may be reused.
__device__ __forceinline__ int32_t block_exclusive_count(bool flag, int32_t* warp_counts, int32_t& total) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int warp = static_cast<int>(threadIdx.x) / kWarp;
  const int warps = static_cast<int>(blockDim.x) / kWarp;
  const unsigned ballot = __ballot_sync(kFullMask, flag);
  if (lane == 0) warp_counts[warp] = __popc(ballot);
  __syncthreads();
  int32_t before = 0;
  total = 0;
  for (int other = 0; other < warps; ++other) {
    const int32_t count = warp_counts[other];
    if (other < warp) before += count;
    total += count;
  }
  __syncthreads();
  return before + __popc(ballot & ((1u << lane) - 1u));
}

template <class Items>
__device__ int32_t count_allowed(const Items& items, int32_t n) {
  int32_t allowed = 0;
  for (int32_t base = 0; base < n; base += blockDim.x) {
    const int32_t i = base + static_cast<int32_t>(threadIdx.x);
    uint32_t key = 0;
    allowed += __syncthreads_count(i < n && items.key(i, key));
  }
  return allowed;
}

// Warp 0: the bin, from the top, where the `remaining`-th best of this pass's items falls; it
// narrows the prefix by that bin and leaves how many of the bin are still to take.
__device__ void choose_bin(SelectShared& shared, int shift, uint32_t prefix, int32_t remaining) {
  const int lane = static_cast<int>(threadIdx.x);
  constexpr int kBinsPerLane = kBins / kWarp;
  int32_t counts[kBinsPerLane];
  int32_t lane_total = 0;
#pragma unroll
  for (int j = 0; j < kBinsPerLane; ++j) {
    counts[j] = static_cast<int32_t>(shared.histogram[kBins - 1 - kBinsPerLane * lane - j]);
    lane_total += counts[j];
  }
  int32_t inclusive = lane_total;
#pragma unroll
  for (int offset = 1; offset < kWarp; offset <<= 1) {
    const int32_t below = __shfl_up_sync(kFullMask, inclusive, offset);
    if (lane >= offset) inclusive += below;
  }
  const int32_t before = inclusive - lane_total;
  if (before < remaining && remaining <= inclusive) {
    int32_t above = before;
#pragma unroll
    for (int j = 0; j < kBinsPerLane; ++j) {
      if (above + counts[j] >= remaining) {
        shared.prefix = prefix | (static_cast<uint32_t>(kBins - 1 - kBinsPerLane * lane - j) << shift);
        shared.remaining = remaining - above;
        break;
      }
      above += counts[j];
    }
  }
}

// The threshold that takes exactly k of the `allowed` items: the k-th best key, found 8 bits
// at a time from the top among the items that share the bits found so far.
template <class Items>
__device__ Threshold find_threshold(const Items& items, int32_t n, int32_t k, int32_t allowed, SelectShared& shared) {
  if (k >= allowed) return {0u, INT32_MAX};
  if (k == 0) return {UINT32_MAX, 0};
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  uint32_t prefix = 0;
  int32_t remaining = k;
  for (int shift = 24; shift >= 0; shift -= 8) {
    const uint32_t found_bits = shift == 24 ? 0u : ~0u << (shift + 8);
    for (int b = threadIdx.x; b < kBins; b += blockDim.x) shared.histogram[b] = 0;
    __syncthreads();
    for (int32_t base = 0; base < n; base += blockDim.x) {
      const int32_t i = base + static_cast<int32_t>(threadIdx.x);
      uint32_t key = 0;
      const bool counted = i < n && items.key(i, key) && (key & found_bits) == prefix;
      const uint32_t bin = counted ? (key >> shift) & 0xffu : kBins;
      // Ties are common (zero scores): one atomic per distinct bin of the warp.
      const unsigned peers = __match_any_sync(kFullMask, bin);
      if (counted && lane == __ffs(peers) - 1) atomicAdd(&shared.histogram[bin], static_cast<uint32_t>(__popc(peers)));
    }
    __syncthreads();
    if (threadIdx.x < kWarp) choose_bin(shared, shift, prefix, remaining);
    __syncthreads();
    prefix = shared.prefix;
    remaining = shared.remaining;
  }
  return {prefix, remaining};
}

// Calls emit(i, taken, position) for every item i < n in index order, position being the
// number of taken items before i.
template <class Items, class Emit>
__device__ void emit_selected(const Items& items, int32_t n, Threshold threshold, SelectShared& shared, Emit emit) {
  int32_t equal_before = 0;
  int32_t taken_before = 0;
  for (int32_t base = 0; base < n; base += blockDim.x) {
    const int32_t i = base + static_cast<int32_t>(threadIdx.x);
    uint32_t key = 0;
    const bool allowed = i < n && items.key(i, key);
    const bool above = allowed && key > threshold.key;
    const bool equal = allowed && key == threshold.key;
    int32_t equal_total = 0;
    const int32_t equal_rank = equal_before + block_exclusive_count(equal, shared.warp_counts, equal_total);
    const bool taken = above || (equal && equal_rank < threshold.equal_taken);
    int32_t taken_total = 0;
    const int32_t position = taken_before + block_exclusive_count(taken, shared.warp_counts, taken_total);
    if (i < n) emit(i, taken, position);
    equal_before += equal_total;
    taken_before += taken_total;
  }
}

__global__ void candidate_blocks_kernel(CandidateParams params, const SegmentRows* __restrict__ segments,
                                        const int32_t* __restrict__ row_segment, int32_t ratio,
                                        const float* __restrict__ scores, int32_t max_visible,
                                        uint8_t* __restrict__ candidate_mask) {
  await_previous_grid();
  __shared__ SelectShared shared;
  const int64_t row = blockIdx.x;
  const int32_t visible = visible_entries(segments, row_segment, row, ratio, max_visible);
  const int32_t blocks = (visible + params.block_size - 1) / params.block_size;
  const BlockItems items{scores + row * max_visible, visible, params.block_size, blocks};
  const Threshold threshold = find_threshold(items, blocks, min(params.topk_blocks, blocks), blocks, shared);
  uint8_t* row_mask = candidate_mask + row * params.max_blocks;
  emit_selected(items, blocks, threshold, shared,
                [&](int32_t b, bool taken, int32_t) { row_mask[b] = taken ? 1 : 0; });
  for (int32_t b = blocks + static_cast<int32_t>(threadIdx.x); b < params.max_blocks; b += blockDim.x) row_mask[b] = 0;
}

__global__ void top_k_kernel(const SegmentRows* __restrict__ segments, const int32_t* __restrict__ row_segment,
                             int32_t ratio, const float* __restrict__ scores, int32_t max_visible,
                             const uint8_t* __restrict__ candidate_mask, CandidateParams candidates, int32_t topk,
                             int32_t* __restrict__ picks, int32_t* __restrict__ pick_count) {
  await_previous_grid();
  __shared__ SelectShared shared;
  const int64_t row = blockIdx.x;
  const int32_t visible = visible_entries(segments, row_segment, row, ratio, max_visible);
  const uint8_t* row_mask = candidate_mask != nullptr ? candidate_mask + row * candidates.max_blocks : nullptr;
  const EntryItems items{scores + row * max_visible, row_mask, candidates.block_size};
  const int32_t allowed = count_allowed(items, visible);
  const int32_t count = min(topk, allowed);
  const Threshold threshold = find_threshold(items, visible, count, allowed, shared);
  int32_t* row_picks = picks + row * topk;
  emit_selected(items, visible, threshold, shared, [&](int32_t w, bool taken, int32_t position) {
    if (taken) row_picks[position] = w;
  });
  for (int32_t slot = count + static_cast<int32_t>(threadIdx.x); slot < topk; slot += blockDim.x) row_picks[slot] = -1;
  if (threadIdx.x == 0) pick_count[row] = count;
}

void check_rows(const char* what, int64_t rows) {
  if (rows < 0) fail(what, ": negative row count ", rows);
  if (rows > INT32_MAX) fail(what, ": ", rows, " rows do not fit one grid");
}

void check_candidate_shape(const char* what, const CandidateParams& candidates, int32_t max_visible) {
  if (candidates.block_size <= 0) fail(what, ": candidate block size ", candidates.block_size, " is not positive");
  const int64_t needed = (int64_t{max_visible} + candidates.block_size - 1) / candidates.block_size;
  if (candidates.max_blocks < needed)
    fail(what, ": candidate masks of ", candidates.max_blocks, " blocks cannot hold ", max_visible, " entries in blocks of ",
         candidates.block_size);
}

}  // namespace

void index_scores(const IndexerParams& params, const SegmentRows* segments, const int32_t* row_segment, int64_t rows,
                  const float* q, const float* head_weights, float* scores, Stream stream) {
  if (launches_skipped()) return;
  constexpr const char* kWhat = "cuda::index_scores";
  check_rows(kWhat, rows);
  if (params.heads <= 0 || params.head_dim <= 0)
    fail(kWhat, ": ", params.heads, " heads of ", params.head_dim, " are not positive");
  if (params.ratio <= 0) fail(kWhat, ": ratio ", params.ratio, " is not positive");
  if (params.max_visible < 0) fail(kWhat, ": negative max_visible ", params.max_visible);
  const PagedRegion& keys = params.keys;
  if (keys.width != params.head_dim) fail(kWhat, ": keys of width ", keys.width, ", queries of ", params.head_dim);
  if (keys.ratio != params.ratio) fail(kWhat, ": keys stored at ratio ", keys.ratio, ", scored at ratio ", params.ratio);
  if (keys.block_tokens <= 0 || keys.offset < 0)
    fail(kWhat, ": bad key region (block_tokens ", keys.block_tokens, ", offset ", keys.offset, ")");
  const StoredRowLayout key_layout = stored_row_layout(keys.format, keys.width);
  if (keys.row_bytes < key_layout.code_bytes + key_layout.scale_bytes)
    fail(kWhat, ": key rows of ", keys.row_bytes, " bytes are too short for ", keys.width, " values in format ",
         static_cast<int>(keys.format));
  const int64_t tiles = (int64_t{params.max_visible} + kTileEntries - 1) / kTileEntries;
  if (tiles > 65535) fail(kWhat, ": ", params.max_visible, " visible entries exceed one grid's tiles");
  if (rows == 0 || tiles == 0) return;
  if (index_scores_on_tensor_cores(params)) {
    index_scores_mma(params, segments, row_segment, rows, q, head_weights, scores, stream);
    return;
  }
  if (params.head_dim == kTiledDim && params.heads <= kTiledHeads) {
    constexpr std::size_t kTiledBytes = sizeof(TiledShared);
    const cudaError_t raised = cudaFuncSetAttribute(
        index_scores_tiled_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kTiledBytes));
    if (raised != cudaSuccess) {
      (void)cudaGetLastError();
      fail(kWhat, ": the tiled kernel's ", kTiledBytes, " bytes of shared memory: ", cudaGetErrorString(raised));
    }
    const dim3 grid(static_cast<unsigned>(rows),
                    static_cast<unsigned>((int64_t{params.max_visible} + kTiledEntries - 1) / kTiledEntries));
    launch(index_scores_tiled_kernel, grid, kScoreThreads, kTiledBytes, native(stream), params, key_layout, segments,
           row_segment, q, head_weights, scores);
    check_launch(kWhat);
    return;
  }

  const ScoreTileLayout tile = score_tile_layout(params.heads, params.head_dim);
  const std::size_t shared_bytes = tile.bytes();
  if (shared_bytes > 48 * 1024) {
    const cudaError_t status = cudaFuncSetAttribute(index_scores_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                    static_cast<int>(shared_bytes));
    if (status != cudaSuccess) {
      (void)cudaGetLastError();  // do not leave the refusal for the next check
      fail(kWhat, ": ", params.heads, " heads of ", params.head_dim, " need ", shared_bytes,
           " bytes of shared memory: ", cudaGetErrorString(status));
    }
  }
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(tiles));
  launch(index_scores_kernel, grid, kScoreThreads, shared_bytes, native(stream), params, key_layout, tile, segments,
         row_segment, q, head_weights, scores);
  check_launch(kWhat);
}

void candidate_blocks(const CandidateParams& params, const SegmentRows* segments, const int32_t* row_segment,
                      int64_t rows, int32_t ratio, const float* scores, int32_t max_visible, uint8_t* candidate_mask,
                      Stream stream) {
  if (launches_skipped()) return;
  constexpr const char* kWhat = "cuda::candidate_blocks";
  check_rows(kWhat, rows);
  if (ratio <= 0) fail(kWhat, ": ratio ", ratio, " is not positive");
  if (max_visible < 0) fail(kWhat, ": negative max_visible ", max_visible);
  if (params.topk_blocks < 0) fail(kWhat, ": negative topk_blocks ", params.topk_blocks);
  check_candidate_shape(kWhat, params, max_visible);
  if (rows == 0 || params.max_blocks == 0) return;
  launch(candidate_blocks_kernel, static_cast<unsigned>(rows), kSelectThreads, 0, native(stream), params, segments,
         row_segment, ratio, scores, max_visible, candidate_mask);
  check_launch(kWhat);
}

void top_k_entries(const SegmentRows* segments, const int32_t* row_segment, int64_t rows, int32_t ratio,
                   const float* scores, int32_t max_visible, const uint8_t* candidate_mask,
                   const CandidateParams& candidates, int32_t topk, int32_t* picks, int32_t* pick_count,
                   Stream stream) {
  if (launches_skipped()) return;
  constexpr const char* kWhat = "cuda::top_k_entries";
  check_rows(kWhat, rows);
  if (ratio <= 0) fail(kWhat, ": ratio ", ratio, " is not positive");
  if (max_visible < 0) fail(kWhat, ": negative max_visible ", max_visible);
  if (topk < 0) fail(kWhat, ": negative topk ", topk);
  if (candidate_mask != nullptr) check_candidate_shape(kWhat, candidates, max_visible);
  if (rows == 0) return;
  launch(top_k_kernel, static_cast<unsigned>(rows), kSelectThreads, 0, native(stream), segments, row_segment, ratio,
         scores, max_visible, candidate_mask, candidates, topk, picks, pick_count);
  check_launch(kWhat);
}

}  // namespace deepinfer::kernels::cuda
