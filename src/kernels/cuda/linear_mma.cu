// linear on the tensor cores, for the dense weights of DeepSeek's releases: FP8 e4m3 with E8M0
// block scales (32 x 32 in V4.1, 128 x 128 in V4) and BF16 (the LM head). y[t, r] = sum_c x[t, c]
// W[r, c] with x split into three BF16 planes (split_rows) and W decoded exactly in registers
// (mma_common.cuh: the operand order, and why three planes keep an f32 sum).
//
// Why: the SIMT linear (linear.cu) reduces a weight row per warp against each token's f32
// activations, so activations are re-read from L1 / L2 once per output row, and at batch 64
// that traffic, not the weights' bytes, sets its time. Here a warp holds 32 weight rows (two
// m16 tiles) and multiplies each 128-column chunk with up to 8, 16 or 32 tokens (groups_for):
// activations are read once per 32 rows, weights once per 16 or 32 tokens.
//
// Planes as MMAs, tokens as columns: an MMA's 8 columns are 8 tokens of one plane, and each
// 16-column step takes three MMAs, hi, mid and lo. Only hi's sum needs the rounded add of
// mma_common.cuh (each MMA from zero, then an f32 add): mid and lo are at most 2^-8 and 2^-16 of
// hi, so the tensor cores' own accumulation (its truncation ~2^-23 of their running sum) adds an
// error ~2^-31 of the result, and they accumulate in place in one accumulator. y = hi sum + (mid
// + lo) sum. Against the expert kernel's layout (a token's three planes in one MMA, 2 tokens an
// MMA, every MMA rounded-added) this is 3 MMAs and 4 adds per 8 tokens instead of 4 MMAs and 16
// adds, and the weights are decoded once per 16 or 32 tokens instead of per 8, which is what
// sets the time past a few tokens (docs/BENCHMARKS.md, "cuda_gemm_bench").
//
// Work split: blockIdx.x = token blocks (fastest, so the blocks that read the same weight
// rows run together and share them through L2), blockIdx.y = 128-row blocks (4 warps),
// blockIdx.z = column ranges. The ranges follow the weight's shape alone (enough blocks for the
// SMs when a matrix has few rows, as wq_a's 1280 rows are 10 blocks), never the token count, and
// each range's partial sums land in a workspace added in range order: so a token's result is
// the same bits alone or in any batch (a token is its own MMA column; batch invariance, with no
// mode of its own).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/error.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/dense_decode.cuh"
#include "kernels/cuda/launch_gate.h"
#include "kernels/cuda/linear_mma_plan.h"
#include "kernels/cuda/mma_common.cuh"

