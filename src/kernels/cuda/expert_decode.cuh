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

constexpr uint32_t kE2m1Unit = 0x7E807E80u;  // 2^126, twice: a placed e2m1 code (below) times it is its value

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

// The bit order of an FP4 code word in expert tiles (kernels.h, WeightLayout::ExpertTiles).
// Row-major, nibbles n and n + 4 of a 32-bit word make one bf16x2 A word: sign to bit 15 (31),
// the three magnitude bits to bits 8..6 (24..22), where exponent 0 makes the code 1 (0.5) a BF16
// subnormal of the right value, so the word is e2m1 x 2^-126 (times the unit 2^126 it is the
// code's value). From row-major bits that placement takes 15 instructions a word (two shifts
// and two masks a pair, bar one shift). The expert kernels are bound by instruction issue, not
// bytes (docs/BENCHMARKS.md), so tile_expert_codes stores each word's bits permuted such that
// pair n is the word rotated right by magnitude_rotation(n) under the magnitude mask, or-ed with
// the word rotated by sign_rotation(n) under the sign mask: pairs 1 and 2 are one rotation and
// one mask, pair 3 one rotation and two masks, pair 0 two of each, 11 instructions a word. No
// four rotations of the 8-bit pattern tile a 32-bit word, and an exhaustive search over
// rotations of its magnitude and sign parts finds 11 the least of this form (a time-bounded one
// over funnel shifts of a word pair found nothing better). The decoded words are the same, so the
// bits of every result are.
__host__ __device__ constexpr int magnitude_rotation(int pair) {
  return pair == 0 ? 26 : pair == 1 ? 21 : pair == 2 ? 31 : 2;
}
__host__ __device__ constexpr int sign_rotation(int pair) { return pair == 0 ? 20 : pair == 1 ? 21 : pair == 2 ? 31 : 0; }
constexpr uint32_t kE2m1MagnitudeBits = 0x01C001C0u, kE2m1SignBits = 0x80008000u;

__device__ __forceinline__ uint32_t rotate_right(uint32_t word, int bits) {
  return bits == 0 ? word : __funnelshift_r(word, word, bits);
}

// Pair N of a tiled code word as a bf16x2 of value e2m1 x 2^-126.
template <int N>
__device__ __forceinline__ uint32_t e2m1_tiled_pair(uint32_t word) {
  constexpr int kMagnitude = magnitude_rotation(N), kSign = sign_rotation(N);
  if constexpr (kMagnitude == kSign) return rotate_right(word, kMagnitude) & (kE2m1MagnitudeBits | kE2m1SignBits);
  else return (rotate_right(word, kMagnitude) & kE2m1MagnitudeBits) | (rotate_right(word, kSign) & kE2m1SignBits);
}
// Bit b of nibble j of a row-major code word: its place in the tiled word (the inverse of the
// decode above: output bit p of pair j % 4 is source bit p + rotation, mod 32).
__host__ __device__ constexpr int expert_tile_bit(int nibble, int bit) {
  const int pair = nibble % 4, half = nibble / 4;
  const int placed = (bit == 3 ? 15 : 6 + bit) + 16 * half;
  return (placed + (bit == 3 ? sign_rotation(pair) : magnitude_rotation(pair))) % 32;
}

// MMA j = 2 i + half of a 128-column chunk: the lane's A words for rows g (`low`: word i of its
// 16 bytes of row g) and g + 8 (`high`), tiled code words, their scales as scale_pair made them.
template <bool Folded>
__device__ __forceinline__ void e2m1_a_words(uint32_t low, uint32_t high, uint32_t scale_low, uint32_t scale_high,
                                             int half, uint32_t& a0, uint32_t& a1, uint32_t& a2, uint32_t& a3) {
  if (half == 0) {
    a0 = scaled<Folded>(e2m1_tiled_pair<0>(low), scale_low);
    a1 = scaled<Folded>(e2m1_tiled_pair<0>(high), scale_high);
    a2 = scaled<Folded>(e2m1_tiled_pair<1>(low), scale_low);
    a3 = scaled<Folded>(e2m1_tiled_pair<1>(high), scale_high);
  } else {
    a0 = scaled<Folded>(e2m1_tiled_pair<2>(low), scale_low);
    a1 = scaled<Folded>(e2m1_tiled_pair<2>(high), scale_high);
    a2 = scaled<Folded>(e2m1_tiled_pair<3>(low), scale_low);
    a3 = scaled<Folded>(e2m1_tiled_pair<3>(high), scale_high);
  }
}

// A warp's 16-row tile of an expert matrix in expert tiles, as lane (g, q) reads it: rows g and
// g + 8, its 16 bytes of each 128-column chunk (segment q); a chunk of one row to the next is
// kTiledChunkBytes on.
constexpr int64_t kTiledChunkBytes = 16 * 64;
struct RowTile {
  const uint8_t* rows[2];    // rows g and g + 8 of the tile: chunk 0's bytes of this lane
  const uint8_t* scales[2];  // their first scale byte
};

// first_row: a multiple of 16.
__device__ __forceinline__ RowTile row_tile(const WeightMatrix& w, int64_t first_row) {
  const int lane = static_cast<int>(threadIdx.x) % detail::kWarp;
  const int g = lane / 4, q = lane % 4;
  const auto* data = static_cast<const uint8_t*>(w.data);
  const auto* scales = static_cast<const uint8_t*>(w.scales);
  const int64_t row_bytes = w.cols / 2, scale_columns = w.cols / kSegmentColumns;
  RowTile t;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t row = first_row + g + 8 * h;
    t.rows[h] = data + first_row * row_bytes + (g + 8 * h) * 64 + q * 16;
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
