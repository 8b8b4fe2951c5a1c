#pragma once
// What the tensor-core kernels share (expert_mma.cu, linear_mma.cu): the BF16 m16n8k16 MMA, the
// split of f32 activations into three BF16 planes in the operand order those kernels use, and
// the exact BF16 decoders of the checkpoint encodings.
//
// Operand order. A lane (g = lane / 4, q = lane % 4) covers 32 columns per 128-column chunk:
// columns 32 q .. 32 q + 31, which it holds as 16 bf16x2 words, word 4 i + n (i, n < 4) being
// columns 8 i + n and 8 i + n + 4. The MMA's k order is free as long as both operands share it,
// so the eight MMAs of a chunk take words (2 j, 2 j + 1) of every lane: one order for every
// encoding, chosen for FP4, whose nibbles n and n + 4 of a 32-bit word become that bf16x2 with
// a few shifts and masks (expert_decode.cuh: the bit order expert tiles store). Activations are
// stored in the same order ("split rows": per 32-column segment 16 words, three planes per row),
// so a lane's B operand is four 16-byte loads.
//
// Exactness. Every weight code times its power-of-two scale is exact in BF16 (e2m1, e4m3 and BF16
// itself). An f32 activation is not, so it is split into three BF16 terms, hi = bf16(x), mid =
// bf16(x - hi), lo = bf16(x - hi - mid) (each difference exact), which together keep x's 24
// significant bits (|error| <= 2^-24 |x|); the products are exact and accumulate in f32, so a
// result differs from the f32 SIMT sum by reordering only, as two f32 orders differ. (Two terms
// were tried first: 2^-16 is enough for the logits but flips near-tie routing decisions against
// the CPU.) The terms are three MMA columns of one token: columns 3 t .. 3 t + 2 are token t's
// hi, mid and lo, so an MMA's 8 columns take 2 tokens (columns 6 and 7 are zero), and a token's
// result is (hi + mid) + lo of its three columns, gathered across the lane quad (token_sums).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace deepinfer::kernels::cuda::mma {

constexpr int kChunkColumns = 128;   // 4 lanes x 32 columns
constexpr int kSegmentColumns = 32;  // one lane's columns of a chunk
constexpr int kSegmentWords = 16;    // bf16x2 words of a split segment

__device__ __forceinline__ uint32_t bf16_bits_rn(float x) {
  return static_cast<uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(x)));
}

constexpr int kPlanes = 3;       // hi, mid, lo
constexpr int kTokensPerMma = 2;  // 3 of the 8 columns each

// The three terms of x; a rest that is not finite (x infinite or NaN) gives zero terms, so
// infinities stay infinite.
__device__ __forceinline__ void split_value(float x, uint32_t (&term)[kPlanes]) {
  term[0] = bf16_bits_rn(x);
  float rest = x - __uint_as_float(term[0] << 16);
#pragma unroll
  for (int p = 1; p < kPlanes; ++p) {
    term[p] = isfinite(rest) ? bf16_bits_rn(rest) : 0u;
    rest = rest - __uint_as_float(term[p] << 16);
  }
}

// This lane's B column of an MMA over token slots (2 u, 2 u + 1): column g is slot g / 3's plane
// g % 3, none for g = 6, 7. Slot < 0: none.
__device__ __forceinline__ void column_of(int g, int& slot, int& plane) {
  slot = g < 6 ? g / 3 : -1;
  plane = g % 3;
}

// The two tokens' results of one MMA's D (d: this lane's four accumulators): lane q = 0 ends with
// slot 0's, lane q = 2 with slot 1's, rows g and g + 8 (value[0], value[1]); every lane must call
// it (the shuffles). Both sum (hi + mid) + lo, so a token's bits do not depend on its slot.
__device__ __forceinline__ void token_sums(const float (&d)[4], float (&value)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float next_first = __shfl_down_sync(0xffffffffu, d[2 * h], 1);  // column 2 (q = 1) to q = 0
    const float prev_second = __shfl_up_sync(0xffffffffu, d[2 * h + 1], 1);  // column 3 (q = 1) to q = 2
    const int q = static_cast<int>(threadIdx.x) % 4;
    value[h] = q == 0 ? (d[2 * h] + d[2 * h + 1]) + next_first : (prev_second + d[2 * h]) + d[2 * h + 1];
  }
}

// The u16 index, inside a split plane, of column c.
__device__ __forceinline__ int64_t split_half_index(int64_t c) {
  const int64_t segment = c / kSegmentColumns;
  const int within = static_cast<int>(c % kSegmentColumns);
  const int word = 4 * (within / 8) + (within % 8) % 4;
  return (segment * kSegmentWords + word) * 2 + (within % 8) / 4;
}