namespace deepinfer::kernels::cuda {
namespace {

using namespace detail;
using namespace mma;
using dense::ColumnRanges;
using dense::Groups;
using dense::kRowsPerBlock;

constexpr int kWarpsPerBlock = 4;
constexpr int kThreads = kWarpsPerBlock * kWarp;
constexpr int kRowsPerWarp = 32;
static_assert(kRowsPerBlock == int64_t{kWarpsPerBlock} * kRowsPerWarp);
constexpr int kTokensPerGroup = 8;           // an MMA's columns: 8 tokens of one plane
constexpr int64_t kMaxGrid = 65535;
// The most partial sums per thread the last block of a tile adds (linear_mma_kernel): 32 covers
// one token over 32 ranges (a decode step at batch 1), not 2 tokens over 17 or more.
constexpr int64_t kFoldLoadsPerThread = 32;

// MMA column groups per warp (8 tokens each), by the call's token count: 2 up to 64 tokens (128
// registers, 4 blocks an SM), 4 past it (162 registers, 3 blocks an SM, weights decoded once per
// 32 tokens). Measured on the H200 (docs/BENCHMARKS.md, "cuda_gemm_bench"). Calls of at most 8
// tokens (a decode step's projections, the router and the compressors at batch 1; on Hopper the
// wgmma kernel takes most matrices from 2 tokens) take one group and split their own x
// (SplitInShared), BF16 as FP8 (the head alone measured 3.6% slower so than behind split_rows,
// the batch-1 step 1.1% faster: docs/BENCHMARKS.md, "One-token linears"). A token's bits do not
// depend on it: a token is its own MMA column, reduced in the same order either way.
constexpr int64_t kOneGroupTokens = 8;
constexpr int64_t kSmallCallMaxSharedBytes = 48 * 1024;
constexpr int64_t kTwoGroupTokens = 64;
int groups_for(int64_t tokens) {
  if (tokens <= kOneGroupTokens) return 1;
  return tokens <= kTwoGroupTokens ? 2 : 4;
}

struct Plan : ColumnRanges {
  int64_t token_blocks = 0;
};

Plan plan_of(int64_t tokens, const WeightMatrix& w) {
  Plan p;
  static_cast<ColumnRanges&>(p) = dense::column_ranges(w);
  const int64_t per_block = int64_t{kTokensPerGroup} * groups_for(tokens);
  p.token_blocks = (tokens + per_block - 1) / per_block;
  return p;
}

// Where a warp's B operand comes from. Calls of 9 tokens and more: the split rows split_rows_kernel
// wrote to global memory. Small calls, of at most 8 tokens (one group a warp): the block splits its own column
// range of x into shared memory after the previous kernel completes, so such a call is one launch
// instead of two (a decode step at batch 1 made ~45 of those launches, a few microseconds each
// with its gap); the split is elementwise, so the words, and the sums, are the same bits.
template <int kGroups>
struct SplitInGlobal {
  const uint32_t* words[kGroups];  // group u's column of this lane: its hi plane (mid and lo follow)
  int64_t plane_words;
  // 16 bytes at `word` of plane p, counted from chunk 0 of the lane's group columns.
  __device__ __forceinline__ uint4 load(int u, int p, int64_t chunk, int64_t word) const {
    return __ldg(reinterpret_cast<const uint4*>(words[u] + p * plane_words + chunk * (kChunkColumns / 2) + word));
  }
};

struct SplitInShared {
  const uint32_t* words;  // this lane's token: its hi plane of the block's range (mid and lo follow)
  int64_t plane_words;    // the range's words a plane
  int64_t first_chunk;    // the range's first chunk
  __device__ __forceinline__ uint4 load(int, int p, int64_t chunk, int64_t word) const {
    return *reinterpret_cast<const uint4*>(words + p * plane_words + (chunk - first_chunk) * (kChunkColumns / 2) + word);
  }
};

// Shared memory of a small call's block: the tile's tokens' three planes over its column range.
int64_t small_call_shared_bytes(int64_t tile_tokens, int64_t range_chunks) {
  return tile_tokens * kPlanes * range_chunks * (kChunkColumns / 2) * int64_t{sizeof(uint32_t)};
}

// A small call's block: tokens t0 .. t0 + live - 1 of x, the block's group's columns of chunks
// [begin, end), split into `shared` as [token][plane][word] (split_rows_kernel's words).
__device__ __forceinline__ void split_range_into_shared(const float* __restrict__ x, int64_t x_stride, int64_t t0,
                                                        int64_t live, int64_t column0, int64_t begin, int64_t end,
                                                        uint32_t* shared) {
  const int64_t range_words = (end - begin) * (kChunkColumns / 2);
  for (int64_t i = threadIdx.x; i < live * range_words; i += kThreads) {
    const int64_t t = i / range_words, word = i % range_words;
    const float* row = x + (t0 + t) * x_stride + column0 + begin * kChunkColumns + split_word_column(word);
    uint32_t first[kPlanes], second[kPlanes];
    split_value(row[0], first);
    split_value(row[4], second);
#pragma unroll
    for (int p = 0; p < kPlanes; ++p) shared[(t * kPlanes + p) * range_words + word] = first[p] | (second[p] << 16);
  }
}

// One warp's 32 rows x the block's tokens over this block's column range, stored to out (the
// range's partial sums when the call splits columns). A warp's rows lie in one group
// (group_rows is a multiple of 32; 128 for a small call, so a block's rows are in one group).
// Waits for the previous kernel (await_previous_grid) before it reads x; a small call loads its
// first chunk of weights before that (they are written once, at upload), so those loads overlap
// the previous kernel's tail. (Asking the rest of the range into L2 there as well, with
// prefetch.global.L2, was measured slower: wq_b at one token 24.0 -> 26.3 us.)
template <WeightEncoding E, int kGroups, bool NanCodes, bool Folded>
__device__ __forceinline__ void mma_tile(const uint32_t* __restrict__ x_split, const float* __restrict__ x,
                                         int64_t x_stride, int64_t tokens, const WeightMatrix& w,
                                         const Groups& grouping, int64_t range_chunks, float* __restrict__ out,
                                         int64_t out_stride) {
  constexpr bool kSmall = kGroups == 1;  // a call of at most kOneGroupTokens tokens (groups_for)
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int g = lane / 4, q = lane % 4;
  const int64_t first_row =
      (static_cast<int64_t>(blockIdx.y) * kWarpsPerBlock + static_cast<int>(threadIdx.x) / kWarp) * kRowsPerWarp;
  const bool active = first_row < w.rows;
  const bool second = first_row + 16 < w.rows;  // warp-uniform: rows is a multiple of 16
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * kTokensPerGroup * kGroups;
  const int64_t live_groups = (tokens - t0 + kTokensPerGroup - 1) / kTokensPerGroup;
  const int groups = static_cast<int>(live_groups < kGroups ? live_groups : kGroups);
  const int64_t chunks = w.cols / kChunkColumns;
  const int64_t begin = static_cast<int64_t>(blockIdx.z) * range_chunks;
  const int64_t end = begin + range_chunks < chunks ? begin + range_chunks : chunks;

  // The warp's group: its rows counted from the group's first.
  const GroupWeights weights = group_weights_of(w, grouping, active ? first_row : 0);
  const int64_t group = weights.index;
  const uint8_t* scales = weights.scales;
  const int64_t local_first_row = first_row - weights.first_row;
  RowPointers<E, 2> rows;
  const int64_t row_bytes = E == WeightEncoding::BF16 ? w.cols * 2 : w.cols;
  // Without a second tile the first is read twice and its copy dropped: one code path.
  const auto row_of = [&](int m, int r) { return local_first_row + (second ? 16 * m : 0) + g + 8 * r; };
#pragma unroll
  for (int m = 0; m < 2; ++m)
#pragma unroll
    for (int r = 0; r < 2; ++r) rows.data[m][r] = static_cast<const uint8_t*>(weights.data) + row_of(m, r) * row_bytes;

  // A column past the tokens reads token t0's instead of zeros (column n of D depends on column n
  // of B alone, and such columns are never stored): no zeroing or test in the loop.
  using Split = std::conditional_t<kSmall, SplitInShared, SplitInGlobal<kGroups>>;
  Split split;
  ChunkBytes<E, 2> first_chunk;  // a small call's first chunk, loaded before the wait
  if constexpr (kSmall) {
    extern __shared__ uint4 shared_words[];
    auto* shared = reinterpret_cast<uint32_t*>(shared_words);
    if (active && begin < end) {
      load_chunk_scale_bytes(scales, w, begin, row_of, first_chunk);
      load_chunk_half(rows, begin, 0, first_chunk);
      load_chunk_half(rows, begin, 1, first_chunk);
    }
    await_previous_grid();
    const int64_t live = tokens - t0 < kTokensPerGroup ? tokens - t0 : kTokensPerGroup;
    const int64_t block_group = static_cast<int64_t>(blockIdx.y) * kRowsPerBlock / grouping.group_rows;
    split_range_into_shared(x, x_stride, t0, live, block_group * w.cols, begin, end, shared);
    __syncthreads();
    split.plane_words = (end - begin) * (kChunkColumns / 2);
    split.words = shared + (g < live ? g : 0) * kPlanes * split.plane_words;
    split.first_chunk = begin;
  } else {
    await_previous_grid();
    split.plane_words = grouping.x_columns / 2;
#pragma unroll
    for (int u = 0; u < kGroups; ++u) {
      const int64_t t = t0 + kTokensPerGroup * u + g;
      split.words[u] = x_split + kPlanes * (t < tokens ? t : t0) * split.plane_words + group * (w.cols / 2);
    }
  }
  if (!active) return;

  float hi[2][kGroups][4] = {};       // rounded adds of each MMA
  float mid_lo[2][kGroups][4] = {};   // the tensor cores' accumulation
  // The MMAs of half h of chunk c, its weights decoded in a.
  const auto multiply_half = [&](int64_t c, int h, const HalfA<2>& a) {
#pragma unroll
    for (int u = 0; u < kGroups; ++u) {
      if (u >= groups) break;  // warp-uniform
      uint4 b[kPlanes][2];
#pragma unroll
      for (int p = 0; p < kPlanes; ++p) {
        b[p][0] = split.load(u, p, c, q * kSegmentWords + 8 * h);
        b[p][1] = split.load(u, p, c, q * kSegmentWords + 8 * h + 4);
      }
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) {  // MMA j = 4 h + jj: words (2 j, 2 j + 1), i = j / 2
        const int ii = jj / 2, n0 = (jj % 2) * 2;
#pragma unroll
        for (int m = 0; m < 2; ++m) {
          const uint32_t a0 = a.words[m][0][ii][n0], a1 = a.words[m][1][ii][n0];
          const uint32_t a2 = a.words[m][0][ii][n0 + 1], a3 = a.words[m][1][ii][n0 + 1];
          mma_bf16_add(hi[m][u], a0, a1, a2, a3, word_of(b[0][ii], n0), word_of(b[0][ii], n0 + 1));
          mma_bf16(mid_lo[m][u], a0, a1, a2, a3, word_of(b[1][ii], n0), word_of(b[1][ii], n0 + 1));
          mma_bf16(mid_lo[m][u], a0, a1, a2, a3, word_of(b[2][ii], n0), word_of(b[2][ii], n0 + 1));
        }
      }
    }
  };
  int64_t c = begin;
  if constexpr (kSmall) {  // the chunk loaded before the wait
    if (c < end) {
      uint32_t scale[2][2];
#pragma unroll
      for (int m = 0; m < 2; ++m)
#pragma unroll
        for (int r = 0; r < 2; ++r) scale[m][r] = decode_scale<Folded>(first_chunk.scale_byte[m][r]);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        HalfA<2> a;
        decode_loaded_half<E, NanCodes, Folded>(first_chunk, scale, h, a);
        multiply_half(c, h, a);
      }
      ++c;
    }
  }
  for (; c < end; ++c) {
    load_chunk_scales<E, 2, Folded>(rows, scales, w, c, row_of);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      HalfA<2> a;
      decode_half<E, NanCodes, Folded>(rows, c, h, a);
      multiply_half(c, h, a);
    }
  }
  out += static_cast<int64_t>(blockIdx.z) * tokens * w.rows;  // a range's partial sums (out_stride = rows)
  // D's element i of this lane: row g + 8 (i / 2) of the tile, token 2 q + i % 2 of the group.
