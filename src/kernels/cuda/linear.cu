// linear and linear_gathered: y[t, r] = sum_c x[t, c] * W[r, c] with the weight decoded in
// registers from its checkpoint encoding.
//
// Work split: a block of 8 warps takes 8 output rows (one warp each) and loops over tiles of 8
// tokens, so each weight row is streamed once per token tile while the tile's activations come
// from L1 / L2 (F32 weights in calls of 64 tokens or more: three rows a warp, linear_rows_kernel,
// in the same order). Inside a warp, lane l takes the chunks of N consecutive columns starting at
// N l + 32 N k, in increasing k, and accumulates each of its columns into one f32 sum per token
// with fmaf in increasing column order; the 32 lane sums are then combined by a butterfly
// (xor 16, 8, 4, 2, 1). N is the columns of 16 bytes of the weight's encoding (F32 4, BF16 8,
// FP8 16, FP4 32), so each lane streams its weights in 16-byte loads, which keeps enough bytes in
// flight to approach the copy bandwidth (4-column chunks were 2-byte loads for FP4 experts).
// That order is fixed by `cols` and the encoding alone: neither the number of tokens, nor the
// tile a token falls in, nor whether the loads were vectorised (alignment) changes a single
// operation, so every y[t, r] has the same bits alone or in any batch (the batch-invariance
// contract of cuda_kernels.h).
//
// Column ranges: a weight of few rows (V4.1's mHC projections: 24 rows of 20,480 columns, 3
// blocks) would leave most SMs idle at a decode step's few tokens, so its columns are cut into S
// ranges of whole warp steps (32 N columns), each lane keeping its columns' order inside a range;
// each range's lane sums are reduced by the butterfly and the S sums added in range order. S
// follows the weight's shape alone (ranges_of), never the call, so a row's bits do not depend on
// the batch. Where a call's blocks are few and the caller gives a workspace, the ranges run on
// blocks of their own, their sums land in the workspace and add_ranges_kernel adds them; else
// each block walks its rows' ranges and adds their sums itself, in the same order: the same bits.
// linear_gathered takes no ranges: a pair's row equals linear's for the same x row and a weight
// of one range, bit for bit.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "core/error.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/launch_gate.h"

