// AVX-512 (F, BW, VL, DQ) linear kernel, picked at run time on CPUs that have it.
//
// Why its own path: at decode (1 to 3 tokens) a linear is a stream of weight bytes, and the AVX2
// path's decode into an L1 panel plus a reload per FMA cannot keep up with DRAM on one core
// (docs/BENCHMARKS.md: FP8 at 15%, FP4 at 7% of the read bandwidth). Here a few tokens take the
// STREAMING kernel: each 16-column chunk of a weight row is decoded into a register and used at
// once by every token, the row's accumulators stay in registers for the whole row (16 rows at a
// time at 1 token, 8 for FP8 and long BF16 rows, summed together by one transposed tree), BF16
// rows are read as whole cache lines, the next row group is prefetched into L2 and its scales
// into L1, and nothing is stored. Four or more tokens take the PANEL kernel: a 16-row x
// 1024-column panel (512 for FP8) is decoded once into cache and swept by 4-row x 6-token
// micro-kernels (24 accumulators), which is FMA-bound.
//
// Why f32 activations: the BF16 dot-product and VNNI instructions would round the activations to
// BF16 or int8 first, which changes results by more than the reduction order; this path keeps the
// same numerics as the AVX2 and portable ones (exactly decoded weights times f32 activations).
//
// Batch invariance: every y[t, r] is reduced in one order that depends only on `cols` and the
// encoding: one 16-lane accumulator, lane j of chunk k holding column 16k + j (FP4, and BF16 rows
// of whole 32-column pairs: the column order of decode_chunk, below) summed in increasing k by FMA
// (the last partial chunk zero-padded on both sides), then a fixed horizontal sum. The streaming and the panel kernel perform exactly
// these operations (the panel stores and reloads its accumulators exactly between panels), so
// which kernel, which row group, which thread and how many tokens are in the call never change a
// bit. Results differ from the AVX2 path's (8 lanes) by rounding only.
//
// Decoding gives exactly the scalar decoders' value times the scale (core/float_formats.h):
//   BF16  zero-extend to 32 bits and shift into the high half; rows of whole 32-column pairs take
//         one 64-byte load per pair, shifted left by 16 for the even columns and masked to its
//         high halves for the odd ones (FP4's column order, no shuffle);
//   FP8   sign-extended and shifted so the 7 magnitude bits are an f32's exponent and mantissa:
//         that f32 is w * 2^-120 exactly (subnormals included), so one multiply by 2^120 * scale
//         gives round(w * scale); NaN codes are masked to NaN. Blocks where 2^120 * scale
//         overflows (scale >= 2^8), and blocks that do not hold whole 16-column chunks, take the
//         scalar decoders, which give the same values;
//   FP4   whole bytes index a 16-entry f32 table already multiplied by the group scale (vpermps
//         reads the low nibble; shifted by 4, the high one), so a 32-column pair of chunks costs
//         one load, one shift and two permutes; E8M0 scales are converted 16 blocks at a time.
//
// Compilation: the binary targets x86-64-v3; only the functions below the target pragma use
// AVX-512, and every header is included above it, so no inline or template function that other
// files share is ever compiled for AVX-512 (the linker could otherwise keep that copy for all).
#include "kernels/cpu/linear_cpu.h"

#ifdef DEEPINFER_AVX512_KERNELS

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "core/float_formats.h"
#include "kernels/cpu/weight_scales.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c"))), \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")
// GCC 12's own _mm512_undefined_* (inside avx512fintrin.h) trip these.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace deepinfer::kernels::cpu {
namespace {

constexpr int kLanes = 16;
constexpr int64_t kPanelRows = 16;
// Columns a panel decodes at once: a multiply_panel call loads and stores its 24 accumulators
// once per panel, so wider panels pay that less often. 4096 x 4096 at 64 tokens, one thread
// (ms, 256 / 512 / 1024 columns): BF16 33.5 / 29.6 / 26.2, FP8 128x128 33.5 / 29.5 / 32.6,
// FP4 31.4 / 28.6 / 26.0 (docs/BENCHMARKS.md): FP8's panel keeps 512.
constexpr int64_t kMaxPanelCols = 1024;
constexpr int kPanelTokens = 6;            // micro-kernel: 4 rows x 6 tokens = 24 accumulators
constexpr int64_t kMaxStreamTokens = 3;    // fewer tokens than the panel kernel needs
constexpr int64_t kRowGroup = 8;           // rows the pool splits by

// ---- where a weight row's bytes and scales are -------------------------------------------------

enum class Decode { F32, BF16, BF16Pairs, FP8, FP4, Scalar };

template <Decode D>
constexpr int64_t panel_columns() {
  return D == Decode::FP8 ? 512 : kMaxPanelCols;
}

struct Matrix {
  const WeightMatrix* w;
  const uint8_t* bytes;
  int64_t row_bytes;
  int64_t full_chunks;      // 16-column chunks fully inside a row
  int tail;                 // columns in the last partial chunk (0: none)
  __mmask16 tail_mask;
  bool scaled;              // FP8 / FP4: a scale per block_cols columns
  int64_t chunks_per_block;  // block_cols / 16 when block_cols is a multiple of 16
};

Matrix describe(const WeightMatrix& w) {
  Matrix m{};
  m.w = &w;
  m.bytes = static_cast<const uint8_t*>(w.data);
  switch (w.encoding) {
    case WeightEncoding::F32: m.row_bytes = w.cols * 4; break;
    case WeightEncoding::BF16: m.row_bytes = w.cols * 2; break;
    case WeightEncoding::FP8_E4M3: m.row_bytes = w.cols; break;
    case WeightEncoding::FP4_E2M1: m.row_bytes = w.cols / 2; break;
  }
  m.full_chunks = w.cols / kLanes;
  m.tail = static_cast<int>(w.cols % kLanes);
  m.tail_mask = static_cast<__mmask16>((1u << m.tail) - 1u);
  m.scaled = w.encoding == WeightEncoding::FP8_E4M3 || w.encoding == WeightEncoding::FP4_E2M1;
  m.chunks_per_block = w.block_cols % kLanes == 0 ? w.block_cols / kLanes : 0;
  return m;
}

// The decoder a matrix takes: the vector one when every chunk lies in one scale block.
Decode decode_of(const Matrix& m) {
  switch (m.w->encoding) {
    case WeightEncoding::F32: return Decode::F32;
    case WeightEncoding::BF16: return m.w->cols % 32 == 0 ? Decode::BF16Pairs : Decode::BF16;
    case WeightEncoding::FP8_E4M3: return m.chunks_per_block > 0 ? Decode::FP8 : Decode::Scalar;
    case WeightEncoding::FP4_E2M1:  // whole 32-column pairs of chunks in whole scale groups
      return m.w->cols % 32 == 0 && m.w->block_cols % 32 == 0 ? Decode::FP4 : Decode::Scalar;
  }
  return Decode::Scalar;
}

// The next row group's bytes, asked for while this group computes, into L2 rather than L1: the
// group is 16 separate row streams, and L1-bound prefetches for all of them held the core's L1
// miss slots that the demand loads of this group needed (BF16 4096 x 4096 at one token on a Zen 5
// guest: 8.7-10.1 GB/s with _MM_HINT_T0, 11.7-13.8 with T1, 10.3-12.2 with no prefetch; FP8 and
// FP4, bound by their decode, the same with either hint; docs/BENCHMARKS.md).
__attribute__((always_inline)) inline void prefetch_ahead(const char* address) { _mm_prefetch(address, _MM_HINT_T1); }

// BF16 columns [32p, 32p + 32) from one 64-byte load, in FP4's column order: dword j holds column
// 32p + 2j in its low half and 32p + 2j + 1 in its high half, so chunk 2p (even columns) is the load
// shifted left by 16 and chunk 2p + 1 (odd columns) the load with its low halves cleared: no
// shuffle.
inline __m512 bf16_pair_even(__m512i pair) { return _mm512_castsi512_ps(_mm512_slli_epi32(pair, 16)); }
inline __m512 bf16_pair_odd(__m512i pair) {
  return _mm512_castsi512_ps(_mm512_and_si512(pair, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
}

// ---- decoding one 16-column chunk --------------------------------------------------------------

// Per row and scale block: what the vector decoders multiply by. `fallback` marks an FP8 block
// whose 2^120 * scale is not exact; its chunks take the scalar decoder.
struct BlockScale {
  __m512 factor;  // FP8: 2^120 * scale in every lane; FP4: the e2m1 table times the scale
  bool fallback;
};

inline __m512 e2m1_table() {
  return _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f,
                        -6.0f);
}

template <Decode D>
inline BlockScale block_scale(const Matrix& m, int64_t row, int64_t block) {
  const float scale = scale_at(*m.w, scale_row_start(*m.w, row) + block);
  if constexpr (D == Decode::FP8) {
    const float factor = 0x1p120f * scale;
    // Exact unless it overflowed (NaN scales stay NaN either way).
    const bool exact = std::isnan(scale) || std::isinf(scale) || !std::isinf(factor);
    return {_mm512_set1_ps(factor), !exact};
  } else if constexpr (D == Decode::FP4) {
    return {_mm512_mul_ps(e2m1_table(), _mm512_set1_ps(scale)), false};
  } else {
    return {_mm512_setzero_ps(), false};
  }
}

// The scales of blocks [first_block, first_block + count) of `row` (count <= 16) as block_scale
// gives them: FP8 2^120 * scale, FP4 the scale itself. Returns whether an FP8 block among them
// needs the scalar decoder (2^120 * scale overflowed).
// Inlined: a call per row and group spills the accumulators around it (FP4 at one token, 4096 x
// 4096: 17.1-17.5 GB/s called, 18.4-18.7 inlined; docs/BENCHMARKS.md).
template <Decode D>
__attribute__((always_inline)) inline bool block_scales(const Matrix& m, int64_t row, int64_t first_block, int count,
                                                        float* out) {
  const WeightMatrix& w = *m.w;
  const int64_t start = scale_row_start(w, row) + first_block;
  const auto lanes = static_cast<__mmask16>((1u << count) - 1u);
  __m512 scale;
  if (w.scale_encoding == ScaleEncoding::E8M0) {
    // 2^(b - 127) as f32 bits b << 23; b = 0 is the subnormal 2^-127 and b = 255 is NaN. A whole
    // 16 by a plain load: with the masked byte load FP4's one-token decode ran 15 GB/s where it
    // now runs 18 (docs/BENCHMARKS.md; the profile put a fifth of its time on that load).
    const uint8_t* bytes = static_cast<const uint8_t*>(w.scales) + start;
    const __m512i b = _mm512_cvtepu8_epi32(count == kLanes ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes))
                                                           : _mm_maskz_loadu_epi8(lanes, bytes));
    __m512i bits = _mm512_slli_epi32(b, 23);
    bits = _mm512_mask_mov_epi32(bits, _mm512_cmpeq_epi32_mask(b, _mm512_setzero_si512()), _mm512_set1_epi32(1 << 22));
    bits = _mm512_mask_mov_epi32(bits, _mm512_cmpeq_epi32_mask(b, _mm512_set1_epi32(255)),
                                 _mm512_castps_si512(_mm512_set1_ps(std::numeric_limits<float>::quiet_NaN())));
    scale = _mm512_castsi512_ps(bits);
  } else if (w.scale_encoding == ScaleEncoding::F32) {
    scale = _mm512_maskz_loadu_ps(lanes, static_cast<const float*>(w.scales) + start);
  } else {
    scale = _mm512_set1_ps(1.0f);
  }
  if constexpr (D == Decode::FP8) {
    const __m512 factor = _mm512_mul_ps(scale, _mm512_set1_ps(0x1p120f));
    _mm512_store_ps(out, factor);
    // fpclass 0x18: +-inf; 0x99: +-inf or NaN.
    const __mmask16 overflowed = _mm512_fpclass_ps_mask(factor, 0x18) & ~_mm512_fpclass_ps_mask(scale, 0x99);
    return (overflowed & lanes) != 0;
  } else {
    _mm512_store_ps(out, scale);
    return false;
  }
}