#pragma unroll
  for (int u = 0; u < kGroups; ++u) {
    if (u >= groups) break;
#pragma unroll
    for (int m = 0; m < 2; ++m) {
      if (m == 1 && !second) break;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t t = t0 + kTokensPerGroup * u + 2 * q + i % 2;
        if (t >= tokens) continue;
        out[t * out_stride + first_row + 16 * m + g + 8 * (i / 2)] = hi[m][u][i] + mid_lo[m][u][i];
      }
    }
  }
}

// With column ranges, the last of a tile's range blocks to finish adds the tile's partial sums in
// range order and writes y: the sum add_ranges_kernel makes, in its order (so the same bits), one
// launch fewer a linear (at one token a decode step ran 80 of them, ~4 us each with their gaps).
// Each block publishes its partials (fence), then takes a ticket on the tile's counter; the block
// that draws the last ticket resets the counter for the next launch and reads the partials from
// L2 (__ldcg: another SM wrote them, and this SM's L1 is not coherent with it), eight ranges'
// loads in flight before it adds them in order. One block per tile does this tail, so it pays
// only while a tile's partials are few (kFoldLoadsPerThread, host side); past that the separate
// launch, which spreads the sum over the whole device, is faster (measured: folding every call
// cost 0.8-2.7 ms a step at batch 16-256).
template <WeightEncoding E, int kGroups, bool NanCodes, bool Folded>
__global__ void __launch_bounds__(kThreads, kGroups == 4 ? 3 : 4)
    linear_mma_kernel(const uint32_t* __restrict__ x_split, const float* __restrict__ x, int64_t x_stride,
                      int64_t tokens, WeightMatrix w, Groups grouping, int64_t range_chunks, float* __restrict__ out,
                      int64_t out_stride, float* __restrict__ y, int64_t y_stride, uint32_t* __restrict__ tile_counters) {
  mma_tile<E, kGroups, NanCodes, Folded>(x_split, x, x_stride, tokens, w, grouping, range_chunks, out, out_stride);
  if (!tile_counters) return;
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t& counter = tile_counters[static_cast<int64_t>(blockIdx.y) * gridDim.x + blockIdx.x];
    last = atomicAdd(&counter, 1u) == gridDim.z - 1;
    if (last) counter = 0;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * kTokensPerGroup * kGroups;
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kRowsPerBlock;
  const int64_t tile_tokens = min(int64_t{kTokensPerGroup} * kGroups, tokens - t0);
  const int64_t tile_rows = min(kRowsPerBlock, w.rows - row0);
  const int64_t count = tokens * w.rows;
  const unsigned ranges = gridDim.z;
  for (int64_t i = threadIdx.x; i < tile_tokens * tile_rows; i += kThreads) {
    const int64_t t = t0 + i / tile_rows, r = row0 + i % tile_rows;
    const float* partial = out + t * w.rows + r;
    float sum = __ldcg(partial);
    constexpr unsigned kInFlight = 8;
    for (unsigned z0 = 1; z0 < ranges; z0 += kInFlight) {
      float v[kInFlight];
#pragma unroll
      for (unsigned u = 0; u < kInFlight; ++u) v[u] = z0 + u < ranges ? __ldcg(partial + (z0 + u) * count) : 0.0f;
#pragma unroll
      for (unsigned u = 0; u < kInFlight; ++u)
        if (z0 + u < ranges) sum += v[u];
    }
    y[t * y_stride + r] = sum;
  }
}

