// The routed experts of a MoE layer on the tensor cores, for experts in DeepSeek's FP4 release
// encoding (e2m1 codes, one E8M0 scale per 32 columns): w1 and w3 with the clamped SwiGLU in one
// kernel, w2 in another, over the pairs moe_sort ordered by expert.
//
// Why tensor cores at decode, where the FLOPs are few: the SIMT kernel (linear.cu) reduces one
// weight row per warp against each pair's f32 activations, so every output row re-reads the
// pairs' activations from L1 / L2, ten times the weight bytes at batch 64 (docs/BENCHMARKS.md).
// Here a warp holds a 16-row weight tile in registers and multiplies it with up to 4 pairs at
// once (m16n8k16 mma.sync), so activations are read once per 16 rows and weights once per tile.
//
// Exactness and the operand layouts: kernels/cuda/mma_common.cuh. The bound is 2^-16 sum |x w|
// of the CPU's f32 (the tests' bound).
//
// Batch invariance: a pair's column of D depends on its own activations and the weights only,
// reduced over the columns in one fixed order (128-column chunks in order, 8 MMAs each), whatever
// else shares its tile; so its result has the same bits alone or in any batch.
#include <cuda_runtime.h>

#include <cub/block/block_scan.cuh>

#include <cmath>
#include <cstdint>

#include "core/error.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/expert_decode.cuh"
#include "kernels/cuda/launch_gate.h"
#include "kernels/cuda/mma_common.cuh"

