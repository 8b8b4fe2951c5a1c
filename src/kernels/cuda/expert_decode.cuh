#pragma once
// What both routed-expert kernels (expert_mma.cu on mma.sync, sm90/expert_wgmma.cu on wgmma)
// share so that a pair's result has the same bits whichever ran: the FP4 weight word's decode
// into A-operand words and the clamped SwiGLU between the two matrices.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/mma_common.cuh"
#include "kernels/kernels.h"

namespace deepinfer::kernels::cuda::mma {

// The decoded pair times 2^126 times the E8M0 scale. Folded (every scale of the call's matrices at
// most kMaxFoldedE2m1Scale, known at upload): one multiply by 2^(s - 1), the scale operand holding
// that factor; else two exact steps, by the unit and then by the scale (2^(s - 1) would overflow
// BF16 for s > 128). The same bits either way; the fold takes one of the inner loop's ~6
// instructions a weight word.
template <bool Folded>
__device__ __forceinline__ uint32_t scaled(uint32_t pair, uint32_t scale) {
  if constexpr (Folded) return bf16x2_mul(pair, scale);
  else return bf16x2_mul(bf16x2_mul(pair, kE2m1Unit), scale);
}

template <bool Folded>
__device__ __forceinline__ uint32_t scale_pair(uint32_t s) {
  if constexpr (Folded) return e2m1_unit_times_scale_pair(s);
  else return e8m0_pair(s);
}

// MMA j = 2 i + half of a 128-column chunk: the lane's A words for rows g (`low`: word i of its
// 16 bytes of row g) and g + 8 (`high`), their scales as scale_pair made them.
template <bool Folded>
__device__ __forceinline__ void e2m1_a_words(uint32_t low, uint32_t high, uint32_t scale_low, uint32_t scale_high,
                                             int half, uint32_t& a0, uint32_t& a1, uint32_t& a2, uint32_t& a3) {
  if (half == 0) {
    a0 = scaled<Folded>(e2m1_pair<0>(low), scale_low);
    a1 = scaled<Folded>(e2m1_pair<0>(high), scale_high);
    a2 = scaled<Folded>(e2m1_pair<1>(low), scale_low);
    a3 = scaled<Folded>(e2m1_pair<1>(high), scale_high);
  } else {
    a0 = scaled<Folded>(e2m1_pair<2>(low), scale_low);
    a1 = scaled<Folded>(e2m1_pair<2>(high), scale_high);
    a2 = scaled<Folded>(e2m1_pair<3>(low), scale_low);
    a3 = scaled<Folded>(e2m1_pair<3>(high), scale_high);
  }
}

// A warp's 16-row tile of an expert matrix, as lane (g, q) reads it: rows g and g + 8, its 16
// bytes of each 128-column chunk (segment q), in the row-major or the ExpertTiles layout.
struct RowTile {
  const uint8_t* rows[2];    // rows g and g + 8 of the tile: chunk 0's bytes of this lane
  const uint8_t* scales[2];  // their first scale byte
  int64_t chunk_bytes;       // from one chunk of a row to the next: 64 row-major, 1024 in expert tiles
};

// first_row: a multiple of 16.
__device__ __forceinline__ RowTile row_tile(const WeightMatrix& w, int64_t first_row) {
  const int lane = static_cast<int>(threadIdx.x) % detail::kWarp;
  const int g = lane / 4, q = lane % 4;
  const auto* data = static_cast<const uint8_t*>(w.data);
  const auto* scales = static_cast<const uint8_t*>(w.scales);
  const int64_t row_bytes = w.cols / 2, scale_columns = w.cols / kSegmentColumns;
  const bool tiled = w.layout == WeightLayout::ExpertTiles;
  RowTile t;
  t.chunk_bytes = tiled ? int64_t{16} * 64 : 64;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t row = first_row + g + 8 * h;
    t.rows[h] = (tiled ? data + first_row * row_bytes + (g + 8 * h) * 64 : data + row * row_bytes) + q * 16;
    t.scales[h] = scales + row * scale_columns;
  }
  return t;
}

// The clamped SwiGLU of one gate / up pair (moe.cu's swiglu_kernel computes the same).
__device__ __forceinline__ float swiglu_value(float g, float u, float limit) {
  if (limit > 0) {
    g = fminf(g, limit);                                // std::fmin
    u = u < -limit ? -limit : (limit < u ? limit : u);  // std::clamp (NaN passes through)
  }
  return detail::silu(g) * u;
}

}  // namespace deepinfer::kernels::cuda::mma