namespace deepinfer::kernels::cuda {
namespace {

using namespace detail;

constexpr int kTileTokens = 8;                    // tokens (pairs) a warp reduces per weight pass
constexpr int kRowsPerBlock = 8;                  // one warp per output row
constexpr int kThreads = kRowsPerBlock * kWarp;   // 256
constexpr int64_t kMaxGridY = 65535;
// A weight whose one-token call would have fewer blocks than half of this (4 per SM of an H200)
// takes column ranges, of at least 2 warp steps; a call runs them on blocks of their own while its
// own blocks are that few.
constexpr int64_t kTargetBlocks = 528;
constexpr int64_t kMinRangeSteps = 2;
constexpr int64_t kMaxSplits = 16;

// Consecutive columns a lane takes per step: 16 bytes of the encoding.
template <WeightEncoding E>
constexpr int kChunk = E == WeightEncoding::F32         ? 4
                       : E == WeightEncoding::BF16      ? 8
                       : E == WeightEncoding::FP8_E4M3 ? 16
                                                         : 32;
template <WeightEncoding E>
constexpr int64_t kWarpStride = int64_t{kChunk<E>} * kWarp;

// One weight row as a lane reads it.
struct RowView {
  const uint8_t* data;    // the row's first byte
  const uint8_t* scales;  // the row's first scale (an E8M0 byte or an F32), as bytes
  uint32_t block_cols;    // min(block_cols, 2^31): columns are below 2^31, so the groups are unchanged
  int block_shift;        // log2(block_cols) when a power of two, else -1
  bool vector;            // a chunk of 4 may be loaded as one aligned word
  bool element_aligned;   // F32 / BF16 data aligned to its element size
  bool scales_aligned;    // F32 scales 4-byte aligned
  bool chunk_scale;       // block_cols % N == 0: the N columns of a chunk share one scale
};

template <WeightEncoding E>
constexpr bool kScaled = E == WeightEncoding::FP8_E4M3 || E == WeightEncoding::FP4_E2M1;

template <WeightEncoding E, ScaleEncoding S>
__device__ __forceinline__ RowView make_row(const WeightMatrix& w, int64_t row, bool vector) {
  RowView v{};
  const auto* bytes = static_cast<const uint8_t*>(w.data);
  const auto address = reinterpret_cast<uintptr_t>(w.data);
  v.vector = vector;
  if constexpr (E == WeightEncoding::F32) {
    v.data = bytes + row * w.cols * 4;
    v.element_aligned = address % 4 == 0;
  } else if constexpr (E == WeightEncoding::BF16) {
    v.data = bytes + row * w.cols * 2;
    v.element_aligned = address % 2 == 0;
  } else if constexpr (E == WeightEncoding::FP8_E4M3) {
    v.data = bytes + row * w.cols;
  } else {
    v.data = bytes + row * (w.cols / 2);
  }
  if constexpr (kScaled<E> && S != ScaleEncoding::None) {
    const int64_t scale_cols = (w.cols + w.block_cols - 1) / w.block_cols;
    const int64_t scale_row = E == WeightEncoding::FP8_E4M3 ? row / w.block_rows : row;
    const int64_t element_size = S == ScaleEncoding::F32 ? 4 : 1;
    v.scales = static_cast<const uint8_t*>(w.scales) + scale_row * scale_cols * element_size;
    v.scales_aligned = reinterpret_cast<uintptr_t>(w.scales) % 4 == 0;
    v.block_cols = static_cast<uint32_t>(w.block_cols < (int64_t{1} << 31) ? w.block_cols : (int64_t{1} << 31));
    v.block_shift = (w.block_cols & (w.block_cols - 1)) == 0 ? __ffsll(w.block_cols) - 1 : -1;
    v.chunk_scale = w.block_cols % kChunk<E> == 0;
  }
  return v;
}

template <ScaleEncoding S>
__device__ __forceinline__ float scale_of(const RowView& v, int64_t column) {
  // 32-bit division: a 64-bit one is a subroutine call.
  const int64_t group = v.block_shift >= 0 ? column >> v.block_shift
                                           : static_cast<int64_t>(static_cast<uint32_t>(column) / v.block_cols);
  if constexpr (S == ScaleEncoding::E8M0) {
    return e8m0_value(v.scales[group]);
  } else {
    const uint8_t* p = v.scales + group * 4;
    return v.scales_aligned ? *reinterpret_cast<const float*>(p) : __uint_as_float(load_u32_bytes(p));
  }
}

// The stored value of column c before its scale.
template <WeightEncoding E>
__device__ __forceinline__ float raw_element(const RowView& v, int64_t c) {
  if constexpr (E == WeightEncoding::F32) {
    const uint8_t* p = v.data + c * 4;
    return v.element_aligned ? *reinterpret_cast<const float*>(p) : __uint_as_float(load_u32_bytes(p));
  } else if constexpr (E == WeightEncoding::BF16) {
    const uint8_t* p = v.data + c * 2;
    return bf16_value(v.element_aligned ? uint32_t{*reinterpret_cast<const uint16_t*>(p)} : load_u16_bytes(p));
  } else if constexpr (E == WeightEncoding::FP8_E4M3) {
    return e4m3_value(v.data[c]);
  } else {
    const uint32_t byte = v.data[c / 2];
    return e2m1_value((c & 1) ? byte >> 4 : byte & 0xfu);
  }
}

// The decoded weight of column c: value * scale, as the CPU's decode_row computes it.
template <WeightEncoding E, ScaleEncoding S>
__device__ __forceinline__ float element(const RowView& v, int64_t c) {
  float value = raw_element<E>(v, c);
  if constexpr (kScaled<E> && S != ScaleEncoding::None) value = value * scale_of<S>(v, c);
  return value;
}

// The byte of column c of a row (c a multiple of the chunk).
template <WeightEncoding E>
__device__ __forceinline__ int64_t byte_of(int64_t c) {
  if constexpr (E == WeightEncoding::F32) return c * 4;
  else if constexpr (E == WeightEncoding::BF16) return c * 2;
  else if constexpr (E == WeightEncoding::FP8_E4M3) return c;
  else return c / 2;
}

// The decoded weights of columns c0 .. c0 + N - 1 (c0 a multiple of N, all inside the row): one
// 16-byte load when the row allows it.
template <WeightEncoding E, ScaleEncoding S>
__device__ __forceinline__ void chunk(const RowView& v, int64_t c0, float (&w)[kChunk<E>]) {
  constexpr int N = kChunk<E>;
  if (v.vector) {
    const uint4 q = *reinterpret_cast<const uint4*>(v.data + byte_of<E>(c0));
    const uint32_t words[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if constexpr (E == WeightEncoding::F32) {
        w[i] = __uint_as_float(words[i]);
      } else if constexpr (E == WeightEncoding::BF16) {
        w[2 * i] = bf16_value(words[i]);
        w[2 * i + 1] = bf16_value(words[i] >> 16);
      } else if constexpr (E == WeightEncoding::FP8_E4M3) {
#pragma unroll
        for (int j = 0; j < 4; ++j) w[4 * i + j] = e4m3_value((words[i] >> (8 * j)) & 0xffu);
      } else {
#pragma unroll
        for (int j = 0; j < 8; ++j) w[8 * i + j] = e2m1_value((words[i] >> (4 * j)) & 0xfu);
      }
    }
  } else {
#pragma unroll
    for (int j = 0; j < N; ++j) w[j] = raw_element<E>(v, c0 + j);
  }
  if constexpr (kScaled<E> && S != ScaleEncoding::None) {
    if (v.chunk_scale) {
      const float s = scale_of<S>(v, c0);
#pragma unroll
      for (int j = 0; j < N; ++j) w[j] = w[j] * s;
    } else {
#pragma unroll
      for (int j = 0; j < N; ++j) w[j] = w[j] * scale_of<S>(v, c0 + j);
    }
  }
}

// This lane's partial sums of one weight row against up to kTileTokens activation rows
// (xr[t] for t < count). The order is the one described at the top of the file.
// Columns [begin, cols) only, begin a multiple of the warp step (a split range; 0 otherwise).
template <WeightEncoding E, ScaleEncoding S>
__device__ __forceinline__ void dot_tile(const RowView& v, int64_t cols, const float* (&xr)[kTileTokens], int count,
                                         bool x_vector, float (&acc)[kTileTokens], int64_t begin = 0) {
  constexpr int N = kChunk<E>;
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
#pragma unroll
  for (int t = 0; t < kTileTokens; ++t) acc[t] = 0.0f;
  int64_t c0 = begin + int64_t{N} * lane;
  // Unrolled so that two chunks' loads are in flight at once; the order of the fmaf chain of each
  // accumulator is the same as without.
#pragma unroll 2
  for (; c0 + N <= cols; c0 += kWarpStride<E>) {
    float w[N];
    chunk<E, S>(v, c0, w);
#pragma unroll
    for (int t = 0; t < kTileTokens; ++t) {
      if (t < count) {
#pragma unroll
        for (int j = 0; j < N; j += 4) {
          float a[4];
          if (x_vector) {
            const float4 q = *reinterpret_cast<const float4*>(xr[t] + c0 + j);
            a[0] = q.x;
            a[1] = q.y;
            a[2] = q.z;
            a[3] = q.w;
          } else {
#pragma unroll
            for (int k = 0; k < 4; ++k) a[k] = xr[t][c0 + j + k];
          }
#pragma unroll
          for (int k = 0; k < 4; ++k) acc[t] = fmaf(a[k], w[j + k], acc[t]);
        }
      }
    }
  }
  if (c0 < cols) {  // the row's last, partial chunk (one lane at most)
    const int remaining = static_cast<int>(cols - c0);
    for (int j = 0; j < remaining; ++j) {
      const float w = element<E, S>(v, c0 + j);
#pragma unroll
      for (int t = 0; t < kTileTokens; ++t)
        if (t < count) acc[t] = fmaf(xr[t][c0 + j], w, acc[t]);
    }
  }
}

// Reduces the lanes' sums of one range (the butterfly) and adds token t's to the sum of the ranges
// before it that lane t holds (first: the first range), in range order as add_ranges_kernel
// adds them.
__device__ __forceinline__ void add_range(float (&acc)[kTileTokens], int count, bool first, float& lane_sum) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
#pragma unroll
  for (int t = 0; t < kTileTokens; ++t) {
    if (t < count) {  // warp-uniform
      const float range_sum = warp_sum(acc[t]);
      if (lane == t) lane_sum = first ? range_sum : lane_sum + range_sum;
    }
  }
}

// Lane t stores token t's sum at out[t * out_stride] (t < count).
__device__ __forceinline__ void store_tile(float lane_sum, int count, float* out, int64_t out_stride) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  if (lane < count) out[lane * out_stride] = lane_sum;
}