namespace deepinfer::kernels::cuda {
namespace {

using namespace detail;
using namespace mma;

constexpr int kWarpsPerBlock = 4;
constexpr int kMmaThreads = kWarpsPerBlock * kWarp;
constexpr int kTileRowsGateUp = 16;   // per warp: 16 rows of w1 and the same 16 of w3
constexpr int kTileThreads = 1024;
constexpr int64_t kMaxGridY = 65535;

// ---------------------------------------------------------------------------------------------
// Tiles: runs of at most kExpertTilePairs (or kExpertWideTilePairs) consecutive sorted pairs of one
// expert.

__device__ int first_of(const int32_t* sorted, int end, int32_t value) {  // lower bound in [0, end)
  int lo = 0, hi = end;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (sorted[mid] < value) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

__device__ int past_of(const int32_t* sorted, int begin, int end, int32_t value) {  // upper bound
  int lo = begin, hi = end;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (sorted[mid] <= value) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

// One block: each pair whose place in its expert's run is a multiple of the capacity starts a
// tile; a block scan numbers the starts in pair order.
// One round of the cut: sorted position i (< pairs) starts a tile where it lies a multiple of
// `capacity` into its expert's run; the round's tiles go to tiles[0 ..) in position order. Every
// thread of the block calls it and gets the round's tile count.
template <typename Scan>
__device__ int cut_tiles(const int32_t* sorted, int i, int pairs, int capacity, int4* tiles,
                         typename Scan::TempStorage& temp) {
  int starts = 0;
  int32_t expert = 0;
  if (i < pairs) {
    expert = sorted[i];
    starts = (i - first_of(sorted, i, expert)) % capacity == 0;
  }
  int offset = 0, total = 0;
  Scan(temp).ExclusiveSum(starts, offset, total);
  if (starts) {
    const int run_end = past_of(sorted, i, pairs, expert);
    tiles[offset] = make_int4(expert, i, run_end - i < capacity ? run_end - i : capacity, 0);
  }
  return total;
}

__global__ void __launch_bounds__(kTileThreads)
    expert_tiles_kernel(const int32_t* __restrict__ sorted_expert, int pairs, int capacity, int4* __restrict__ tiles,
                        int32_t* __restrict__ tile_count) {
  await_previous_grid();
  using Scan = cub::BlockScan<int, kTileThreads>;
  __shared__ typename Scan::TempStorage temp;
  __shared__ int carry;
  const int tid = static_cast<int>(threadIdx.x);
  if (tid == 0) carry = 0;
  __syncthreads();
  for (int base = 0; base < pairs; base += kTileThreads) {
    const int total = cut_tiles<Scan>(sorted_expert, base + tid, pairs, capacity, tiles + carry, temp);
    __syncthreads();
    if (tid == 0) carry += total;
    __syncthreads();
  }
  if (tid == 0) *tile_count = carry;
}

// ---------------------------------------------------------------------------------------------
// The MMA kernels. A tile's up to 4 pairs are one or two MMA column groups of 2 (mma_common.cuh),
// a wide tile's up to 8 one to four. __launch_bounds__(.., 3): three blocks (12 warps) per SM,
// what the registers allow; the loads of the next chunk in flight per warp keep the copy engine
// busy at that occupancy. Wide tiles (many pairs per expert: a prefill chunk of hundreds of
// tokens) decode an expert's weights once for up to 8 pairs where 4-pair tiles decode them twice;
// their kernels hold four groups' accumulators and run at two blocks per SM.
//
// The kernels are bound by instruction issue, not by bytes (ncu at 64 tokens: 78% of issue slots
// busy, DRAM 44%; docs/BENCHMARKS.md), so the inner loop carries nothing a tile does not need:
// the live group count is a template parameter (a tile of 1-2 pairs issues no MMA or add for a
// second group), chunks alternate between two named buffers (no register copies between them),
// and a column without a pair reads some live pair's words instead of zeros: an MMA's column n of
// D depends on column n of B alone, and such columns are never read back.

constexpr int kMaxGroups = kExpertWideTilePairs / kTokensPerMma;

// One 128-column chunk of weights as a lane holds it: 16 bytes of rows g and g + 8 of each of the
// two row tiles, and their scales. These come from HBM, so the next chunk's are in flight while
// one is multiplied; the activations (L1 / L2 hits, read by every row block) are loaded by
// multiply_chunk itself, where the weights' decode hides their latency and the registers of a
// second set are not needed.
// M: the row tiles a warp streams (two: gate_up's w1 and w3 rows, or down's two 16-row tiles;
// one in the narrow kernels below).
template <int M>
struct Chunk {
  uint4 weights[M][2];
  uint32_t scales[M][2];
};

// Chunk c of this lane (segment 4 c + q of its rows).
template <int M>
__device__ __forceinline__ void load_chunk(const RowTile (&tiles)[M], int64_t c, int q, Chunk<M>& chunk) {
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      chunk.weights[m][h] = load_streaming(tiles[m].rows[h] + c * kTiledChunkBytes);
      chunk.scales[m][h] = __ldg(tiles[m].scales[h] + 4 * c + q);
    }
}

template <int M, int G, bool Folded>
__device__ __forceinline__ void multiply_chunk(const Chunk<M>& chunk, const uint32_t* const (&x_words)[kMaxGroups],
                                               int64_t segment, float (&acc)[M][G][4]) {
  // Up to two groups every activation word of the chunk is loaded first (their latency hidden by
  // the decode); three or four groups' would take 64 registers, so those load a quarter at a time.
  constexpr bool kPreload = G <= 2;
  const auto x_at = [&](int u, int i) {
    return __ldg(reinterpret_cast<const uint4*>(x_words[u] + segment * kSegmentWords) + i);
  };
  uint4 preloaded[G][kPreload ? 4 : 1];
  if constexpr (kPreload) {
#pragma unroll
    for (int u = 0; u < G; ++u)
#pragma unroll
      for (int i = 0; i < 4; ++i) preloaded[u][i] = x_at(u, i);
  }
  uint32_t scale[M][2];
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int h = 0; h < 2; ++h) scale[m][h] = scale_pair<Folded>(chunk.scales[m][h]);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    uint4 x[G];
#pragma unroll
    for (int u = 0; u < G; ++u) {
      if constexpr (kPreload) x[u] = preloaded[u][i];
      else x[u] = x_at(u, i);
    }
#pragma unroll
    for (int half = 0; half < 2; ++half) {  // MMA j = 2 i + half
#pragma unroll
      for (int m = 0; m < M; ++m) {
        uint32_t a0, a1, a2, a3;
        e2m1_a_words<Folded>(word_of(chunk.weights[m][0], i), word_of(chunk.weights[m][1], i), scale[m][0],
                             scale[m][1], half, a0, a1, a2, a3);
#pragma unroll
        for (int u = 0; u < G; ++u)
          mma_bf16_add(acc[m][u], a0, a1, a2, a3, word_of(x[u], half * 2), word_of(x[u], half * 2 + 1));
      }
    }
  }
}

// acc[m][u] += the two row tiles times the lane's activation columns, over all chunks in order,
// with the next chunk's loads in flight while one is multiplied.
template <int M, int G, bool Folded>
__device__ __forceinline__ void multiply_rows(const RowTile (&tiles)[M], const uint32_t* const (&x_words)[kMaxGroups],
                                              int64_t cols, float (&acc)[M][G][4]) {
  const int q = static_cast<int>(threadIdx.x) % 4;
  const int64_t chunks = cols / kChunkColumns;
  Chunk<M> even, odd;
  load_chunk(tiles, 0, q, even);
  int64_t c = 0;
  for (; c + 2 <= chunks; c += 2) {
    load_chunk(tiles, c + 1, q, odd);
    multiply_chunk<M, G, Folded>(even, x_words, 4 * c + q, acc);
    if (c + 2 < chunks) load_chunk(tiles, c + 2, q, even);
    multiply_chunk<M, G, Folded>(odd, x_words, 4 * (c + 1) + q, acc);
  }
  if (c < chunks) multiply_chunk<M, G, Folded>(even, x_words, 4 * c + q, acc);
}

// The split activation words of this lane's column in each group (column_of: pair slot
// 2 u + slot, one plane); a column without a pair (g = 6, 7, or past the tile's pairs) reads the
// tile's first pair's hi plane, whose results are never read. Returns the tile's live groups.
__device__ __forceinline__ int column_words(const uint32_t* x_split, const int32_t* x_row, int4 tile, int64_t cols,
                                            const uint32_t* (&words)[kMaxGroups]) {
  const int g = static_cast<int>(threadIdx.x) % kWarp / 4;
  int slot, plane;
  column_of(g, slot, plane);
  const auto row_of = [&](int64_t pair) -> int64_t { return x_row ? x_row[pair] : pair; };
  const uint32_t* spare = x_split + kPlanes * row_of(tile.y) * (cols / 2);
#pragma unroll
  for (int u = 0; u < kMaxGroups; ++u) {
    const int index = kTokensPerMma * u + slot;
    words[u] = slot < 0 || index >= tile.z ? spare : x_split + (kPlanes * row_of(tile.y + index) + plane) * (cols / 2);
  }
  return (tile.z + kTokensPerMma - 1) / kTokensPerMma;
}

// A tile's outputs from its row sums (token_sums of the w1 and w3 accumulators): h = swiglu(gate,
// up) * pair_scale, split, for rows first_row + g and first_row + g + 8 of each live pair.
template <int G>
__device__ __forceinline__ void store_swiglu(int4 tile, const float (&gate)[G][2], const float (&up)[G][2],
                                             int64_t first_row, int64_t inner, float limit,
                                             const float* __restrict__ pair_scale_of, uint16_t* halves) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int g = lane / 4, q = lane % 4;
  const int64_t plane_halves = inner;  // a split plane of an inner-wide row, in u16
#pragma unroll
  for (int u = 0; u < G; ++u) {
    const int slot = kTokensPerMma * u + q / 2;
    if (q % 2 != 0 || slot >= tile.z) continue;
    const int64_t pair = tile.y + slot;
    const float scale = pair_scale_of ? pair_scale_of[pair] : 1.0f;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float value = swiglu_value(gate[u][h], up[u][h], limit);
      if (pair_scale_of) value = value * scale;
      uint32_t term[kPlanes];
      split_value(value, term);
      const int64_t at = split_half_index(first_row + g + 8 * h);
#pragma unroll
      for (int p = 0; p < kPlanes; ++p) halves[(kPlanes * pair + p) * plane_halves + at] = static_cast<uint16_t>(term[p]);
    }
  }
}