// y[t, r] (row stride y_stride) = sum over ranges z in order of partials[z][t][r].
__global__ void add_ranges_kernel(const float* __restrict__ partials, int64_t tokens, int64_t rows, int64_t ranges,
                                  float* __restrict__ y, int64_t y_stride) {
  await_previous_grid();
  const int64_t count = tokens * rows;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float sum = partials[i];
    for (int64_t z = 1; z < ranges; ++z) sum += partials[z * count + i];
    int64_t t, r;
    split_index(i, rows, t, r);
    y[t * y_stride + r] = sum;
  }
}

// Row r of x (stride x_stride) as split words: for each word w of a plane, its two columns.
__global__ void split_rows_kernel(const float* __restrict__ x, int64_t rows, int64_t cols, int64_t x_stride,
                                  uint32_t* __restrict__ out) {
  await_previous_grid();
  const int64_t words = cols / 2;
  const int64_t total = rows * words;
  for (int64_t index = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; index < total;
       index += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t r, w;
    split_index(index, words, r, w);
    const int64_t c = split_word_column(w);
    uint32_t first[kPlanes], second[kPlanes];
    split_value(x[r * x_stride + c], first);
    split_value(x[r * x_stride + c + 4], second);
#pragma unroll
    for (int p = 0; p < kPlanes; ++p) out[(kPlanes * r + p) * words + w] = first[p] | (second[p] << 16);
  }
}

}  // namespace