// The ranges [first, last) this block sums: its own where they run on blocks of their own
// (gridDim.z > 1: range blockIdx.z, into the workspace), else all of them.
struct BlockRanges {
  int64_t first, last;
};
__device__ __forceinline__ BlockRanges block_ranges(int64_t ranges) {
  if (gridDim.z > 1) return {static_cast<int64_t>(blockIdx.z), static_cast<int64_t>(blockIdx.z) + 1};
  return {0, ranges};
}

// The activation rows of the token tile starting at t0 (count live; the rest repeat the first, whose
// sums are never stored).
__device__ __forceinline__ void tile_rows(const float* x, int64_t t0, int count, int64_t cols,
                                          const float* (&xr)[kTileTokens]) {
#pragma unroll
  for (int t = 0; t < kTileTokens; ++t) xr[t] = x + (t0 + (t < count ? t : 0)) * cols;
}

// Every row's chunks are 16-byte aligned.
template <WeightEncoding E>
__device__ __forceinline__ bool vector_weights(const WeightMatrix& w) {
  return w.cols % kChunk<E> == 0 && reinterpret_cast<uintptr_t>(w.data) % 16 == 0;
}

// The weight's `ranges` column ranges of range_columns each (one: the whole row); with blocks of
// their own (gridDim.z > 1) range z's sums go to y + z * tokens * rows (the workspace).
template <WeightEncoding E, ScaleEncoding S>
__global__ void __launch_bounds__(kThreads)
    linear_kernel(const float* __restrict__ x, int64_t tokens, WeightMatrix w, float* __restrict__ y, bool x_vector,
                  int64_t range_columns, int64_t ranges) {
  await_previous_grid();
  const int warp = static_cast<int>(threadIdx.x) / kWarp;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + warp;
  if (row >= w.rows) return;  // the whole warp
  const BlockRanges mine = block_ranges(ranges);
  y += static_cast<int64_t>(blockIdx.z) * tokens * w.rows;
  const RowView v = make_row<E, S>(w, row, vector_weights<E>(w));
  const int64_t tiles = (tokens + kTileTokens - 1) / kTileTokens;
  for (int64_t tile = blockIdx.y; tile < tiles; tile += gridDim.y) {
    const int64_t t0 = tile * kTileTokens;
    const int count = static_cast<int>(tokens - t0 < kTileTokens ? tokens - t0 : kTileTokens);
    const float* xr[kTileTokens];
    tile_rows(x, t0, count, w.cols, xr);
    float sum = 0.0f;
#pragma unroll 1
    for (int64_t z = mine.first; z < mine.last; ++z) {
      const int64_t begin = z * range_columns;
      const int64_t end = begin + range_columns < w.cols ? begin + range_columns : w.cols;
      float acc[kTileTokens];
      dot_tile<E, S>(v, end, xr, count, x_vector, acc, begin);
      add_range(acc, count, z == mine.first, sum);
    }
    store_tile(sum, count, y + t0 * w.rows + row, w.rows);
  }
}