// One tile of gate_up_kernel with G live groups: h = swiglu(w1 x, w3 x) * pair_scale, split.
template <int G, bool Folded>
__device__ __forceinline__ void gate_up_tile(int4 tile, const uint32_t* const (&words)[kMaxGroups],
                                             const WeightMatrix* __restrict__ w1, const WeightMatrix* __restrict__ w3,
                                             int64_t first_row, int64_t inner, int64_t cols, float limit,
                                             const float* __restrict__ pair_scale_of, uint16_t* halves) {
  float acc[2][G][4] = {};
  if (tile.x >= 0) {
    const RowTile rows[2] = {row_tile(w1[tile.x], first_row), row_tile(w3[tile.x], first_row)};
    multiply_rows<2, G, Folded>(rows, words, cols, acc);
  }
  float gate[G][2], up[G][2];
#pragma unroll
  for (int u = 0; u < G; ++u) {
    token_sums(acc[0][u], gate[u]);
    token_sums(acc[1][u], up[u]);
  }
  store_swiglu<G>(tile, gate, up, first_row, inner, limit, pair_scale_of, halves);
}

// grid: (row blocks of 64 inner rows, tiles). Writes h = swiglu(w1 x, w3 x) * pair_scale, split.
template <bool Folded, int MaxGroups>
__global__ void __launch_bounds__(kMmaThreads, MaxGroups > 2 ? 2 : 3)
    gate_up_kernel(const uint32_t* __restrict__ x_split, const int32_t* __restrict__ x_row,
                   const int4* __restrict__ tiles, const int32_t* __restrict__ tile_count,
                   const WeightMatrix* __restrict__ w1, const WeightMatrix* __restrict__ w3, int64_t inner,
                   int64_t cols, float limit, const float* __restrict__ pair_scale_of, uint32_t* __restrict__ h_split) {
  await_previous_grid();
  const int64_t first_row =
      (static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + static_cast<int>(threadIdx.x) / kWarp) * kTileRowsGateUp;
  if (first_row >= inner) return;
  const int count = *tile_count;
  auto* halves = reinterpret_cast<uint16_t*>(h_split);
  for (int64_t index = blockIdx.y; index < count; index += gridDim.y) {
    const int4 tile = tiles[index];
    const uint32_t* words[kMaxGroups];
    switch (column_words(x_split, x_row, tile, cols, words)) {  // warp-uniform
      case 1: gate_up_tile<1, Folded>(tile, words, w1, w3, first_row, inner, cols, limit, pair_scale_of, halves); break;
      case 2: gate_up_tile<2, Folded>(tile, words, w1, w3, first_row, inner, cols, limit, pair_scale_of, halves); break;
      default:
        if constexpr (MaxGroups > 2) {
          if (tile.z <= 3 * kTokensPerMma)
            gate_up_tile<3, Folded>(tile, words, w1, w3, first_row, inner, cols, limit, pair_scale_of, halves);
          else
            gate_up_tile<4, Folded>(tile, words, w1, w3, first_row, inner, cols, limit, pair_scale_of, halves);
        }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Narrow grids. A decode step of one token has six tiles, and the kernels above give them 216
// blocks (V4.1-Flash's gate_up) on 132 SMs: ~7 warps an SM, too few to cover the decode's and the
// MMAs' latencies, so gate_up ran at 2.6x its bytes there. The narrow kernels give each warp one
// 16-row tile instead of two (gate_up: a warp pair, w1's rows on one and w3's on the other,
// swapping the up sums through shared memory; down: 16 rows a warp), twice the warps for the same
// bytes. Each accumulator sees the same MMAs in the same order, so the bits are the wide grid's.

constexpr int kWarpPairsPerBlock = kWarpsPerBlock / 2;
// Four blocks an SM (128 registers; one 16-row tile a warp needs fewer than two): a one-token
// gate_up's 432 narrow blocks then fit the 132 SMs in one wave.
constexpr int kNarrowBlocksPerSm = 4;

// The two warps of pair `pair` of the block (named barrier 1 + pair; 0 is __syncthreads').
__device__ __forceinline__ void warp_pair_barrier(int pair) {
  asm volatile("bar.sync %0, %1;" ::"r"(1 + pair), "r"(2 * kWarp) : "memory");
}

template <int G, bool Folded>
__device__ __forceinline__ void gate_up_narrow_tile(int4 tile, const uint32_t* const (&words)[kMaxGroups],
                                                    const WeightMatrix* __restrict__ w, bool is_up, int pair,
                                                    int64_t first_row, int64_t inner, int64_t cols, float limit,
                                                    const float* __restrict__ pair_scale_of, uint16_t* halves,
                                                    float (*up_swap)[2][kWarp][2]) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  float acc[1][G][4] = {};
  if (tile.x >= 0) {
    const RowTile rows[1] = {row_tile(w[tile.x], first_row)};
    multiply_rows<1, G, Folded>(rows, words, cols, acc);
  }
  float sums[G][2];
#pragma unroll
  for (int u = 0; u < G; ++u) token_sums(acc[0][u], sums[u]);
  if (is_up) {
#pragma unroll
    for (int u = 0; u < G; ++u) {
      up_swap[pair][u][lane][0] = sums[u][0];
      up_swap[pair][u][lane][1] = sums[u][1];
    }
  }
  warp_pair_barrier(pair);
  if (!is_up) {
    float up[G][2];
#pragma unroll
    for (int u = 0; u < G; ++u) {
      up[u][0] = up_swap[pair][u][lane][0];
      up[u][1] = up_swap[pair][u][lane][1];
    }
    store_swiglu<G>(tile, sums, up, first_row, inner, limit, pair_scale_of, halves);
  }
  warp_pair_barrier(pair);  // the swap slots are free for the next tile
}

// grid: (row blocks of 32 inner rows, tiles); gate_up_kernel's results, 4-pair tiles only.
template <bool Folded>
__global__ void __launch_bounds__(kMmaThreads, kNarrowBlocksPerSm)
    gate_up_narrow_kernel(const uint32_t* __restrict__ x_split, const int32_t* __restrict__ x_row,
                          const int4* __restrict__ tiles, const int32_t* __restrict__ tile_count,
                          const WeightMatrix* __restrict__ w1, const WeightMatrix* __restrict__ w3, int64_t inner,
                          int64_t cols, float limit, const float* __restrict__ pair_scale_of,
                          uint32_t* __restrict__ h_split) {
  await_previous_grid();
  __shared__ float up_swap[kWarpPairsPerBlock][2][kWarp][2];
  const int warp = static_cast<int>(threadIdx.x) / kWarp, pair = warp / 2;
  const bool is_up = warp % 2 != 0;
  const int64_t first_row = (static_cast<int64_t>(blockIdx.x) * kWarpPairsPerBlock + pair) * kTileRowsGateUp;
  if (first_row >= inner) return;  // both warps of the pair
  const int count = *tile_count;
  auto* halves = reinterpret_cast<uint16_t*>(h_split);
  const WeightMatrix* w = is_up ? w3 : w1;
  for (int64_t index = blockIdx.y; index < count; index += gridDim.y) {
    const int4 tile = tiles[index];
    const uint32_t* words[kMaxGroups];
    if (column_words(x_split, x_row, tile, cols, words) == 1)  // warp-uniform, and alike in the pair
      gate_up_narrow_tile<1, Folded>(tile, words, w, is_up, pair, first_row, inner, cols, limit, pair_scale_of,
                                     halves, up_swap);
    else
      gate_up_narrow_tile<2, Folded>(tile, words, w, is_up, pair, first_row, inner, cols, limit, pair_scale_of,
                                     halves, up_swap);
  }
}

// One tile of down_kernel with G live groups: y[pair, r] = (w2 h)[r], over M 16-row tiles a warp.
template <int M, int G, bool Folded>
__device__ __forceinline__ void down_tile(int4 tile, const uint32_t* const (&words)[kMaxGroups],
                                          const WeightMatrix* __restrict__ w2, int64_t first_row, int64_t rows,
                                          int64_t inner, float* __restrict__ y) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int g = lane / 4, q = lane % 4;
  const bool second = M == 2 && first_row + 16 < rows;  // warp-uniform: rows is a multiple of 16
  float acc[M][G][4] = {};
  if (tile.x >= 0) {
    const WeightMatrix& w = w2[tile.x];
    // Without a second tile the first is loaded twice and its copy dropped: one code path.
    RowTile row_tiles[M];
    row_tiles[0] = row_tile(w, first_row);
    if constexpr (M == 2) row_tiles[1] = row_tile(w, second ? first_row + 16 : first_row);
    multiply_rows<M, G, Folded>(row_tiles, words, inner, acc);
  }
#pragma unroll
  for (int u = 0; u < G; ++u) {
#pragma unroll
    for (int m = 0; m < M; ++m) {
      if (m == 1 && !second) break;
      float value[2];
      token_sums(acc[m][u], value);
      const int slot = kTokensPerMma * u + q / 2;
      if (q % 2 != 0 || slot >= tile.z) continue;
      float* out = y + (tile.y + slot) * rows + first_row + 16 * m + g;
      out[0] = value[0];
      out[8] = value[1];
    }
  }
}

// grid: (row blocks of 4 x 16 M output rows, tiles). y[pair, r] = (w2 h)[r]. M = 1: the narrow
// grid (above), 4-pair tiles only.
template <bool Folded, int MaxGroups, int M = 2>
__global__ void __launch_bounds__(kMmaThreads, M == 1 ? kNarrowBlocksPerSm : MaxGroups > 2 ? 2 : 3)
    down_kernel(const uint32_t* __restrict__ h_split, const int4* __restrict__ tiles,
                const int32_t* __restrict__ tile_count, const WeightMatrix* __restrict__ w2, int64_t rows,
                int64_t inner, float* __restrict__ y) {
  static_assert(M == 2 || MaxGroups <= 2);
  await_previous_grid();
  const int64_t first_row =
      (static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + static_cast<int>(threadIdx.x) / kWarp) * 16 * M;
  if (first_row >= rows) return;
  const int count = *tile_count;
  for (int64_t index = blockIdx.y; index < count; index += gridDim.y) {
    const int4 tile = tiles[index];
    const uint32_t* words[kMaxGroups];
    switch (column_words(h_split, nullptr, tile, inner, words)) {  // warp-uniform
      case 1: down_tile<M, 1, Folded>(tile, words, w2, first_row, rows, inner, y); break;
      case 2: down_tile<M, 2, Folded>(tile, words, w2, first_row, rows, inner, y); break;
      default:
        if constexpr (MaxGroups > 2) {
          if (tile.z <= 3 * kTokensPerMma) down_tile<M, 3, Folded>(tile, words, w2, first_row, rows, inner, y);
          else down_tile<M, 4, Folded>(tile, words, w2, first_row, rows, inner, y);
        }
    }
  }
}

unsigned grid_y(int64_t tile_bound) { return static_cast<unsigned>(tile_bound < kMaxGridY ? tile_bound : kMaxGridY); }

void check_sizes(const char* who, int64_t pairs, int64_t rows, int64_t cols, int64_t tile_bound) {
  if (pairs < 0 || rows < 0 || cols < 0 || tile_bound < 0)
    fail(who, ": negative size (pairs ", pairs, ", rows ", rows, ", cols ", cols, ", tiles ", tile_bound, ")");
  if (rows % 16 != 0 || cols % kChunkColumns != 0)
    fail(who, ": ", rows, " x ", cols, " experts; this kernel needs rows a multiple of 16 and columns of ",
         kChunkColumns);
  if (pairs >= (int64_t{1} << 31)) fail(who, ": ", pairs, " pairs, over 2^31");
}

// Blocks of the wide grid below which a call takes the narrow one: two an SM (the wide kernels
// fit three; at one token V4.1-Flash's gate_up has 216 blocks for 132 SMs).
bool narrow_grid(ExpertGrid grid, int64_t wide_blocks) {
  if (grid != ExpertGrid::kAuto) return grid == ExpertGrid::kNarrow;
  const int sms = current_device_sm_count();
  if (sms == 0) return false;
  return wide_blocks < 2 * int64_t{sms};
}

}  // namespace