// The scalar decoders (the portable path's values) for columns [col, col + count) of `row`.
__m512 decode_scalar(const Matrix& m, int64_t row, int64_t col, int count) {
  alignas(64) float values[kLanes] = {};
  const WeightMatrix& w = *m.w;
  const uint8_t* row_bytes = m.bytes + row * m.row_bytes;
  const int64_t first_scale = m.scaled ? scale_row_start(w, row) : 0;
  for (int j = 0; j < count; ++j) {
    const int64_t c = col + j;
    switch (w.encoding) {
      case WeightEncoding::F32: std::memcpy(&values[j], row_bytes + c * 4, 4); break;
      case WeightEncoding::BF16: {
        uint16_t bits;
        std::memcpy(&bits, row_bytes + c * 2, 2);
        values[j] = bf16_to_float(bits);
        break;
      }
      case WeightEncoding::FP8_E4M3:
        values[j] = e4m3fn_to_float(row_bytes[c]) * scale_at(w, first_scale + c / w.block_cols);
        break;
      case WeightEncoding::FP4_E2M1: {
        const uint8_t byte = row_bytes[c / 2];
        values[j] = e2m1_to_float(c % 2 == 0 ? byte & 0x0F : byte >> 4) * scale_at(w, first_scale + c / w.block_cols);
        break;
      }
    }
  }
  return _mm512_load_ps(values);
}

// Chunk `k` of a row whose bytes start at `row_bytes`. TAIL: the row's last, partial chunk, whose
// valid columns `mask` has (lanes past it are 0, and no byte past the row is read).
template <Decode D, bool TAIL>
__attribute__((always_inline)) inline __m512 decode_chunk(const uint8_t* row_bytes, int64_t k, __mmask16 mask,
                                                           __m512 factor) {
  if constexpr (D == Decode::F32) {
    return TAIL ? _mm512_maskz_loadu_ps(mask, row_bytes + k * 64) : _mm512_loadu_ps(row_bytes + k * 64);
  } else if constexpr (D == Decode::BF16) {
    const __m256i bits = TAIL ? _mm256_maskz_loadu_epi16(mask, row_bytes + k * 32)
                              : _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row_bytes + k * 32));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
  } else if constexpr (D == Decode::BF16Pairs) {
    static_assert(!TAIL);
    (void)mask;
    (void)factor;
    const __m512i pair = _mm512_loadu_si512(row_bytes + (k / 2) * 64);
    return k % 2 == 0 ? bf16_pair_even(pair) : bf16_pair_odd(pair);
  } else if constexpr (D == Decode::FP8) {
    const __m128i bytes = TAIL ? _mm_maskz_loadu_epi8(mask, row_bytes + k * 16)
                               : _mm_loadu_si128(reinterpret_cast<const __m128i*>(row_bytes + k * 16));
    // Sign-extended and shifted left by 20: the 7 magnitude bits land in the f32's exponent and
    // mantissa (bits 26..20) and the sign in bits 31..27, of which the mask keeps bit 31. That
    // f32 is w * 2^-120 exactly (e4m3 subnormals become f32 subnormals), so one multiply by
    // 2^120 * scale gives round(w * scale). S.1111.111 (NaN) lanes keep the NaN instead.
    const __m512i bits = _mm512_and_si512(_mm512_slli_epi32(_mm512_cvtepi8_epi32(bytes), 20),
                                          _mm512_set1_epi32(static_cast<int>(0x87F00000u)));
    const __mmask16 finite = _mm_cmpneq_epi8_mask(_mm_or_si128(bytes, _mm_set1_epi8(static_cast<char>(0x80))),
                                                  _mm_set1_epi8(static_cast<char>(0xFF)));
    return _mm512_mask_mul_ps(_mm512_set1_ps(std::numeric_limits<float>::quiet_NaN()), finite,
                              _mm512_castsi512_ps(bits), factor);
  } else {
    static_assert(D == Decode::FP4 && !TAIL);
    // Chunks 2p and 2p + 1 share the 16 bytes of columns [32p, 32p + 32): one byte per lane,
    // whose low nibble (the even column) vpermps reads as the index; shifted by 4, the odd one.
    // So lane j of chunk 2p holds column 32p + 2j and of chunk 2p + 1 column 32p + 2j + 1: the
    // activations are permuted the same way (permute_fp4_activations).
    (void)mask;
    __m512i index = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row_bytes + (k / 2) * 16)));
    if (k % 2 == 1) index = _mm512_srli_epi32(index, 4);
    return _mm512_permutexvar_ps(index, factor);
  }
}