// Calls of many tokens on F32 weights (V4.1's mHC projections: 24 rows of 4 x 5120 columns, at
// every site of a prefill): a warp takes kRowsPerWarp rows for its token tile, so the tile's
// activations are loaded once for all of them where linear_kernel loads them once a row. Each
// (row, token) sum keeps linear_kernel's order (the lane's chunks, then the butterfly), so the
// bits are the same whichever kernel a call takes.
constexpr int kRowsPerWarp = 3;
constexpr int64_t kRowsKernelTokens = 64;  // fewer tokens: one row a warp, for more blocks

__global__ void __launch_bounds__(kThreads)
    linear_rows_kernel(const float* __restrict__ x, int64_t tokens, WeightMatrix w, float* __restrict__ y,
                       bool x_vector, int64_t range_columns, int64_t ranges) {
  constexpr WeightEncoding E = WeightEncoding::F32;
  constexpr ScaleEncoding S = ScaleEncoding::None;
  await_previous_grid();
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int warp = static_cast<int>(threadIdx.x) / kWarp;
  const int64_t first_row = (static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + warp) * kRowsPerWarp;
  if (first_row >= w.rows) return;  // the whole warp
  const BlockRanges mine = block_ranges(ranges);
  y += static_cast<int64_t>(blockIdx.z) * tokens * w.rows;
  RowView v[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r)
    v[r] = make_row<E, S>(w, first_row + r < w.rows ? first_row + r : first_row, vector_weights<E>(w));
  const int64_t tiles = (tokens + kTileTokens - 1) / kTileTokens;
  for (int64_t tile = blockIdx.y; tile < tiles; tile += gridDim.y) {
    const int64_t t0 = tile * kTileTokens;
    const int count = static_cast<int>(tokens - t0 < kTileTokens ? tokens - t0 : kTileTokens);
    const float* xr[kTileTokens];
    tile_rows(x, t0, count, w.cols, xr);
    float sum[kRowsPerWarp] = {};
#pragma unroll 1
    for (int64_t z = mine.first; z < mine.last; ++z) {
      const int64_t begin = z * range_columns;
      const int64_t end = begin + range_columns < w.cols ? begin + range_columns : w.cols;
      float acc[kRowsPerWarp][kTileTokens];
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r)
#pragma unroll
        for (int t = 0; t < kTileTokens; ++t) acc[r][t] = 0.0f;
      int64_t c0 = begin + int64_t{kChunk<E>} * lane;
#pragma unroll 1
      for (; c0 + kChunk<E> <= end; c0 += kWarpStride<E>) {
        float wv[kRowsPerWarp][kChunk<E>];
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) chunk<E, S>(v[r], c0, wv[r]);
#pragma unroll
        for (int t = 0; t < kTileTokens; ++t) {
          if (t < count) {
            float a[4];
            if (x_vector) {
              const float4 q = *reinterpret_cast<const float4*>(xr[t] + c0);
              a[0] = q.x;
              a[1] = q.y;
              a[2] = q.z;
              a[3] = q.w;
            } else {
#pragma unroll
              for (int k = 0; k < 4; ++k) a[k] = xr[t][c0 + k];
            }
#pragma unroll
            for (int r = 0; r < kRowsPerWarp; ++r)
#pragma unroll
              for (int k = 0; k < 4; ++k) acc[r][t] = fmaf(a[k], wv[r][k], acc[r][t]);
          }
        }
      }
      if (c0 < end) {  // the row's last, partial chunk (one lane at most)
        const int remaining = static_cast<int>(end - c0);
        for (int j = 0; j < remaining; ++j) {
#pragma unroll
          for (int r = 0; r < kRowsPerWarp; ++r) {
            const float wj = element<E, S>(v[r], c0 + j);
#pragma unroll
            for (int t = 0; t < kTileTokens; ++t)
              if (t < count) acc[r][t] = fmaf(xr[t][c0 + j], wj, acc[r][t]);
          }
        }
      }
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) add_range(acc[r], count, z == mine.first, sum[r]);
    }
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r)
      if (first_row + r < w.rows) store_tile(sum[r], count, y + t0 * w.rows + first_row + r, w.rows);
  }
}