bool expert_mma_supports(const WeightMatrix& device_weight) {
  const WeightMatrix& w = device_weight;
  return w.encoding == WeightEncoding::FP4_E2M1 && w.scale_encoding == ScaleEncoding::E8M0 && w.block_cols == 32 &&
         w.block_rows == 1 && w.rows % 16 == 0 && w.cols % kChunkColumns == 0 && w.data && w.scales &&
         w.layout == WeightLayout::ExpertTiles && reinterpret_cast<uintptr_t>(w.data) % 16 == 0;
}

bool expert_tiles_fit(const WeightMatrix& w) {
  return w.encoding == WeightEncoding::FP4_E2M1 && w.scale_encoding == ScaleEncoding::E8M0 && w.block_cols == 32 &&
         w.block_rows == 1 && w.rows % 16 == 0 && w.cols % kChunkColumns == 0 && w.layout == WeightLayout::RowMajor;
}

namespace {

// A row-major code word's bits in the tiled order (expert_decode.cuh).
__device__ uint32_t tiled_code_word(uint32_t word) {
  uint32_t tiled = 0;
#pragma unroll
  for (int nibble = 0; nibble < 8; ++nibble)
#pragma unroll
    for (int bit = 0; bit < 4; ++bit) tiled |= ((word >> (4 * nibble + bit)) & 1u) << expert_tile_bit(nibble, bit);
  return tiled;
}

// One thread per 16 bytes of the tiled copy.
__global__ void tile_expert_codes_kernel(const uint8_t* __restrict__ row_major, uint8_t* __restrict__ tiled,
                                         int64_t rows, int64_t row_bytes) {
  await_previous_grid();
  const int64_t pieces = rows * row_bytes / 16;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < pieces;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t at = i * 16;  // in the tiled copy
    const int64_t tile = at / (16 * row_bytes), within = at % (16 * row_bytes);
    const int64_t chunk = within / 1024, row = (within % 1024) / 64, byte = within % 64;
    const int64_t from = (tile * 16 + row) * row_bytes + chunk * 64 + byte;
    uint4 v = *reinterpret_cast<const uint4*>(row_major + from);
    v = make_uint4(tiled_code_word(v.x), tiled_code_word(v.y), tiled_code_word(v.z), tiled_code_word(v.w));
    *reinterpret_cast<uint4*>(tiled + at) = v;
  }
}

}  // namespace