bool linear_mma_supports(const WeightMatrix& w) {
  if (w.rows % 16 != 0 || w.cols % kChunkColumns != 0 || !w.data || w.rows == 0) return false;
  if (reinterpret_cast<uintptr_t>(w.data) % 16 != 0) return false;
  if (w.encoding == WeightEncoding::BF16) return true;
  return w.encoding == WeightEncoding::FP8_E4M3 && w.scale_encoding == ScaleEncoding::E8M0 && w.scales &&
         w.block_cols % kSegmentColumns == 0 && w.block_rows >= 1;
}

int64_t split_words(int64_t rows, int64_t cols) { return rows * kPlanes * (cols / 2); }

int64_t linear_split_words(int64_t tokens, int64_t x_columns) {
  return std::max(split_words(tokens, x_columns), dense::linear_wgmma_split_words(tokens, x_columns));
}

int64_t linear_mma_split_words(int64_t tokens, const WeightMatrix& w) { return linear_split_words(tokens, w.cols); }

int64_t linear_mma_partial_floats(int64_t tokens, const WeightMatrix& w) {
  const Plan p = plan_of(tokens, w);
  return p.count > 1 ? p.count * tokens * w.rows : 0;
}

void split_rows(const float* x, int64_t rows, int64_t cols, int64_t x_stride, uint32_t* out, Stream stream) {
  if (launches_skipped()) return;
  if (rows < 0 || cols < 0 || cols % kSegmentColumns != 0 || x_stride < cols)
    fail("cuda::split_rows: ", rows, " x ", cols, " with row stride ", x_stride, " (columns must be a multiple of ",
         kSegmentColumns, ", the stride at least the columns)");
  if (rows * cols == 0) return;
  launch(split_rows_kernel, grid_for(rows * cols / 2, 256), 256, 0, native(stream), x, rows, cols, x_stride, out);
  check_launch("cuda::split_rows");
}