// y[i] = sum over ranges z in order of partials[z * count + i].
__global__ void __launch_bounds__(kThreads)
    add_ranges_kernel(const float* __restrict__ partials, int64_t count, int64_t ranges, float* __restrict__ y) {
  await_previous_grid();
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float sum = partials[i];
    for (int64_t z = 1; z < ranges; ++z) sum += partials[z * count + i];
    y[i] = sum;
  }
}

// The gathered kernel reads each descriptor on the device, so it picks the decoder there.
__device__ void dot_any(const WeightMatrix& w, int64_t row, int64_t cols, const float* (&xr)[kTileTokens], int count,
                        bool x_vector, float (&acc)[kTileTokens]) {
#define DEEPINFER_DOT(E, S) \
  return dot_tile<E, S>(make_row<E, S>(w, row, vector_weights<E>(w)), cols, xr, count, x_vector, acc)
  switch (w.encoding) {
    case WeightEncoding::F32: DEEPINFER_DOT(WeightEncoding::F32, ScaleEncoding::None);
    case WeightEncoding::BF16: DEEPINFER_DOT(WeightEncoding::BF16, ScaleEncoding::None);
    case WeightEncoding::FP8_E4M3:
      switch (w.scale_encoding) {
        case ScaleEncoding::None: DEEPINFER_DOT(WeightEncoding::FP8_E4M3, ScaleEncoding::None);
        case ScaleEncoding::E8M0: DEEPINFER_DOT(WeightEncoding::FP8_E4M3, ScaleEncoding::E8M0);
        case ScaleEncoding::F32: DEEPINFER_DOT(WeightEncoding::FP8_E4M3, ScaleEncoding::F32);
      }
      break;
    case WeightEncoding::FP4_E2M1:
      switch (w.scale_encoding) {
        case ScaleEncoding::None: DEEPINFER_DOT(WeightEncoding::FP4_E2M1, ScaleEncoding::None);
        case ScaleEncoding::E8M0: DEEPINFER_DOT(WeightEncoding::FP4_E2M1, ScaleEncoding::E8M0);
        case ScaleEncoding::F32: DEEPINFER_DOT(WeightEncoding::FP4_E2M1, ScaleEncoding::F32);
      }
      break;
  }
#undef DEEPINFER_DOT
  // An encoding this build does not know: NaN, so the mistake shows.
#pragma unroll
  for (int t = 0; t < kTileTokens; ++t) acc[t] = quiet_nan();
}