// Any chunk through the vector decoder or, for blocks marked `fallback`, the scalar one.
template <Decode D>
inline __m512 decode_any_chunk(const Matrix& m, int64_t row, int64_t k, const BlockScale& scale) {
  const bool tail = k >= m.full_chunks;
  if (D == Decode::Scalar || scale.fallback)
    return decode_scalar(m, row, k * kLanes, tail ? m.tail : kLanes);
  if constexpr (D != Decode::Scalar) {
    const uint8_t* row_bytes = m.bytes + row * m.row_bytes;
    if constexpr (D == Decode::FP4 || D == Decode::BF16Pairs)  // whole pairs of chunks (decode_of)
      return decode_chunk<D, false>(row_bytes, k, 0xFFFF, scale.factor);
    else
      return tail ? decode_chunk<D, true>(row_bytes, k, m.tail_mask, scale.factor)
                  : decode_chunk<D, false>(row_bytes, k, 0xFFFF, scale.factor);
  }
  return _mm512_setzero_ps();
}

// Lane sums in a fixed tree: (j, j+8), then the AVX2 path's (j, j+4), (j, j+2), (0, 1).
inline float horizontal_sum(__m512 v) {
  const __m256 eight = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  __m128 sum = _mm_add_ps(_mm256_castps256_ps128(eight), _mm256_extractf128_ps(eight, 1));
  sum = _mm_add_ps(sum, _mm_movehl_ps(sum, sum));
  sum = _mm_add_ss(sum, _mm_movehdup_ps(sum));
  return _mm_cvtss_f32(sum);
}

// ---- streaming kernel: ROWS rows x TOKENS tokens, accumulators in registers --------------------

// horizontal_sum of 16 accumulators at once, as one vector (lane i: a[i]'s sum), by the same tree:
// each level adds the same pairs of lanes, only several accumulators' pairs per instruction.
inline __m512 horizontal_sums(const __m512 (&a)[16]) {
  __m512 l1[8], l2[4], l3[2];
  for (int m = 0; m < 8; ++m)  // quarters [a2m lanes j + j+8 (8 lanes), a2m+1 (8 lanes)]
    l1[m] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * m], a[2 * m + 1], 0x44), _mm512_shuffle_f32x4(a[2 * m], a[2 * m + 1], 0xEE));
  for (int n = 0; n < 4; ++n)  // quarter k: a[4n + k]'s lanes j + j+4 (4 lanes)
    l2[n] = _mm512_add_ps(_mm512_shuffle_f32x4(l1[2 * n], l1[2 * n + 1], 0x88), _mm512_shuffle_f32x4(l1[2 * n], l1[2 * n + 1], 0xDD));
  for (int p = 0; p < 2; ++p)  // quarter k: a[8p + k]'s lanes (0+2, 1+3), then a[8p + 4 + k]'s
    l3[p] = _mm512_add_ps(_mm512_shuffle_ps(l2[2 * p], l2[2 * p + 1], 0x44), _mm512_shuffle_ps(l2[2 * p], l2[2 * p + 1], 0xEE));
  // quarter k: a[k], a[4 + k], a[8 + k], a[12 + k]
  const __m512 sums = _mm512_add_ps(_mm512_shuffle_ps(l3[0], l3[1], 0x88), _mm512_shuffle_ps(l3[0], l3[1], 0xDD));
  return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), sums);
}

// y[t * y_stride + row0 + i] = the sum of acc[i][t].
template <int ROWS, int TOKENS>
__attribute__((always_inline)) inline void zero_accumulators(__m512 (&acc)[ROWS][TOKENS]) {
  for (int i = 0; i < ROWS; ++i)
    for (int t = 0; t < TOKENS; ++t) acc[i][t] = _mm512_setzero_ps();
}

// Eight rows go through the 16-row tree with eight zero accumulators: on a narrow matrix (the
// embedded model's rows are 64 columns) a row's horizontal sum costs as much as its products.
template <int ROWS, int TOKENS>
inline void store_sums(const __m512 (&acc)[ROWS][TOKENS], float* y, int64_t y_stride, int64_t row0) {
  if constexpr ((ROWS == 16 || ROWS == 8) && TOKENS == 1) {
    __m512 rows[16];
    for (int i = 0; i < ROWS; ++i) rows[i] = acc[i][0];
    for (int i = ROWS; i < 16; ++i) rows[i] = _mm512_setzero_ps();
    _mm512_mask_storeu_ps(y + row0, static_cast<__mmask16>((1u << ROWS) - 1u), horizontal_sums(rows));
  } else {
    for (int i = 0; i < ROWS; ++i)
      for (int t = 0; t < TOKENS; ++t) y[t * y_stride + row0 + i] = horizontal_sum(acc[i][t]);
  }
}

// Chunks [k, end) of ROWS consecutive rows (row i's bytes at base + i * stride), all full chunks
// or (TAIL) the last partial one, into the accumulators.
template <Decode D, int ROWS, int TOKENS, bool TAIL>
__attribute__((always_inline)) inline void stream_chunks(const uint8_t* base, int64_t stride, int64_t k, int64_t end,
                                                         __mmask16 mask, const float* factors, int64_t factor_stride,
                                                         const float* x, int64_t x_stride, __m512 (&acc)[ROWS][TOKENS]) {
  // The rows are contiguous and the next group follows them: while this group's chunks are read,
  // ask for as many bytes of the next group, so it is in cache when its pass starts (each row of
  // a group lies in its own pages, where the hardware prefetcher would start late).
  constexpr int64_t kChunkBytes = D == Decode::F32 ? 64 : D == Decode::BF16 ? 32 : D == Decode::FP8 ? 16 : 8;
  const char* next_group = reinterpret_cast<const char*>(base + ROWS * stride);
  for (; k < end; ++k) {
    if constexpr (!TAIL)
      for (int64_t offset = 0; offset < ROWS * kChunkBytes; offset += 64)
        prefetch_ahead(next_group + k * ROWS * kChunkBytes + offset);
    __m512 xs[TOKENS];
    for (int t = 0; t < TOKENS; ++t)
      xs[t] = TAIL ? _mm512_maskz_loadu_ps(mask, x + t * x_stride + k * kLanes) : _mm512_loadu_ps(x + t * x_stride + k * kLanes);
    for (int i = 0; i < ROWS; ++i) {
      // FP8: row i's factor, broadcast from memory at its use (a register per row would not fit
      // beside 16 rows of accumulators).
      __m512 factor = _mm512_setzero_ps();
      if constexpr (D == Decode::FP8) factor = _mm512_set1_ps(factors[i * factor_stride]);
      const __m512 w = decode_chunk<D, TAIL>(base + i * stride, k, mask, factor);
      for (int t = 0; t < TOKENS; ++t) acc[i][t] = _mm512_fmadd_ps(xs[t], w, acc[i][t]);
    }
  }
}