void tile_expert_codes(const uint8_t* row_major, uint8_t* tiled, int64_t rows, int64_t row_bytes, Stream stream) {
  if (launches_skipped()) return;
  if (rows < 0 || row_bytes < 0 || rows % 16 != 0 || row_bytes % 64 != 0)
    fail("cuda::tile_expert_codes: ", rows, " rows of ", row_bytes, " bytes (need multiples of 16 rows and 64 bytes)");
  if (reinterpret_cast<uintptr_t>(row_major) % 16 != 0 || reinterpret_cast<uintptr_t>(tiled) % 16 != 0)
    fail("cuda::tile_expert_codes: device pointers must be 16-byte aligned");
  if (rows == 0 || row_bytes == 0) return;
  launch(tile_expert_codes_kernel, grid_for(rows * row_bytes / 16, 256), 256, 0, native(stream), row_major, tiled,
         rows, row_bytes);
  check_launch("cuda::tile_expert_codes");
}

namespace {

void check_tile_pairs(const char* who, int tile_pairs) {
  if (tile_pairs != kExpertTilePairs && tile_pairs != kExpertWideTilePairs)
    fail(who, ": tiles of ", tile_pairs, " pairs (", kExpertTilePairs, " or ", kExpertWideTilePairs, ")");
}

// moe_sort and expert_tiles in one block, for steps of at most kTileThreads pairs (decode
// batches): pair i's sorted position is the number of pairs before it in (expert, index) order, a
// count over the pairs in shared memory, which is the stable order CUB's radix sort gives; then
// expert_tiles_kernel's single round over those positions. One launch where there were four
// (iota, CUB's sort, the finish, the tiles; CUB's sort also waits for its predecessor to drain).
// With pair_weights, each position's weight too (sorted_weight: a gather of them by sorted_pair).
__global__ void __launch_bounds__(kTileThreads)
    moe_sort_tiles_kernel(const int32_t* __restrict__ experts, int pairs, int top_k, int capacity,
                          int32_t* __restrict__ sorted_expert, int32_t* __restrict__ sorted_token,
                          int64_t* __restrict__ sorted_pair, int64_t* __restrict__ position_of, int4* __restrict__ tiles,
                          int32_t* __restrict__ tile_count, const float* __restrict__ pair_weights,
                          float* __restrict__ sorted_weight) {
  await_previous_grid();
  using Scan = cub::BlockScan<int, kTileThreads>;
  __shared__ typename Scan::TempStorage temp;
  __shared__ int32_t keys[kTileThreads];
  __shared__ int32_t sorted[kTileThreads];
  const int i = static_cast<int>(threadIdx.x);
  int32_t expert = 0;
  if (i < pairs) keys[i] = expert = experts[i];
  __syncthreads();
  if (i < pairs) {
    int position = 0;
    for (int j = 0; j < pairs; ++j) {
      const int32_t other = keys[j];
      position += other < expert || (other == expert && j < i);
    }
    sorted[position] = expert;
    sorted_expert[position] = expert;
    sorted_token[position] = i / top_k;
    sorted_pair[position] = i;
    position_of[i] = position;
    if (pair_weights) sorted_weight[position] = pair_weights[i];
  }
  __syncthreads();
  const int total = cut_tiles<Scan>(sorted, i, pairs, capacity, tiles, temp);
  if (i == 0) *tile_count = total;
}

// What expert_tiles can cut: the mma.sync kernels' tiles and the wgmma kernels' (16 or 32 pairs).
void check_tiling(const char* who, int tile_pairs) {
  if (tile_pairs != 16 && tile_pairs != 32) check_tile_pairs(who, tile_pairs);
}

}  // namespace

