#pragma once
// The dense tensor-core linears' weight decode (linear_mma.cu, sm90/linear_wgmma.cu): a warp's
// weight rows in m16 tiles, each lane's 32 columns of a 128-column chunk decoded exactly into the
// A-operand words of mma_common.cuh's order. One decode for both kernels, so a row's operands, and
// with them its sums' bits, are the same whichever kernel a call's token count picks.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/linear_mma_plan.h"
#include "kernels/cuda/mma_common.cuh"
#include "kernels/kernels.h"

namespace deepinfer::kernels::cuda::mma {

// Bytes of one row per chunk.
template <WeightEncoding E>
constexpr int kChunkBytes = E == WeightEncoding::BF16 ? 256 : 128;

// A warp's rows: kTiles m16 tiles, rows g and g + 8 of each.
template <WeightEncoding E, int kTiles>
struct RowPointers {
  const uint8_t* data[kTiles][2];  // [tile][row]: the row's first byte
  uint32_t scale[kTiles][2];       // the current chunk's scale (FP8) as a bf16x2
};

// The lane's operand words of one half chunk (words 4 h .. 4 h + 3 of its 16: i = 2 h, 2 h + 1)
// of rows g and g + 8 of every tile, decoded.
template <int kTiles>
struct HalfA {
  uint32_t words[kTiles][2][2][4];  // [tile][row g / g + 8][i - 2 h][n]
};

// The weight group holding `row` of a call (dense::Groups; the whole matrix when not grouped): its
// index, its codes and scales, and its first row among the call's.
struct GroupWeights {
  int64_t index, first_row;
  const void* data;
  const uint8_t* scales;
};

__device__ __forceinline__ GroupWeights group_weights_of(const WeightMatrix& w, const dense::Groups& grouping,
                                                         int64_t row) {
  const int64_t index = row / grouping.group_rows;
  const WeightMatrix& m = grouping.group_weights ? grouping.group_weights[index] : w;
  return {index, index * grouping.group_rows, m.data, static_cast<const uint8_t*>(m.scales)};
}

// 16-byte loads of one row's half chunk (the lane's 32 columns, half h): FP8 one, BF16 two.
template <WeightEncoding E>
constexpr int kHalfLoads = E == WeightEncoding::BF16 ? 2 : 1;

// The scale byte of the chunk's FP8 block for the lane's columns of `row`.
template <WeightEncoding E>
__device__ __forceinline__ uint32_t chunk_scale_byte(const uint8_t* scales, const WeightMatrix& w, int64_t chunk,
                                                     int64_t row) {
  if constexpr (E == WeightEncoding::FP8_E4M3) {
    const int q = static_cast<int>(threadIdx.x) % 4;
    const int64_t scale_columns = (w.cols + w.block_cols - 1) / w.block_cols;
    return scales[(row / w.block_rows) * scale_columns + (chunk * kChunkColumns + q * kSegmentColumns) / w.block_cols];
  } else {
    return 0;
  }
}

// The scale byte as the decode multiplies by it (Folded: 2^120 times the scale, the code unit folded in).
template <bool Folded>
__device__ __forceinline__ uint32_t decode_scale(uint32_t byte) {
  return Folded ? e4m3_unit_times_scale_pair(byte) : e8m0_pair(byte);
}

// The chunk's FP8 scales of the warp's rows (row_of(m, r): the row of tile m's row g + 8 r, counted
// in the weight's own rows).
template <WeightEncoding E, int kTiles, bool Folded, typename RowOf>
__device__ __forceinline__ void load_chunk_scales(RowPointers<E, kTiles>& rows, const uint8_t* scales,
                                                  const WeightMatrix& w, int64_t chunk, RowOf row_of) {
  if constexpr (E == WeightEncoding::FP8_E4M3) {
#pragma unroll
    for (int m = 0; m < kTiles; ++m)
#pragma unroll
      for (int r = 0; r < 2; ++r) rows.scale[m][r] = decode_scale<Folded>(chunk_scale_byte<E>(scales, w, chunk, row_of(m, r)));
  }
}

// The lane's bytes of one row's half chunk.
template <WeightEncoding E>
__device__ __forceinline__ void load_row_half(const uint8_t* row, int64_t chunk, int h, uint4 (&v)[kHalfLoads<E>]) {
  const int q = static_cast<int>(threadIdx.x) % 4;
  const uint8_t* p = row + chunk * kChunkBytes<E> + q * (kChunkBytes<E> / 4);
#pragma unroll
  for (int ii = 0; ii < kHalfLoads<E>; ++ii)
    v[ii] = load_streaming(p + (kHalfLoads<E> * h + ii) * 16);
}

// Those bytes decoded: words[i - 2 h][n]. NanCodes: FP8 codes may hold e4m3 NaNs, which decode to
// NaN (else the decode skips that check: WeightMatrix::no_nan_codes, set at upload). Folded: every
// scale byte of the call's weights is at most kMaxFoldedE4m3Scale (WeightMatrix::max_e8m0) and
// `scale` holds 2^120 times the scale, so one exact multiply decodes a pair (else two: by the
// unit, then by the scale; the same bits).
template <WeightEncoding E, bool NanCodes, bool Folded>
__device__ __forceinline__ void decode_row_half(const uint4 (&v)[kHalfLoads<E>], uint32_t scale,
                                                uint32_t (&words)[2][4]) {
  if constexpr (E == WeightEncoding::BF16) {
    // Columns 8 i .. 8 i + 7 are words 4 i .. 4 i + 3: 16 bytes per i.
#pragma unroll
    for (int ii = 0; ii < 2; ++ii) {
      words[ii][0] = bf16_pair<0>(v[ii].x, v[ii].z);
      words[ii][1] = bf16_pair<1>(v[ii].x, v[ii].z);
      words[ii][2] = bf16_pair<2>(v[ii].y, v[ii].w);
      words[ii][3] = bf16_pair<3>(v[ii].y, v[ii].w);
    }
  } else {
    // Columns 8 i .. 8 i + 7 are words 2 i, 2 i + 1 (bytes): the half's 16 bytes.
#pragma unroll
    for (int ii = 0; ii < 2; ++ii) {
      const uint32_t low = ii == 0 ? v[0].x : v[0].z, high = ii == 0 ? v[0].y : v[0].w;
      uint32_t pairs[4] = {e4m3_pair<0>(low, high), e4m3_pair<1>(low, high), e4m3_pair<2>(low, high),
                           e4m3_pair<3>(low, high)};
      if (NanCodes && (e4m3_has_nan(low) || e4m3_has_nan(high))) {  // not in any released checkpoint
#pragma unroll
        for (int n = 0; n < 4; ++n) {
          if (((low >> (8 * n)) & 0x7Fu) == 0x7Fu) pairs[n] = (pairs[n] & 0xFFFF0000u) | 0x7FC0u;
          if (((high >> (8 * n)) & 0x7Fu) == 0x7Fu) pairs[n] = (pairs[n] & 0x0000FFFFu) | 0x7FC00000u;
        }
      }
#pragma unroll
      for (int n = 0; n < 4; ++n)
        words[ii][n] = Folded ? bf16x2_mul(pairs[n], scale) : bf16x2_mul(bf16x2_mul(pairs[n], kE4m3Unit), scale);
    }
  }
}

// A lane's bytes of one chunk for every row of the warp, and the rows' scale bytes (FP8), held
// until their decode: linear_mma's small calls load their first chunk so before they wait for the
// previous kernel.
template <WeightEncoding E, int kTiles>
struct ChunkBytes {
  uint4 v[kTiles][2][2][kHalfLoads<E>];  // [tile][row g / g + 8][half]
  uint32_t scale_byte[kTiles][2];
};

template <WeightEncoding E, int kTiles, typename RowOf>
__device__ __forceinline__ void load_chunk_scale_bytes(const uint8_t* scales, const WeightMatrix& w, int64_t chunk,
                                                       RowOf row_of, ChunkBytes<E, kTiles>& bytes) {
#pragma unroll
  for (int m = 0; m < kTiles; ++m)
#pragma unroll
    for (int r = 0; r < 2; ++r) bytes.scale_byte[m][r] = chunk_scale_byte<E>(scales, w, chunk, row_of(m, r));
}

template <WeightEncoding E, int kTiles>
__device__ __forceinline__ void load_chunk_half(const RowPointers<E, kTiles>& rows, int64_t chunk, int h,
                                                ChunkBytes<E, kTiles>& bytes) {
#pragma unroll
  for (int m = 0; m < kTiles; ++m)
#pragma unroll
    for (int r = 0; r < 2; ++r) load_row_half<E>(rows.data[m][r], chunk, h, bytes.v[m][r][h]);
}

// Half h of a loaded chunk, decoded as decode_half does (scale: the rows' decode_scale of its bytes).
template <WeightEncoding E, bool NanCodes, bool Folded, int kTiles>
__device__ __forceinline__ void decode_loaded_half(const ChunkBytes<E, kTiles>& bytes, const uint32_t (&scale)[kTiles][2],
                                                   int h, HalfA<kTiles>& a) {
#pragma unroll
  for (int m = 0; m < kTiles; ++m)
#pragma unroll
    for (int r = 0; r < 2; ++r) decode_row_half<E, NanCodes, Folded>(bytes.v[m][r][h], scale[m][r], a.words[m][r]);
}

// Half h of the chunk for every row of the warp, loaded and decoded.
template <WeightEncoding E, bool NanCodes, bool Folded, int kTiles>
__device__ __forceinline__ void decode_half(const RowPointers<E, kTiles>& rows, int64_t chunk, int h,
                                            HalfA<kTiles>& a) {
#pragma unroll
  for (int m = 0; m < kTiles; ++m)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      uint4 v[kHalfLoads<E>];
      load_row_half<E>(rows.data[m][r], chunk, h, v);
      decode_row_half<E, NanCodes, Folded>(v, rows.scale[m][r], a.words[m][r]);
    }
}

}  // namespace deepinfer::kernels::cuda::mma