// The scales of rows [row0 + rows, row0 + 2 * rows), asked for while this group computes: they
// are a stream of their own (FP4: a row's scales every cols / 32 bytes), and each group would
// otherwise stall on their first use, every 16 blocks, one cache miss per row.
inline void prefetch_scales_of_next_group(const Matrix& m, int64_t row0, int rows) {
  const WeightMatrix& w = *m.w;
  const int64_t scale_bytes = w.scale_encoding == ScaleEncoding::F32 ? 4 : 1;
  const int64_t first = scale_row_start(w, std::min(row0 + rows, w.rows - 1)) * scale_bytes;
  const int64_t end = scale_row_start(w, std::min(row0 + 2 * rows, w.rows) - 1) * scale_bytes + scale_columns(w) * scale_bytes;
  const char* scales = static_cast<const char*>(w.scales);
  for (int64_t offset = first; offset < end; offset += 64) _mm_prefetch(scales + offset, _MM_HINT_T0);
}

// The activations of chunk pair p (its even and its odd columns: the pair decoders' order) for
// every token.
template <int TOKENS>
__attribute__((always_inline)) inline void load_pair_activations(const float* x, int64_t x_stride, int64_t p,
                                                                 __m512 (&even)[TOKENS], __m512 (&odd)[TOKENS]) {
  for (int t = 0; t < TOKENS; ++t) {
    even[t] = _mm512_loadu_ps(x + t * x_stride + p * 32);
    odd[t] = _mm512_loadu_ps(x + t * x_stride + p * 32 + 16);
  }
}

// One row's decoded pair into its accumulators: the even chunk, then the odd one (chunk order).
template <int TOKENS>
__attribute__((always_inline)) inline void accumulate_pair(const __m512 (&even)[TOKENS], const __m512 (&odd)[TOKENS],
                                                           __m512 w_even, __m512 w_odd, __m512 (&acc)[TOKENS]) {
  for (int t = 0; t < TOKENS; ++t) acc[t] = _mm512_fmadd_ps(even[t], w_even, acc[t]);
  for (int t = 0; t < TOKENS; ++t) acc[t] = _mm512_fmadd_ps(odd[t], w_odd, acc[t]);
}

// FP4 pairs [first_pair, end) of ROWS rows, one group of scale blocks (scales[i][j]: row i's
// block first_block + j), into the accumulators: the group's scale times the e2m1 table computed
// right where it is used (a table per row kept across the pair loop would not fit the registers
// beside the accumulators). A function of its own: written inline in stream_rows_fp4, the same
// loop compiled to a chain of row-pointer adds and ran 16 GB/s where this runs 18
// (docs/BENCHMARKS.md).
template <int ROWS, int TOKENS>
__attribute__((always_inline)) inline void stream_pairs_fp4(const Matrix& m, const uint8_t* base, int64_t first_pair,
                                                            int64_t end, const float (&scales)[ROWS][kLanes],
                                                            const float* x, int64_t x_stride,
                                                            __m512 (&acc)[ROWS][TOKENS]) {
  const char* group_after_next = reinterpret_cast<const char*>(base + 2 * ROWS * m.row_bytes);
  const int64_t pairs_per_block = m.chunks_per_block / 2;
  for (int64_t p = first_pair; p < end; ++p) {
    // Real checkpoints' groups are 32 columns, one pair: no division.
    const int j = static_cast<int>(pairs_per_block == 1 ? p - first_pair : (p - first_pair) / pairs_per_block);
    // The group after the next, its lines in the order its pass will read them: every fourth
    // pair, the line of each row that pass needs at this pair (a row reads 16 bytes a pair). Asked
    // for front to back, the next group's last rows arrived just before they were needed (FP4
    // 4096 x 4096 at one token, one thread: 17.5-18.2 GB/s); in this order one group ahead ran
    // 57-61% of the read, two groups ahead 59-65% (docs/BENCHMARKS.md).
    if (p % 4 == 0)
      for (int i = 0; i < ROWS; ++i) prefetch_ahead(group_after_next + i * m.row_bytes + p * 16);
    __m512 even[TOKENS], odd[TOKENS];
    load_pair_activations<TOKENS>(x, x_stride, p, even, odd);
    for (int i = 0; i < ROWS; ++i) {
      const __m512 table = _mm512_mul_ps(e2m1_table(), _mm512_set1_ps(scales[i][j]));
      const __m512i bytes =
          _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(base + i * m.row_bytes + p * 16)));
      accumulate_pair<TOKENS>(even, odd, _mm512_permutexvar_ps(bytes, table),
                              _mm512_permutexvar_ps(_mm512_srli_epi32(bytes, 4), table), acc[i]);
    }
  }
}

// FP4 rows: a pair of chunks per load (decode_chunk), scale blocks 16 at a time.
template <int ROWS, int TOKENS>
void stream_rows_fp4(const Matrix& m, int64_t row0, const float* x, int64_t x_stride, float* y, int64_t y_stride) {
  const uint8_t* base = m.bytes + row0 * m.row_bytes;
  __m512 acc[ROWS][TOKENS];
  zero_accumulators(acc);
  const int64_t pairs = m.full_chunks / 2;  // FP4 rows hold whole pairs (decode_of)
  const int64_t pairs_per_block = m.chunks_per_block / 2;
  const int64_t blocks = pairs / pairs_per_block;
  alignas(64) float scales[ROWS][kLanes];
  prefetch_scales_of_next_group(m, row0, ROWS);
  for (int64_t first_block = 0; first_block < blocks; first_block += kLanes) {
    const int count = static_cast<int>(std::min<int64_t>(kLanes, blocks - first_block));
    for (int i = 0; i < ROWS; ++i) block_scales<Decode::FP4>(m, row0 + i, first_block, count, scales[i]);
    stream_pairs_fp4<ROWS, TOKENS>(m, base, first_block * pairs_per_block, (first_block + count) * pairs_per_block,
                                   scales, x, x_stride, acc);
  }
  store_sums<ROWS, TOKENS>(acc, y, y_stride, row0);
}

constexpr int64_t kShortRowPairs = 8;

// ---- rows that do not start on a 64-byte line --------------------------------------------------
//
// A 64-byte load from an address that is not a multiple of 64 spans two cache lines, and streamed
// from DRAM such loads ran at 15-19 GB/s where line-aligned ones ran at 26-33 (BF16 129280 x 256
// at one token, one thread; docs/BENCHMARKS.md). Safetensors puts each tensor where the one before
// it ended (the synthetic V4's LM head starts 36 bytes into a line), so BF16 rows are read as whole
// lines, and each unaligned 64 bytes is rebuilt from two neighbouring lines by one two-source
// permute: the same bytes, so the same bits. A row's first and last line also hold bytes that are
// not the row's; a load of a line holding any byte of the row cannot fault (lines never straddle
// pages), and it is written in assembly because AddressSanitizer cannot know that.
enum class LineJoin {
  None,    // rows start on a line, or at an odd address (plain unaligned loads)
  Dwords,  // a multiple of 4 bytes into a line: vpermt2d
  Words,   // 2 mod 4 bytes into a line: vpermt2w
};

LineJoin line_join_of(const void* data) {
  const auto offset = reinterpret_cast<uintptr_t>(data) % 64;
  if (offset == 0 || offset % 2 != 0) return LineJoin::None;
  return offset % 4 == 0 ? LineJoin::Dwords : LineJoin::Words;
}

__attribute__((always_inline)) inline __m512i load_line(const uint8_t* line) {
  __m512i value;
  asm("vmovdqa64 %1, %0" : "=v"(value) : "m"(*reinterpret_cast<const __m512i*>(line)));
  return value;
}

// The permute indices that take the 64 bytes starting `offset` bytes into the first line.
template <LineJoin J>
__m512i line_join_index(uintptr_t offset) {
  if constexpr (J == LineJoin::Dwords) {
    return _mm512_add_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                            _mm512_set1_epi32(static_cast<int>(offset / 4)));
  } else {
    alignas(64) static constexpr uint16_t kWords[32] = {0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10,
                                                        11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21,
                                                        22, 23, 24, 25, 26, 27, 28, 29, 30, 31};
    return _mm512_add_epi16(_mm512_load_si512(kWords), _mm512_set1_epi16(static_cast<short>(offset / 2)));
  }
}