// Wide tiles hold four groups' accumulators in 255 registers with some spilled, at two blocks an
// SM: measured slower than 4-pair tiles up to 4 pairs an expert (V4.1-Flash shapes at 256 tokens
// +4%), faster from 8 (512 tokens -7%, V4-Flash -10%; docs/BENCHMARKS.md).
constexpr int64_t kWideTilePairsPerExpert = 6;

int expert_tile_pairs(int64_t pairs, int64_t experts) {
  return pairs >= kWideTilePairsPerExpert * experts ? kExpertWideTilePairs : kExpertTilePairs;
}

int64_t expert_tile_bound(int64_t pairs, int64_t experts, int tile_pairs) {
  check_tiling("cuda::expert_tile_bound", tile_pairs);
  if (pairs <= 0) return 0;
  // Each expert's run (the negative "no expert" id included) ends at most one partial tile.
  const int64_t bound = (pairs + tile_pairs - 1) / tile_pairs + experts + 1;
  return bound < pairs ? bound : pairs;
}

void expert_tiles(const int32_t* sorted_expert, int64_t pairs, int32_t* tiles, int32_t* tile_count, Stream stream,
                  int tile_pairs) {
  if (launches_skipped()) return;
  check_tiling("cuda::expert_tiles", tile_pairs);
  if (pairs < 0) fail("cuda::expert_tiles: negative pair count ", pairs);
  if (pairs >= (int64_t{1} << 31)) fail("cuda::expert_tiles: ", pairs, " pairs, over 2^31");
  launch(expert_tiles_kernel, 1, kTileThreads, 0, native(stream), sorted_expert, static_cast<int>(pairs), tile_pairs,
         reinterpret_cast<int4*>(tiles), tile_count);
  check_launch("cuda::expert_tiles");
}