namespace {

using Kernel = void (*)(const uint32_t*, const float*, int64_t, int64_t, WeightMatrix, Groups, int64_t, float*,
                        int64_t, float*, int64_t, uint32_t*);

// The kernel for w's encoding, its codes (NaN-free at upload for every released checkpoint) and
// whether its scales fold into the decode's multiply.
template <int kGroups>
Kernel kernel_for(const WeightMatrix& w) {
  constexpr auto kFp8 = WeightEncoding::FP8_E4M3;
  if (w.encoding == WeightEncoding::BF16) return linear_mma_kernel<WeightEncoding::BF16, kGroups, false, false>;
  if (!w.no_nan_codes) return linear_mma_kernel<kFp8, kGroups, true, false>;
  if (w.max_e8m0 <= kMaxFoldedE4m3Scale) return linear_mma_kernel<kFp8, kGroups, false, true>;
  return linear_mma_kernel<kFp8, kGroups, false, false>;
}

// One launch of the MMA kernel (and, when its ranges are not folded, the range sum) over `w`,
// grouped or not (Groups).
void run_linear_mma(const float* x, int64_t x_stride, int64_t tokens, const WeightMatrix& w, const Groups& grouping,
                    float* y, int64_t y_stride, uint32_t* x_split, float* partials, Stream stream,
                    uint32_t* tile_counters) {
  const Plan p = plan_of(tokens, w);
  if (p.token_blocks > kMaxGrid || p.row_blocks > kMaxGrid)
    fail("cuda::linear_mma: ", tokens, " tokens x ", w.rows, " rows is past the grid's limits");
  const cudaStream_t s = native(stream);
  if (x_stride < grouping.x_columns || y_stride < w.rows)
    fail("cuda::linear_mma: row strides ", x_stride, " (x) and ", y_stride, " (y) under a ", w.rows, " x ",
         grouping.x_columns, " product");
  float* out = p.count > 1 ? partials : y;
  const int64_t out_stride = p.count > 1 ? w.rows : y_stride;
  if (dense::linear_wgmma_runs(tokens, w, grouping)) {
    dense::linear_wgmma(x, x_stride, tokens, w, grouping, p, out, out_stride, x_split, s);
    if (p.count > 1)
      launch(add_ranges_kernel, grid_for(tokens * w.rows, 256), 256, 0, s, partials, tokens, w.rows, p.count, y,
             y_stride);
    check_launch("cuda::linear_mma");
    return;
  }
  const dim3 grid(static_cast<unsigned>(p.token_blocks), static_cast<unsigned>(p.row_blocks),
                  static_cast<unsigned>(p.count));
  int groups = groups_for(tokens);
  const int64_t tile_tokens = std::min<int64_t>(tokens, int64_t{kTokensPerGroup} * groups);
  // A small call splits x in its blocks when a block's rows are in one group and its range's split
  // fits the shared memory a block gets without opting in; else it runs as a two-group call (the
  // same bits: groups_for).
  const int64_t shared_bytes = small_call_shared_bytes(tile_tokens, p.chunks_each);
  if (groups == 1 && (grouping.group_rows % kRowsPerBlock != 0 || shared_bytes > kSmallCallMaxSharedBytes)) groups = 2;
  if (groups != 1) split_rows(x, tokens, grouping.x_columns, x_stride, x_split, stream);
  // The range sum in the MMA kernel's last block when the counters cover the tiles, else its own
  // launch (a long prefill's many tiles).
  const bool fold = p.count > 1 && tile_counters && p.token_blocks * p.row_blocks <= kLinearMmaTileCounters &&
                    tile_tokens * kRowsPerBlock * p.count <= kFoldLoadsPerThread * kThreads;
  uint32_t* counters = fold ? tile_counters : nullptr;
  const Kernel kernel = groups == 1 ? kernel_for<1>(w) : groups == 2 ? kernel_for<2>(w) : kernel_for<4>(w);

  launch(kernel, grid, kThreads, groups == 1 ? shared_bytes : 0, s, x_split, x, x_stride, tokens, w, grouping,
         p.chunks_each, out, out_stride, y, y_stride, counters);
  if (p.count > 1 && !fold) {
    launch(add_ranges_kernel, grid_for(tokens * w.rows, 256), 256, 0, s, partials, tokens, w.rows, p.count, y,
           y_stride);
  }
  check_launch("cuda::linear_mma");
}

// The descriptor of a grouped call's rows taken together: `groups` times group 0's rows.
WeightMatrix grouped_shape(const WeightMatrix& group, int64_t groups) {
  WeightMatrix all = group;
  all.rows = group.rows * groups;
  return all;
}

}  // namespace