template <LineJoin J>
__attribute__((always_inline)) inline __m512i join_lines(__m512i first, __m512i second, __m512i index) {
  if constexpr (J == LineJoin::Dwords)
    return _mm512_permutex2var_epi32(first, index, second);
  else
    return _mm512_permutex2var_epi16(first, index, second);
}

// BF16 rows in FP4's column order: a pair of chunks per 64 bytes (decode_chunk), read as whole
// lines (J, above), the next row group prefetched as stream_chunks does.
template <int ROWS, int TOKENS, LineJoin J>
void stream_rows_bf16_pairs(const Matrix& m, int64_t row0, const float* x, int64_t x_stride, float* y,
                            int64_t y_stride) {
  const uint8_t* base = m.bytes + row0 * m.row_bytes;
  const char* next_group = reinterpret_cast<const char*>(base + ROWS * m.row_bytes);
  // Rows are whole lines long (cols % 32 == 0), so every row starts as far into a line as the first.
  const uintptr_t offset = reinterpret_cast<uintptr_t>(base) % 64;
  const uint8_t* lines = base - offset;
  __m512i index = _mm512_setzero_si512();
  if constexpr (J != LineJoin::None) index = line_join_index<J>(offset);
  __m512 acc[ROWS][TOKENS];
  zero_accumulators(acc);
  const int64_t pairs = m.full_chunks / 2;
  if constexpr (TOKENS == 1) {
    if (pairs <= kShortRowPairs) {
      // Short rows (a narrow model's LM head: 8 pairs, 512 bytes): one row after the other, so the
      // group is read as one sequential stream, not ROWS interleaved ones (17.9-19.8 -> 20.5-21.3
      // GB/s at one group ahead); each row's FMAs keep their order, so the sums are the same bits.
      __m512 even[kShortRowPairs], odd[kShortRowPairs];
      for (int64_t p = 0; p < pairs; ++p) {
        even[p] = _mm512_loadu_ps(x + p * 32);
        odd[p] = _mm512_loadu_ps(x + p * 32 + 16);
      }
      // The group is one run of lines: line i * pairs + p + 1 ends row i's pair p.
      __m512i line = _mm512_setzero_si512();
      if constexpr (J != LineJoin::None) line = load_line(lines);
      for (int i = 0; i < ROWS; ++i) {
        // The group after the next: one group ahead (8 KiB here) reads 21-24 GB/s against the
        // streaming read's 28-31, two ahead 24-26 (docs/BENCHMARKS.md).
        for (int64_t offset_in_row = 0; offset_in_row < m.row_bytes; offset_in_row += 64)
          prefetch_ahead(next_group + (ROWS + i) * m.row_bytes + offset_in_row);
        for (int64_t p = 0; p < pairs; ++p) {
          __m512i pair;
          if constexpr (J == LineJoin::None) {
            pair = _mm512_loadu_si512(base + i * m.row_bytes + p * 64);
          } else {
            const __m512i next = load_line(lines + (i * pairs + p + 1) * 64);
            pair = join_lines<J>(line, next, index);
            line = next;
          }
          acc[i][0] = _mm512_fmadd_ps(even[p], bf16_pair_even(pair), acc[i][0]);
          acc[i][0] = _mm512_fmadd_ps(odd[p], bf16_pair_odd(pair), acc[i][0]);
        }
      }
      store_sums<ROWS, TOKENS>(acc, y, y_stride, row0);
      return;
    }
  }
  __m512i line[ROWS];  // J: each row's last line read
  if constexpr (J != LineJoin::None)
    for (int i = 0; i < ROWS; ++i) line[i] = load_line(lines + i * m.row_bytes);
  for (int64_t p = 0; p < pairs; ++p) {
    for (int64_t offset_in_group = 0; offset_in_group < ROWS * 64; offset_in_group += 64)
      prefetch_ahead(next_group + p * ROWS * 64 + offset_in_group);
    __m512 even[TOKENS], odd[TOKENS];
    load_pair_activations<TOKENS>(x, x_stride, p, even, odd);
    for (int i = 0; i < ROWS; ++i) {
      __m512i pair;
      if constexpr (J == LineJoin::None) {
        pair = _mm512_loadu_si512(base + i * m.row_bytes + p * 64);
      } else {
        const __m512i next = load_line(lines + i * m.row_bytes + (p + 1) * 64);
        pair = join_lines<J>(line[i], next, index);
        line[i] = next;
      }
      accumulate_pair<TOKENS>(even, odd, bf16_pair_even(pair), bf16_pair_odd(pair), acc[i]);
    }
  }
  store_sums<ROWS, TOKENS>(acc, y, y_stride, row0);
}

template <Decode D, int ROWS, int TOKENS>
void stream_rows_chunked(const Matrix& m, int64_t row0, const float* x, int64_t x_stride, float* y, int64_t y_stride) {
  constexpr bool kScaled = D == Decode::FP8;
  const uint8_t* base = m.bytes + row0 * m.row_bytes;
  __m512 acc[ROWS][TOKENS];
  zero_accumulators(acc);
  const int64_t chunks = m.full_chunks + (m.tail ? 1 : 0);
  if constexpr (!kScaled) {
    stream_chunks<D, ROWS, TOKENS, false>(base, m.row_bytes, 0, m.full_chunks, 0xFFFF, nullptr, 0, x, x_stride, acc);
    if (m.tail)
      stream_chunks<D, ROWS, TOKENS, true>(base, m.row_bytes, m.full_chunks, chunks, m.tail_mask, nullptr, 0, x, x_stride,
                                           acc);
  } else {
    // Scales 16 blocks at a time per row (block_scales), each block's factor from them by one
    // broadcast: per-block scalar work would cost as much as FP4's whole decode.
    const int64_t per_block = m.chunks_per_block;
    const int64_t blocks = (chunks + per_block - 1) / per_block;
    alignas(64) float scales[ROWS][kLanes];
    for (int64_t first_block = 0; first_block < blocks; first_block += kLanes) {
      const int count = static_cast<int>(std::min<int64_t>(kLanes, blocks - first_block));
      bool fallback = false;
      // Rows in one tile row (FP8's 128 x 128 tiles: every group but a straddling one) share
      // their scales: converted once, read with stride 0.
      const bool shared = row0 / m.w->block_rows == (row0 + ROWS - 1) / m.w->block_rows;
      if (first_block == 0 && !shared) prefetch_scales_of_next_group(m, row0, ROWS);
      const int64_t factor_stride = shared ? 0 : kLanes;
      for (int i = 0; i < (shared ? 1 : ROWS); ++i) fallback |= block_scales<D>(m, row0 + i, first_block, count, scales[i]);
      for (int j = 0; j < count; ++j) {
        int64_t k = (first_block + j) * per_block;
        const int64_t end = std::min(chunks, k + per_block);
        if (fallback) {  // FP8 blocks where 2^120 * scale overflows: the scalar decoder, same values
          for (; k < end; ++k) {
            const __mmask16 mask = k < m.full_chunks ? __mmask16(0xFFFF) : m.tail_mask;
            for (int i = 0; i < ROWS; ++i) {
              const __m512 w = decode_scalar(m, row0 + i, k * kLanes, __builtin_popcount(mask));
              for (int t = 0; t < TOKENS; ++t)
                acc[i][t] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask, x + t * x_stride + k * kLanes), w, acc[i][t]);
            }
          }
          continue;
        }
        const int64_t full_end = std::min(end, m.full_chunks);
        stream_chunks<D, ROWS, TOKENS, false>(base, m.row_bytes, k, full_end, 0xFFFF, &scales[0][j], factor_stride, x,
                                              x_stride, acc);
        if (end > full_end)
          stream_chunks<D, ROWS, TOKENS, true>(base, m.row_bytes, full_end, end, m.tail_mask, &scales[0][j], factor_stride,
                                               x, x_stride, acc);
      }
    }
  }
  store_sums<ROWS, TOKENS>(acc, y, y_stride, row0);
}