bool moe_sort_tiles(const int32_t* experts, int64_t pairs, int64_t top_k, int32_t* sorted_expert,
                    int32_t* sorted_token, int64_t* sorted_pair, int64_t* position_of, int32_t* tiles,
                    int32_t* tile_count, Stream stream, int tile_pairs, const float* pair_weights,
                    float* sorted_weight) {
  if (pairs > kTileThreads) return false;
  if (launches_skipped()) return true;
  check_tiling("cuda::moe_sort_tiles", tile_pairs);
  if (pairs < 0 || top_k <= 0) fail("cuda::moe_sort_tiles: bad sizes (pairs ", pairs, ", top_k ", top_k, ")");
  launch(moe_sort_tiles_kernel, 1, kTileThreads, 0, native(stream), experts, static_cast<int>(pairs),
         static_cast<int>(top_k), tile_pairs, sorted_expert, sorted_token, sorted_pair, position_of,
         reinterpret_cast<int4*>(tiles), tile_count, pair_weights, sorted_weight);
  check_launch("cuda::moe_sort_tiles");
  return true;
}

void expert_gate_up(const uint32_t* x_split, const int32_t* x_row, int64_t pairs, const int32_t* tiles,
                    const int32_t* tile_count, int64_t tile_bound, const WeightMatrix* w1, const WeightMatrix* w3,
                    int64_t inner, int64_t cols, float limit, const float* pair_scale, uint32_t* h_split,
                    Stream stream, int max_e8m0, int tile_pairs, ExpertGrid grid) {
  if (launches_skipped()) return;
  check_sizes("cuda::expert_gate_up", pairs, inner, cols, tile_bound);
  check_tile_pairs("cuda::expert_gate_up", tile_pairs);
  if (pairs == 0 || inner == 0 || tile_bound == 0) return;
  const bool folded = max_e8m0 <= kMaxFoldedE2m1Scale, wide = tile_pairs == kExpertWideTilePairs;
  const int64_t row_blocks = (inner + kWarpsPerBlock * kTileRowsGateUp - 1) / (kWarpsPerBlock * kTileRowsGateUp);
  if (!wide && narrow_grid(grid, row_blocks * grid_y(tile_bound))) {
    const int64_t narrow_blocks = (inner + kWarpPairsPerBlock * kTileRowsGateUp - 1) / (kWarpPairsPerBlock * kTileRowsGateUp);
    launch(folded ? gate_up_narrow_kernel<true> : gate_up_narrow_kernel<false>,
           dim3(static_cast<unsigned>(narrow_blocks), grid_y(tile_bound)), kMmaThreads, 0, native(stream), x_split,
           x_row, reinterpret_cast<const int4*>(tiles), tile_count, w1, w3, inner, cols, limit, pair_scale, h_split);
    check_launch("cuda::expert_gate_up");
    return;
  }
  const auto kernel = folded ? (wide ? gate_up_kernel<true, 4> : gate_up_kernel<true, 2>)
                             : (wide ? gate_up_kernel<false, 4> : gate_up_kernel<false, 2>);
  launch(kernel, dim3(static_cast<unsigned>(row_blocks), grid_y(tile_bound)), kMmaThreads, 0, native(stream), x_split,
         x_row, reinterpret_cast<const int4*>(tiles), tile_count, w1, w3, inner, cols, limit, pair_scale, h_split);
  check_launch("cuda::expert_gate_up");
}