// The first column of split word w (of a plane): word 4 i + n of its segment holds it and the
// column 4 past it.
__device__ __forceinline__ int64_t split_word_column(int64_t w) {
  const int64_t segment = w / kSegmentWords;
  const int word = static_cast<int>(w % kSegmentWords);
  return segment * kSegmentColumns + 8 * (word / 4) + word % 4;
}

// 16 bytes the kernels read once: not kept in L1, where the activations they reuse live.
__device__ __forceinline__ uint4 load_streaming(const void* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

__device__ __forceinline__ uint32_t word_of(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

__device__ __forceinline__ void mma_bf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                         uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// acc += A B, the MMA's sum of its 16 exact products added to acc by an f32 add (round to
// nearest). The tensor cores add into their accumulator with their own alignment and
// truncation; started from zero they sum 16 products only, so a 5120-column row is 320
// correctly rounded adds of those, close to an f32 FMA chain's error (the CPU's order).
__device__ __forceinline__ void mma_bf16_add(float (&acc)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                             uint32_t b0, uint32_t b1) {
  float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  mma_bf16(d, a0, a1, a2, a3, b0, b1);
#pragma unroll
  for (int i = 0; i < 4; ++i) acc[i] += d[i];
}

// a * b + (-0): exact for the powers of two it is used with; -0 keeps a zero's sign.
__device__ __forceinline__ uint32_t bf16x2_mul(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(0x80008000u));
  return d;
}

// The E8M0 scale 2^(s - 127) as a bf16x2 (0: the subnormal 2^-127; 255: NaN, as e8m0_value).
__device__ __forceinline__ uint32_t e8m0_pair(uint32_t s) {
  const uint32_t bits = s == 255u ? 0x7FC0u : s == 0u ? 0x0040u : (s << 7);
  return bits | (bits << 16);
}

// The E8M0 scale times 2^126 (expert_decode.cuh's kE2m1Unit), 2^(s - 1), as a bf16x2: for s <= 128,
// where it is a normal BF16, one multiply by it decodes an e2m1 pair to its scaled value, the same bits as
// multiplying by the unit and then by the scale (both exact).
__device__ __forceinline__ uint32_t e2m1_unit_times_scale_pair(uint32_t s) {
  const uint32_t bits = (s + 126u) << 7;
  return bits | (bits << 16);
}
// The largest E8M0 byte for which e2m1_unit_times_scale_pair is exact.
constexpr int kMaxFoldedE2m1Scale = 128;

// Bytes n of `low` and of `high` (e4m3 codes) as a bf16x2 of value e4m3 x 2^-120: the four
// exponent bits become the low four of BF16's, so exponent 0 is a BF16 subnormal of the right
// value. NaN codes (S.1111.111) are not told apart here (e4m3_has_nan). Times 2^120
// (kE4m3Unit) it is the code's value.
template <int N>
__device__ __forceinline__ uint32_t e4m3_pair(uint32_t low, uint32_t high) {
  // byte n of low to bits 7..0, byte n of high to bits 23..16
  const uint32_t t = __byte_perm(low, high, N | (N << 4) | ((4 + N) << 8) | ((4 + N) << 12));
  return ((t << 4) & 0x07F007F0u) | ((t << 8) & 0x80008000u);
}
constexpr uint32_t kE4m3Unit = 0x7B807B80u;  // 2^120, twice

// The E8M0 scale times 2^120 (kE4m3Unit), 2^(s - 7), as a bf16x2: a normal BF16 for s <= 134,
// where one multiply by it decodes an e4m3 pair to its scaled value with the bits of the two
// exact multiplies by the unit and by the scale.
__device__ __forceinline__ uint32_t e4m3_unit_times_scale_pair(uint32_t s) {
  const uint32_t bits = (s + 120u) << 7;
  return bits | (bits << 16);
}
constexpr int kMaxFoldedE4m3Scale = 134;

// Any byte of the word is an e4m3 NaN code.
__device__ __forceinline__ bool e4m3_has_nan(uint32_t word) {
  return (((word & 0x7F7F7F7Fu) + 0x01010101u) & 0x80808080u) != 0;
}

// Half n % 2 of words (4 i + n / 2) and (4 i + 2 + n / 2): columns 8 i + n and 8 i + n + 4 of BF16
// weights, as one bf16x2.
template <int N>
__device__ __forceinline__ uint32_t bf16_pair(uint32_t low, uint32_t high) {
  return __byte_perm(low, high, N % 2 == 0 ? 0x5410 : 0x7632);
}

}  // namespace deepinfer::kernels::cuda::mma