template <Decode D, int ROWS, int TOKENS>
void stream_rows(const Matrix& m, int64_t row0, const float* x, int64_t x_stride, float* y, int64_t y_stride) {
  if constexpr (D == Decode::FP4)
    stream_rows_fp4<ROWS, TOKENS>(m, row0, x, x_stride, y, y_stride);
  else if constexpr (D == Decode::BF16Pairs) {
    switch (line_join_of(m.bytes)) {
      case LineJoin::None: return stream_rows_bf16_pairs<ROWS, TOKENS, LineJoin::None>(m, row0, x, x_stride, y, y_stride);
      case LineJoin::Dwords:
        return stream_rows_bf16_pairs<ROWS, TOKENS, LineJoin::Dwords>(m, row0, x, x_stride, y, y_stride);
      case LineJoin::Words: return stream_rows_bf16_pairs<ROWS, TOKENS, LineJoin::Words>(m, row0, x, x_stride, y, y_stride);
    }
  } else
    stream_rows_chunked<D, ROWS, TOKENS>(m, row0, x, x_stride, y, y_stride);
}

// ---- FP8 with E8M0 scales: the scale moved onto the activations -------------------------------
//
// Every row of a group lies in one tile row, so a column block's scale is one power of two for the
// whole group. Multiplied into the activations once per tile row instead of into every weight, it
// gives the very same products: this decode's w * 2^-120 times x * (2^120 * s) is exactly w * s * x,
// which is also what the FMA on round(w * s) = w * s (exact: s is a power of two) forms; so the
// bits equal stream_rows_chunked's, and a chunk costs a sign-extending load, a shift, a mask and an
// FMA where the multiply-by-scale decode also spends a multiply and the NaN select (docs/
// BENCHMARKS.md). Two things this decode does not handle are looked for and sent to that decode:
// a tile row where some x * 2^120 * s overflows, and
// NaN codes (S.1111.111), which this decode turns into +-480 * 2^-120: the group keeps the largest
// 7-bit magnitude it read (one max per 64 bytes), and one that saw 0x7F is computed again.

// x * 2^120 * s for the tile row of the current group, kept while groups stay in that tile row.
class Fp8ScaledActivations {
 public:
  Fp8ScaledActivations(const Matrix& m, const float* x, int tokens) : m_(m), x_(x), tokens_(tokens) {}

  // The scaled activations (tokens rows of cols) for rows [row0, row0 + rows), or null when the
  // group straddles tile rows or its tile row's products are not all exact.
  const float* for_rows(int64_t row0, int rows) {
    const int64_t tile_row = row0 / m_.w->block_rows;
    if (tile_row != (row0 + rows - 1) / m_.w->block_rows) return nullptr;
    if (tile_row != tile_row_) {
      tile_row_ = tile_row;
      exact_ = scale(tile_row);
    }
    return exact_ ? values().data() : nullptr;
  }

 private:
  static std::vector<float>& values() {
    thread_local std::vector<float> storage;  // grows to the largest call; no per-call allocation
    return storage;
  }

  bool scale(int64_t tile_row) {
    const WeightMatrix& w = *m_.w;
    const int64_t cols = w.cols;
    std::vector<float>& out = values();
    if (out.size() < static_cast<std::size_t>(tokens_ * cols)) out.resize(static_cast<std::size_t>(tokens_ * cols));
    const uint8_t* scale_bytes = static_cast<const uint8_t*>(w.scales) + scale_row_start(w, tile_row * w.block_rows);
    __mmask16 inexact = 0;
    for (int64_t k = 0; k < m_.full_chunks; ++k) {
      const uint8_t byte = scale_bytes[k * kLanes / w.block_cols];
      // 2^120 * 2^(byte - 127) = 2^(byte - 7): a normal f32 up to byte 134; NaN for byte 255.
      if (byte > 134 && byte != 255) return false;
      const __m512 factor = _mm512_set1_ps(byte == 255 ? std::numeric_limits<float>::quiet_NaN()
                                                       : std::bit_cast<float>(static_cast<uint32_t>(byte + 120) << 23));
      for (int t = 0; t < tokens_; ++t) {
        const __m512 x = _mm512_loadu_ps(x_ + t * cols + k * kLanes);
        const __m512 scaled = _mm512_mul_ps(x, factor);
        _mm512_storeu_ps(out.data() + t * cols + k * kLanes, scaled);
        // fpclass 0x18: +-inf. A power-of-two multiple is exact unless it overflowed or fell
        // below the normal range; the latter cannot change a bit: |x * 2^120 * s| < 2^-126 makes
        // the product with w * 2^-120 (|w| <= 448) smaller than 2^-237, which rounds to a zero of
        // the right sign, or vanishes beside the sum, in both decodes.
        inexact |= _mm512_fpclass_ps_mask(scaled, 0x18) & ~_mm512_fpclass_ps_mask(x, 0x18);
      }
    }
    return inexact == 0;
  }

  const Matrix& m_;
  const float* x_;
  int tokens_;
  int64_t tile_row_ = -1;
  bool exact_ = false;
};

// ROWS rows of whole 64-column quads (fp8_prescaled_fits) against scaled activations; false, with
// nothing written, when a NaN code was among them.
template <int ROWS, int TOKENS>
bool stream_rows_fp8_prescaled(const Matrix& m, int64_t row0, const float* xs, int64_t x_stride, float* y,
                               int64_t y_stride) {
  const uint8_t* base = m.bytes + row0 * m.row_bytes;
  const char* next_group = reinterpret_cast<const char*>(base + ROWS * m.row_bytes);
  const __m512i low7 = _mm512_set1_epi8(0x7F);
  const __m512i kept_bits = _mm512_set1_epi32(static_cast<int>(0x87F00000u));
  __m512i largest = _mm512_setzero_si512();
  __m512 acc[ROWS][TOKENS];
  zero_accumulators(acc);
  const int64_t quads = m.full_chunks / 4;
  for (int64_t q = 0; q < quads; ++q) {
    for (int64_t offset = 0; offset < ROWS * 64; offset += 64) prefetch_ahead(next_group + q * ROWS * 64 + offset);
    for (int i = 0; i < ROWS; ++i)
      largest = _mm512_max_epu8(largest, _mm512_and_si512(_mm512_loadu_si512(base + i * m.row_bytes + q * 64), low7));
    for (int64_t k = 4 * q; k < 4 * q + 4; ++k) {
      __m512 x[TOKENS];
      for (int t = 0; t < TOKENS; ++t) x[t] = _mm512_loadu_ps(xs + t * x_stride + k * kLanes);
      for (int i = 0; i < ROWS; ++i) {
        // decode_chunk's FP8 bits, without its multiply and NaN select: w * 2^-120.
        const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(base + i * m.row_bytes + k * 16));
        const __m512 w = _mm512_castsi512_ps(_mm512_and_si512(_mm512_slli_epi32(_mm512_cvtepi8_epi32(bytes), 20), kept_bits));
        for (int t = 0; t < TOKENS; ++t) acc[i][t] = _mm512_fmadd_ps(x[t], w, acc[i][t]);
      }
    }
  }
  if (_mm512_cmpeq_epi8_mask(largest, low7) != 0) return false;
  store_sums<ROWS, TOKENS>(acc, y, y_stride, row0);
  return true;
}

// Matrices the scaled-activation decode takes: E8M0 scales (real checkpoints' only kind), rows of
// whole 64-column quads, blocks of whole chunks.
bool fp8_prescaled_fits(const Matrix& m) {
  return m.w->scale_encoding == ScaleEncoding::E8M0 && m.w->cols % 64 == 0 && m.w->block_cols % kLanes == 0;
}

// Rows [first_row, end_row) as GROUP-row groups, then 8-row ones (GROUP > 8), then single rows:
// group.template operator()<ROWS>(row0) computes one.
template <int GROUP, typename RowGroup>
__attribute__((always_inline)) inline void for_each_row_group(int64_t first_row, int64_t end_row, RowGroup&& group) {
  int64_t row = first_row;
  for (; row + GROUP <= end_row; row += GROUP) group.template operator()<GROUP>(row);
  if constexpr (GROUP > 8)
    for (; row + 8 <= end_row; row += 8) group.template operator()<8>(row);
  for (; row < end_row; ++row) group.template operator()<1>(row);
}