void expert_down(const uint32_t* h_split, int64_t pairs, const int32_t* tiles, const int32_t* tile_count,
                 int64_t tile_bound, const WeightMatrix* w2, int64_t rows, int64_t inner, float* y, Stream stream,
                 int max_e8m0, int tile_pairs, ExpertGrid grid) {
  if (launches_skipped()) return;
  check_sizes("cuda::expert_down", pairs, rows, inner, tile_bound);
  check_tile_pairs("cuda::expert_down", tile_pairs);
  if (pairs == 0 || rows == 0 || tile_bound == 0) return;
  const bool folded = max_e8m0 <= kMaxFoldedE2m1Scale, wide = tile_pairs == kExpertWideTilePairs;
  const auto row_blocks = [&](int64_t rows_per_warp) {
    return (rows + kWarpsPerBlock * rows_per_warp - 1) / (kWarpsPerBlock * rows_per_warp);
  };
  const bool narrow = !wide && narrow_grid(grid, row_blocks(32) * grid_y(tile_bound));
  const auto kernel = narrow   ? (folded ? down_kernel<true, 2, 1> : down_kernel<false, 2, 1>)
                      : folded ? (wide ? down_kernel<true, 4> : down_kernel<true, 2>)
                               : (wide ? down_kernel<false, 4> : down_kernel<false, 2>);
  launch(kernel, dim3(static_cast<unsigned>(row_blocks(narrow ? 16 : 32)), grid_y(tile_bound)), kMmaThreads, 0,
         native(stream), h_split, reinterpret_cast<const int4*>(tiles), tile_count, w2, rows, inner, y);
  check_launch("cuda::expert_down");
}

}  // namespace deepinfer::kernels::cuda