__global__ void __launch_bounds__(kThreads)
    linear_gathered_kernel(const float* __restrict__ x, const int32_t* __restrict__ x_row, int64_t pairs,
                           const WeightMatrix* __restrict__ weights, const int32_t* __restrict__ weight_of,
                           int64_t rows, int64_t cols, float* __restrict__ y, bool x_vector) {
  await_previous_grid();
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int warp = static_cast<int>(threadIdx.x) / kWarp;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + warp;
  if (row >= rows) return;
  const int64_t tiles = (pairs + kTileTokens - 1) / kTileTokens;
  for (int64_t tile = blockIdx.y; tile < tiles; tile += gridDim.y) {
    const int64_t p0 = tile * kTileTokens;
    const int count = static_cast<int>(pairs - p0 < kTileTokens ? pairs - p0 : kTileTokens);
    // Runs of consecutive pairs on the same weight share one pass over its row.
    for (int i = 0; i < count;) {
      const int32_t which = weight_of[p0 + i];
      int run = 1;
      while (i + run < count && weight_of[p0 + i + run] == which) ++run;
      float* out = y + (p0 + i) * rows + row;
      if (which < 0) {
        if (lane < run) out[lane * rows] = 0.0f;
      } else {
        const WeightMatrix w = weights[which];
        const float* xr[kTileTokens];
#pragma unroll
        for (int t = 0; t < kTileTokens; ++t) xr[t] = x + static_cast<int64_t>(x_row[p0 + i + (t < run ? t : 0)]) * cols;
        float acc[kTileTokens];
        dot_any(w, row, cols, xr, run, x_vector, acc);
        float sum = 0.0f;
        add_range(acc, run, /*first=*/true, sum);
        store_tile(sum, run, out, rows);
      }
      i += run;
    }
  }
}