void linear_mma(const float* x, int64_t x_stride, int64_t tokens, const WeightMatrix& w, float* y, int64_t y_stride,
                uint32_t* x_split, float* partials, Stream stream, uint32_t* tile_counters) {
  if (launches_skipped()) return;
  if (!linear_mma_supports(w))
    fail("cuda::linear_mma: a ", encoding_name(w.encoding), " ", w.rows, " x ", w.cols,
         " weight this kernel does not run (linear_mma_supports)");
  if (tokens < 0) fail("cuda::linear_mma: negative token count ", tokens);
  if (tokens == 0) return;
  run_linear_mma(x, x_stride, tokens, w, Groups{nullptr, w.rows, w.cols}, y, y_stride, x_split, partials, stream,
                 tile_counters);
}

bool linear_mma_grouped_supports(const WeightMatrix& group) {
  return linear_mma_supports(group) && group.rows % kRowsPerWarp == 0;
}

int64_t linear_mma_grouped_split_words(int64_t tokens, const WeightMatrix& group, int64_t groups) {
  return linear_split_words(tokens, group.cols * groups);
}

int64_t linear_mma_grouped_partial_floats(int64_t tokens, const WeightMatrix& group, int64_t groups) {
  return linear_mma_partial_floats(tokens, grouped_shape(group, groups));
}

void linear_mma_grouped(const float* x, int64_t x_stride, int64_t tokens, const WeightMatrix& group,
                        const WeightMatrix* group_weights, int64_t groups, float* y, int64_t y_stride,
                        uint32_t* x_split, float* partials, Stream stream, uint32_t* tile_counters) {
  if (launches_skipped()) return;
  if (!linear_mma_grouped_supports(group))
    fail("cuda::linear_mma_grouped: a ", encoding_name(group.encoding), " ", group.rows, " x ", group.cols,
         " group this kernel does not run (rows a multiple of ", kRowsPerWarp, ", linear_mma_supports)");
  if (groups < 1 || !group_weights) fail("cuda::linear_mma_grouped: ", groups, " groups, descriptors ", group_weights);
  if (tokens < 0) fail("cuda::linear_mma_grouped: negative token count ", tokens);
  if (tokens == 0) return;
  run_linear_mma(x, x_stride, tokens, grouped_shape(group, groups), Groups{group_weights, group.rows, group.cols * groups},
                 y, y_stride, x_split, partials, stream, tile_counters);
}

}  // namespace deepinfer::kernels::cuda