// FP8 rows: by scaled activations where they fit, else (and for groups that hold a NaN code) by
// the multiply-by-scale decode. Groups of at most 8 rows: that decode's 16-row groups run out of
// registers for the row pointers and scale broadcasts (1.68 vs 0.90 ms for 4096 x 4096), and the
// scaled one's run at 8 GB/s where 8 rows run at 20 (docs/BENCHMARKS.md).
template <int GROUP, int TOKENS>
void stream_range_fp8(const Matrix& m, const float* x, int64_t cols, float* y, int64_t first_row, int64_t end_row) {
  static_assert(GROUP <= 8);
  const bool fits = fp8_prescaled_fits(m);
  Fp8ScaledActivations scaled(m, x, TOKENS);
  for_each_row_group<GROUP>(first_row, end_row, [&]<int ROWS>(int64_t row0) {
    if (fits)
      if (const float* xs = scaled.for_rows(row0, ROWS))
        if (stream_rows_fp8_prescaled<ROWS, TOKENS>(m, row0, xs, cols, y, m.w->rows)) return;
    stream_rows_chunked<Decode::FP8, ROWS, TOKENS>(m, row0, x, cols, y, m.w->rows);
  });
}

template <Decode D, int GROUP, int TOKENS>
void stream_range(const Matrix& m, const float* x, int64_t cols, float* y, int64_t first_row, int64_t end_row) {
  for_each_row_group<GROUP>(first_row, end_row,
                            [&]<int ROWS>(int64_t row0) { stream_rows<D, ROWS, TOKENS>(m, row0, x, cols, y, m.w->rows); });
}

template <Decode D>
void stream(const Matrix& m, const float* x, int64_t tokens, float* y, int64_t first_row, int64_t end_row) {
  const int64_t cols = m.w->cols;
  switch (tokens) {
    // 16 rows (a narrow model's LM head has rows of 512 bytes, and the transposed sum of 16 rows
    // is what keeps its horizontal sums cheap); FP8 by stream_range_fp8. Long BF16 and FP4 rows
    // take 8: 16 interleaved row streams, each with its prefetches, outrun the loads one core
    // keeps in flight, as FP8's did (one token, one thread, 4096 x 4096 from DRAM: BF16
    // 13.6-16.7 GB/s in 16-row groups, 19.4-22.7 in 8-row ones; FP4 16.4-17.7 and 16.7-18.5,
    // though 16 rows run faster from cache; docs/BENCHMARKS.md). Same sums either way: 8-row
    // groups take the 16-row tree (store_sums).
    case 1:
      if constexpr (D == Decode::FP8)
        return stream_range_fp8<8, 1>(m, x, cols, y, first_row, end_row);
      else if constexpr (D == Decode::BF16Pairs || D == Decode::FP4)
        if (m.full_chunks / 2 > kShortRowPairs) return stream_range<D, 8, 1>(m, x, cols, y, first_row, end_row);
      return stream_range<D, 16, 1>(m, x, cols, y, first_row, end_row);
    case 2:
      if constexpr (D == Decode::FP8) return stream_range_fp8<4, 2>(m, x, cols, y, first_row, end_row);
      return stream_range<D, 4, 2>(m, x, cols, y, first_row, end_row);
    default:
      if constexpr (D == Decode::FP8) return stream_range_fp8<4, 3>(m, x, cols, y, first_row, end_row);
      return stream_range<D, 4, 3>(m, x, cols, y, first_row, end_row);
  }
}

// ---- panel kernel: decode 16 rows x panel_columns<D>() once, sweep every token over it ------

struct Scratch {
  std::vector<float> panel;         // kPanelRows x panel_columns<D>() decoded weights
  std::vector<float> accumulators;  // tokens x kPanelRows x 16 lanes
};

// ROWS x TOKENS accumulators over the `chunks` chunks of a decoded panel; the 16 floats at
// acc_store + (t * kPanelRows + i) * 16 hold (token t, row i)'s lanes between panels. The first
// panel of a row starts them at +0 instead of reading them (what a zeroed store would give, without
// zeroing tokens x 1 KB for every 16 rows).
template <int ROWS, int TOKENS>
void multiply_panel(const float* panel, int64_t panel_stride, int64_t chunks, bool first_panel, bool last_partial,
                    __mmask16 tail_mask, const float* x, int64_t x_stride, float* acc_store) {
  __m512 acc[ROWS][TOKENS];
  for (int i = 0; i < ROWS; ++i)
    for (int t = 0; t < TOKENS; ++t)
      acc[i][t] = first_panel ? _mm512_setzero_ps() : _mm512_loadu_ps(acc_store + (t * kPanelRows + i) * kLanes);
  const int64_t full = last_partial ? chunks - 1 : chunks;
  for (int64_t k = 0; k < full; ++k) {
    __m512 xs[TOKENS];
    for (int t = 0; t < TOKENS; ++t) xs[t] = _mm512_loadu_ps(x + t * x_stride + k * kLanes);
    for (int i = 0; i < ROWS; ++i) {
      const __m512 w = _mm512_load_ps(panel + i * panel_stride + k * kLanes);
      for (int t = 0; t < TOKENS; ++t) acc[i][t] = _mm512_fmadd_ps(xs[t], w, acc[i][t]);
    }
  }
  if (last_partial) {  // the zero-padded chunk: same FMAs, x masked to its valid lanes
    const int64_t k = full;
    __m512 xs[TOKENS];
    for (int t = 0; t < TOKENS; ++t) xs[t] = _mm512_maskz_loadu_ps(tail_mask, x + t * x_stride + k * kLanes);
    for (int i = 0; i < ROWS; ++i) {
      const __m512 w = _mm512_load_ps(panel + i * panel_stride + k * kLanes);
      for (int t = 0; t < TOKENS; ++t) acc[i][t] = _mm512_fmadd_ps(xs[t], w, acc[i][t]);
    }
  }
  for (int i = 0; i < ROWS; ++i)
    for (int t = 0; t < TOKENS; ++t) _mm512_storeu_ps(acc_store + (t * kPanelRows + i) * kLanes, acc[i][t]);
}

template <int TOKENS>
void multiply_token_block(const float* panel, int64_t panel_stride, int rows, int64_t chunks, bool first_panel,
                          bool last_partial, __mmask16 tail_mask, const float* x, int64_t x_stride, float* acc_store) {
  int i = 0;
  for (; i + 4 <= rows; i += 4)
    multiply_panel<4, TOKENS>(panel + i * panel_stride, panel_stride, chunks, first_panel, last_partial, tail_mask, x,
                              x_stride, acc_store + i * kLanes);
  for (; i < rows; ++i)
    multiply_panel<1, TOKENS>(panel + i * panel_stride, panel_stride, chunks, first_panel, last_partial, tail_mask, x,
                              x_stride, acc_store + i * kLanes);
}

void multiply_all_tokens(const float* panel, int64_t panel_stride, int rows, int64_t chunks, bool first_panel,
                         bool last_partial, __mmask16 tail_mask, const float* x, int64_t tokens, int64_t cols,
                         float* acc_store) {
  int64_t t = 0;
  for (; t + kPanelTokens <= tokens; t += kPanelTokens)
    multiply_token_block<kPanelTokens>(panel, panel_stride, rows, chunks, first_panel, last_partial, tail_mask,
                                       x + t * cols, cols, acc_store + t * kPanelRows * kLanes);
  float* acc = acc_store + t * kPanelRows * kLanes;
  const float* xt = x + t * cols;
  const auto block = [&]<int TOKENS>() {
    multiply_token_block<TOKENS>(panel, panel_stride, rows, chunks, first_panel, last_partial, tail_mask, xt, cols, acc);
  };
  switch (tokens - t) {
    case 5: return block.template operator()<5>();
    case 4: return block.template operator()<4>();
    case 3: return block.template operator()<3>();
    case 2: return block.template operator()<2>();
    case 1: return block.template operator()<1>();
    default: return;
  }
}