// The shared descriptor checks, and one of this kernel's own: columns index with 32-bit ints.
void check_weight(const WeightMatrix& w) {
  kernels::check_weight(w, "cuda::linear");
  if (w.cols >= (int64_t{1} << 31))
    fail("cuda::linear: ", encoding_name(w.encoding), " weight has ", w.cols, " columns, over 2^31");
}

dim3 grid_of(int64_t rows, int64_t tokens) {
  const int64_t row_blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  const int64_t tiles = (tokens + kTileTokens - 1) / kTileTokens;
  return dim3(static_cast<unsigned>(row_blocks), static_cast<unsigned>(std::min(tiles, kMaxGridY)), 1);
}

bool vector_activations(const float* x, int64_t cols) {
  return cols % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;  // float4 loads
}

// A weight's column ranges (1: the whole row), and the columns of each (a multiple of the warp
// step `stride`): by its shape alone, as a one-token call's blocks would fill the device.
struct Ranges {
  int64_t count = 1;
  int64_t columns = 0;
};

Ranges ranges_of(const WeightMatrix& w, int64_t stride) {
  const int64_t blocks = grid_of(w.rows, 1).x;
  const int64_t steps = (w.cols + stride - 1) / stride;
  Ranges ranges{1, steps * stride};
  if (blocks * 2 > kTargetBlocks) return ranges;
  const int64_t wanted = std::min((kTargetBlocks + blocks - 1) / blocks, kMaxSplits);
  const int64_t possible = std::max<int64_t>(1, steps / kMinRangeSteps);
  ranges.count = std::min(wanted, possible);
  if (ranges.count == 1) return ranges;
  ranges.columns = (steps + ranges.count - 1) / ranges.count * stride;
  ranges.count = (w.cols + ranges.columns - 1) / ranges.columns;  // no empty range
  return ranges;
}

template <WeightEncoding E, ScaleEncoding S>
void launch_linear(const float* x, int64_t tokens, const WeightMatrix& w, float* y, float* workspace,
                   cudaStream_t stream) {
  const Ranges ranges = ranges_of(w, kWarpStride<E>);
  dim3 grid = grid_of(w.rows, tokens);
  // Ranges on blocks of their own while the call's blocks are few (their partial sums then fit
  // kLinearSplitFloats), else each block walks its ranges: the same bits.
  const bool own_blocks = ranges.count > 1 && workspace != nullptr &&
                          int64_t{grid.x} * grid.y * 2 <= kTargetBlocks;
  grid.z = own_blocks ? static_cast<unsigned>(ranges.count) : 1;
  float* out = own_blocks ? workspace : y;
  if (E == WeightEncoding::F32 && tokens >= kRowsKernelTokens) {
    grid.x = static_cast<unsigned>((w.rows + kRowsPerBlock * kRowsPerWarp - 1) / (kRowsPerBlock * kRowsPerWarp));
    launch(linear_rows_kernel, grid, kThreads, 0, stream, x, tokens, w, out, vector_activations(x, w.cols),
           ranges.columns, ranges.count);
  } else {
    launch(linear_kernel<E, S>, grid, kThreads, 0, stream, x, tokens, w, out, vector_activations(x, w.cols),
           ranges.columns, ranges.count);
  }
  if (own_blocks) {
    const int64_t count = tokens * w.rows;
    launch(add_ranges_kernel, grid_for(count, kThreads), kThreads, 0, stream, workspace, count, ranges.count, y);
  }
}