// Decodes chunks [k0, k0 + chunks) of `rows` rows into the panel (row i at panel_columns<D>() * i).
template <Decode D>
void decode_panel(const Matrix& m, int64_t row0, int rows, int64_t k0, int64_t chunks, float* panel) {
  for (int i = 0; i < rows; ++i) {
    const int64_t row = row0 + i;
    BlockScale scale{_mm512_setzero_ps(), false};
    int64_t scale_block = -1;
    for (int64_t k = k0; k < k0 + chunks; ++k) {
      if constexpr (D == Decode::FP8 || D == Decode::FP4) {
        if (k / m.chunks_per_block != scale_block) {
          scale_block = k / m.chunks_per_block;
          scale = block_scale<D>(m, row, scale_block);
        }
      }
      _mm512_store_ps(panel + i * panel_columns<D>() + (k - k0) * kLanes, decode_any_chunk<D>(m, row, k, scale));
    }
  }
}

template <Decode D>
void panel_rows(const Matrix& m, const float* x, int64_t tokens, float* y, int64_t first_row, int64_t end_row) {
  thread_local Scratch scratch;  // grows to the largest call a thread has seen; no per-call allocation
  if (scratch.panel.size() < static_cast<std::size_t>(kPanelRows * kMaxPanelCols + kLanes))
    scratch.panel.resize(kPanelRows * kMaxPanelCols + kLanes);
  const auto accumulator_floats = static_cast<std::size_t>(tokens * kPanelRows * kLanes);
  if (scratch.accumulators.size() < accumulator_floats) scratch.accumulators.resize(accumulator_floats);
  // 64-byte aligned panel rows: panel_columns<D>() floats are a multiple of 16.
  float* panel = scratch.panel.data();
  panel += (kLanes - (reinterpret_cast<uintptr_t>(panel) / 4) % kLanes) % kLanes;
  float* accumulators = scratch.accumulators.data();

  const int64_t cols = m.w->cols;
  const int64_t chunks = m.full_chunks + (m.tail ? 1 : 0);
  constexpr int64_t kPanelStride = panel_columns<D>();
  const int64_t panel_chunks = kPanelStride / kLanes;
  for (int64_t row0 = first_row; row0 < end_row; row0 += kPanelRows) {
    const int rows = static_cast<int>(std::min<int64_t>(kPanelRows, end_row - row0));
    for (int64_t k0 = 0; k0 < chunks; k0 += panel_chunks) {
      const int64_t count = std::min(panel_chunks, chunks - k0);
      const bool last_partial = m.tail != 0 && k0 + count == chunks;
      // The next panel's bytes, asked for now: its 16 rows lie in as many separate places, which
      // the hardware prefetcher would find only after the first misses of each.
      const bool last_panel = k0 + count == chunks;
      const int64_t next_row0 = last_panel ? row0 + kPanelRows : row0;
      const int64_t next_k0 = last_panel ? 0 : k0 + count;
      const int64_t span_bytes = std::min(panel_chunks, chunks - next_k0) * m.row_bytes / chunks;
      for (int64_t r = next_row0; r < std::min(next_row0 + kPanelRows, end_row); ++r) {
        const char* start = reinterpret_cast<const char*>(m.bytes + r * m.row_bytes + next_k0 * m.row_bytes / chunks);
        for (int64_t offset = 0; offset < span_bytes + 64; offset += 64) _mm_prefetch(start + offset, _MM_HINT_T0);
      }
      decode_panel<D>(m, row0, rows, k0, count, panel);
      multiply_all_tokens(panel, kPanelStride, rows, count, k0 == 0, last_partial, m.tail_mask, x + k0 * kLanes, tokens,
                          cols, accumulators);
    }
    for (int64_t t = 0; t < tokens; ++t) {
      const float* token_acc = accumulators + t * kPanelRows * kLanes;
      if (rows == kPanelRows) {  // the 16 rows' sums together (horizontal_sums: the same additions)
        __m512 lanes[kPanelRows];
        for (int i = 0; i < kPanelRows; ++i) lanes[i] = _mm512_loadu_ps(token_acc + i * kLanes);
        _mm512_storeu_ps(y + t * m.w->rows + row0, horizontal_sums(lanes));
      } else {
        for (int i = 0; i < rows; ++i) y[t * m.w->rows + row0 + i] = horizontal_sum(_mm512_loadu_ps(token_acc + i * kLanes));
      }
    }
  }
}

template <Decode D>
void linear_range(const Matrix& m, const float* x, int64_t tokens, float* y, int64_t first_row, int64_t end_row) {
  if (tokens <= kMaxStreamTokens)
    stream<D>(m, x, tokens, y, first_row, end_row);
  else
    panel_rows<D>(m, x, tokens, y, first_row, end_row);
}

// The scalar decoder streams too: same values and order, only slower (odd test shapes).
template <>
void linear_range<Decode::Scalar>(const Matrix& m, const float* x, int64_t tokens, float* y, int64_t first_row,
                                  int64_t end_row) {
  panel_rows<Decode::Scalar>(m, x, tokens, y, first_row, end_row);
}

void linear_range_any(const Matrix& m, const float* x, int64_t tokens, float* y, int64_t first_row, int64_t end_row) {
  switch (decode_of(m)) {
    case Decode::F32: return linear_range<Decode::F32>(m, x, tokens, y, first_row, end_row);
    case Decode::BF16: return linear_range<Decode::BF16>(m, x, tokens, y, first_row, end_row);
    case Decode::BF16Pairs: return linear_range<Decode::BF16Pairs>(m, x, tokens, y, first_row, end_row);
    case Decode::FP8: return linear_range<Decode::FP8>(m, x, tokens, y, first_row, end_row);
    case Decode::FP4: return linear_range<Decode::FP4>(m, x, tokens, y, first_row, end_row);
    case Decode::Scalar: return linear_range<Decode::Scalar>(m, x, tokens, y, first_row, end_row);
  }
}

// The FP4 and BF16-pair decoders' column order (decode_chunk): in every 32 columns, the even ones,
// then the odd ones. Written to the calling thread's buffer, which the pool's workers read during
// the call.
const float* permute_pair_activations(const float* x, int64_t tokens, int64_t cols) {
  thread_local std::vector<float> permuted;  // grows to the largest call; no per-call allocation
  if (permuted.size() < static_cast<std::size_t>(tokens * cols)) permuted.resize(static_cast<std::size_t>(tokens * cols));
  const __m512i even_index = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd_index = _mm512_add_epi32(even_index, _mm512_set1_epi32(1));
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t c = 0; c < cols; c += 32) {
      const __m512 low = _mm512_loadu_ps(x + t * cols + c);
      const __m512 high = _mm512_loadu_ps(x + t * cols + c + 16);
      _mm512_storeu_ps(permuted.data() + t * cols + c, _mm512_permutex2var_ps(low, even_index, high));
      _mm512_storeu_ps(permuted.data() + t * cols + c + 16, _mm512_permutex2var_ps(low, odd_index, high));
    }
  return permuted.data();
}

}  // namespace

void linear_avx512(const float* x, int64_t tokens, const WeightMatrix& weight, float* y, ThreadPool& pool) {
  const Matrix m = describe(weight);
  if (decode_of(m) == Decode::FP4 || decode_of(m) == Decode::BF16Pairs)
    x = permute_pair_activations(x, tokens, weight.cols);
  const int64_t groups = (weight.rows + kRowGroup - 1) / kRowGroup;
  pool.parallel_for(groups, [&](int64_t first_group, int64_t end_group) {
    linear_range_any(m, x, tokens, y, first_group * kRowGroup, std::min(end_group * kRowGroup, weight.rows));
  });
}

}  // namespace deepinfer::kernels::cpu

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC diagnostic pop
#pragma GCC pop_options
#endif

#endif  // DEEPINFER_AVX512_KERNELS