template <WeightEncoding E>
void launch_scaled(const float* x, int64_t tokens, const WeightMatrix& w, float* y, float* workspace,
                   cudaStream_t stream) {
  switch (w.scale_encoding) {
    case ScaleEncoding::None: return launch_linear<E, ScaleEncoding::None>(x, tokens, w, y, workspace, stream);
    case ScaleEncoding::E8M0: return launch_linear<E, ScaleEncoding::E8M0>(x, tokens, w, y, workspace, stream);
    case ScaleEncoding::F32: return launch_linear<E, ScaleEncoding::F32>(x, tokens, w, y, workspace, stream);
  }
  fail("cuda::linear: unknown scale encoding ", static_cast<int>(w.scale_encoding));
}

}  // namespace

void linear(const float* x, int64_t tokens, const WeightMatrix& weight, float* y, Stream stream,
            const LinearWorkspace& workspace) {
  if (launches_skipped()) return;
  check_weight(weight);
  if (tokens < 0) fail("cuda::linear: negative token count ", tokens);
  if (tokens == 0 || weight.rows == 0) return;
  if (workspace.x_split && linear_mma_supports(weight)) {
    const int64_t words = linear_mma_split_words(tokens, weight), partials = linear_mma_partial_floats(tokens, weight);
    if (words > workspace.x_split_words || partials > workspace.partial_floats)
      fail("cuda::linear: the tensor-core workspace holds ", workspace.x_split_words, " split words and ",
           workspace.partial_floats, " partial sums; ", tokens, " tokens of a ", weight.rows, " x ", weight.cols,
           " weight need ", words, " and ", partials);
    return linear_mma(x, weight.cols, tokens, weight, y, weight.rows, workspace.x_split, workspace.partials, stream,
                      workspace.tile_counters);
  }
  const cudaStream_t s = native(stream);
  float* ws = workspace.split;
  switch (weight.encoding) {
    case WeightEncoding::F32: launch_linear<WeightEncoding::F32, ScaleEncoding::None>(x, tokens, weight, y, ws, s); break;
    case WeightEncoding::BF16: launch_linear<WeightEncoding::BF16, ScaleEncoding::None>(x, tokens, weight, y, ws, s); break;
    case WeightEncoding::FP8_E4M3: launch_scaled<WeightEncoding::FP8_E4M3>(x, tokens, weight, y, ws, s); break;
    case WeightEncoding::FP4_E2M1: launch_scaled<WeightEncoding::FP4_E2M1>(x, tokens, weight, y, ws, s); break;
    default: fail("cuda::linear: unknown weight encoding ", static_cast<int>(weight.encoding));
  }
  check_launch("cuda::linear");
}

void linear_gathered(const float* x, const int32_t* x_row, int64_t pairs, const WeightMatrix* weights,
                     const int32_t* weight_of, int64_t rows, int64_t cols, float* y, Stream stream) {
  if (launches_skipped()) return;
  if (pairs < 0 || rows < 0 || cols < 0)
    fail("cuda::linear_gathered: negative size (pairs ", pairs, ", rows ", rows, ", cols ", cols, ")");
  if (cols >= (int64_t{1} << 31)) fail("cuda::linear_gathered: ", cols, " columns, over 2^31");
  if (pairs == 0 || rows == 0) return;
  launch(linear_gathered_kernel, grid_of(rows, pairs), kThreads, 0, native(stream), x, x_row, pairs, weights, weight_of,
         rows, cols, y, vector_activations(x, cols));
  check_launch("cuda::linear_gathered");
}

}  // namespace deepinfer::kernels::cuda
