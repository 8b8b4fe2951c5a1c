// AVX2 + FMA linear kernel.
//
// Work split: the pool partitions OUTPUT ROWS in blocks of kRowBlock; the reduction over columns
// is never split. A thread decodes a panel (kPanelRows rows x kPanelCols columns) of weights into
// an L1-resident f32 buffer once and takes its product with every token, so decoding is paid
// once per weight whatever the token count, and no dequantized matrix ever exists.
//
// Batch invariance: every y[t, r] is reduced in one order that depends only on `cols`: one
// 8-lane accumulator, lane j summing x[t, c] * w[r, c] for c = 8k + j in increasing k by FMA
// (the last partial chunk zero-padded), then a fixed horizontal sum. Which micro-kernel shape
// (rows x tokens) handles the pair, which panel, which thread, and how many tokens are in the
// call change only how accumulators are held (registers or an exact store/reload), never the
// operations, so results are bit-identical for any `tokens` and any thread count.
//
// Decoding gives exactly the scalar decoders' value times the scale (core/float_formats.h):
//   BF16  shift into the high half of an f32;
//   FP8   e4m3 bits moved into an f16 (same mantissa, exponent bias 15 instead of 7), F16C
//         converts exactly (subnormals included), times 2^8 (exact), times the tile scale;
//         S.1111.111 is forced to an f16 NaN;
//   FP4   a 16-entry vpshufb table gives the high byte of each e2m1 value's f16 (the low byte
//         is always 0), F16C converts, times the group scale.
#ifdef __AVX2__
#if !defined(__FMA__) || !defined(__F16C__)
#error "the AVX2 linear kernel also needs FMA and F16C (-march=x86-64-v3)"
#endif

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/float_formats.h"
#include "kernels/cpu/linear_cpu.h"
#include "kernels/cpu/weight_scales.h"

namespace deepinfer::kernels::cpu {
namespace {

constexpr int kRowBlock = 4;     // rows of one micro-kernel, and the unit the pool splits rows by
constexpr int kPanelRows = 16;   // rows decoded together: each token block passes all of them
constexpr int kTokenBlock = 3;
constexpr int64_t kPanelCols = 256;  // a multiple of 8: chunk boundaries never move; 16 KB of f32 per panel

// ---- decoding a span of one weight row into f32 -------------------------------------------

void decode_bf16(const uint8_t* src, int64_t count, float* out) {
  int64_t c = 0;
  for (; c + 8 <= count; c += 8) {
    const __m128i bits = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + c * 2));
    _mm256_storeu_ps(out + c, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16)));
  }
  for (; c < count; ++c) {
    uint16_t bits;
    std::memcpy(&bits, src + c * 2, 2);
    out[c] = bf16_to_float(bits);
  }
}

void decode_fp8(const uint8_t* src, int64_t count, float scale, float* out) {
  const __m256 vscale = _mm256_set1_ps(scale);
  const __m256 two_pow_8 = _mm256_set1_ps(256.0f);
  const __m256i keep = _mm256_set1_epi16(static_cast<int16_t>(0xBF80));   // sign + 7 magnitude bits
  const __m256i magnitude = _mm256_set1_epi16(0x7F80);
  const __m256i nan_magnitude = _mm256_set1_epi16(0x3F80);  // e4m3 .1111.111 after the move
  int64_t c = 0;
  for (; c + 16 <= count; c += 16) {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + c));
    // byte << 8, then an arithmetic shift by 1: sign stays in bit 15, exponent and mantissa
    // land in bits 13..7; clearing bit 14 leaves the f16 with the same exponent and mantissa.
    __m256i half = _mm256_srai_epi16(_mm256_slli_epi16(_mm256_cvtepu8_epi16(bytes), 8), 1);
    half = _mm256_and_si256(half, keep);
    half = _mm256_or_si256(half, _mm256_cmpeq_epi16(_mm256_and_si256(half, magnitude), nan_magnitude));
    const __m256 low = _mm256_cvtph_ps(_mm256_castsi256_si128(half));
    const __m256 high = _mm256_cvtph_ps(_mm256_extracti128_si256(half, 1));
    _mm256_storeu_ps(out + c, _mm256_mul_ps(_mm256_mul_ps(low, two_pow_8), vscale));
    _mm256_storeu_ps(out + c + 8, _mm256_mul_ps(_mm256_mul_ps(high, two_pow_8), vscale));
  }
  for (; c < count; ++c) out[c] = e4m3fn_to_float(src[c]) * scale;
}

// `first_col` is the logical column of out[0]; when it is odd the span starts on a high nibble.
void decode_fp4(const uint8_t* row_bytes, int64_t first_col, int64_t count, float scale, float* out) {
  int64_t c = 0;
  if (first_col % 2 == 0) {
    const __m128i f16_high_bytes = _mm_setr_epi8(0x00, 0x38, 0x3C, 0x3E, 0x40, 0x42, 0x44, 0x46, static_cast<char>(0x80),
                                                 static_cast<char>(0xB8), static_cast<char>(0xBC), static_cast<char>(0xBE),
                                                 static_cast<char>(0xC0), static_cast<char>(0xC2), static_cast<char>(0xC4),
                                                 static_cast<char>(0xC6));
    const __m128i low_nibble = _mm_set1_epi8(0x0F);
    const __m128i zero = _mm_setzero_si128();
    const __m256 vscale = _mm256_set1_ps(scale);
    const uint8_t* src = row_bytes + first_col / 2;
    for (; c + 32 <= count; c += 32) {
      const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + c / 2));
      const __m128i even = _mm_and_si128(bytes, low_nibble);
      const __m128i odd = _mm_and_si128(_mm_srli_epi16(bytes, 4), low_nibble);
      const __m128i high_0_15 = _mm_shuffle_epi8(f16_high_bytes, _mm_unpacklo_epi8(even, odd));
      const __m128i high_16_31 = _mm_shuffle_epi8(f16_high_bytes, _mm_unpackhi_epi8(even, odd));
      _mm256_storeu_ps(out + c, _mm256_mul_ps(_mm256_cvtph_ps(_mm_unpacklo_epi8(zero, high_0_15)), vscale));
      _mm256_storeu_ps(out + c + 8, _mm256_mul_ps(_mm256_cvtph_ps(_mm_unpackhi_epi8(zero, high_0_15)), vscale));
      _mm256_storeu_ps(out + c + 16, _mm256_mul_ps(_mm256_cvtph_ps(_mm_unpacklo_epi8(zero, high_16_31)), vscale));
      _mm256_storeu_ps(out + c + 24, _mm256_mul_ps(_mm256_cvtph_ps(_mm_unpackhi_epi8(zero, high_16_31)), vscale));
    }
  }
  for (; c < count; ++c) {
    const int64_t col = first_col + c;
    const uint8_t byte = row_bytes[col / 2];
    out[c] = e2m1_to_float(col % 2 == 0 ? byte & 0x0F : byte >> 4) * scale;
  }
}

// Columns [first_col, first_col + count) of weight row `row`, times their scales, into out.
void decode_span(const WeightMatrix& w, int64_t row, int64_t first_col, int64_t count, float* out) {
  const auto* bytes = static_cast<const uint8_t*>(w.data);
  switch (w.encoding) {
    case WeightEncoding::F32:
      std::memcpy(out, bytes + (row * w.cols + first_col) * 4, static_cast<std::size_t>(count) * 4);
      return;
    case WeightEncoding::BF16:
      decode_bf16(bytes + (row * w.cols + first_col) * 2, count, out);
      return;
    case WeightEncoding::FP8_E4M3:
    case WeightEncoding::FP4_E2M1: {
      // One scale per block of block_cols columns: decode block piece by block piece.
      const int64_t end_col = first_col + count;
      int64_t scale_index = scale_row_start(w, row) + first_col / w.block_cols;
      int64_t col = first_col;
      while (col < end_col) {
        const int64_t piece_end = std::min(end_col, (col / w.block_cols + 1) * w.block_cols);
        const float scale = scale_at(w, scale_index++);
        if (w.encoding == WeightEncoding::FP8_E4M3)
          decode_fp8(bytes + row * w.cols + col, piece_end - col, scale, out + (col - first_col));
        else
          decode_fp4(bytes + row * (w.cols / 2), col, piece_end - col, scale, out + (col - first_col));
        col = piece_end;
      }
      return;
    }
  }
}

// Asks for the bytes of columns [first_col, first_col + count) of `row` ahead of their decode:
// the row block reads several rows in short bursts, which the hardware prefetcher alone follows
// too late to keep a core's DRAM bandwidth busy at decode (one token).
void prefetch_span(const WeightMatrix& w, int64_t row, int64_t first_col, int64_t count) {
  const auto* bytes = static_cast<const char*>(w.data);
  int64_t begin = 0, end = 0;
  switch (w.encoding) {
    case WeightEncoding::F32: begin = (row * w.cols + first_col) * 4, end = begin + count * 4; break;
    case WeightEncoding::BF16: begin = (row * w.cols + first_col) * 2, end = begin + count * 2; break;
    case WeightEncoding::FP8_E4M3: begin = row * w.cols + first_col, end = begin + count; break;
    case WeightEncoding::FP4_E2M1: begin = (row * w.cols + first_col) / 2, end = begin + (count + 1) / 2; break;
  }
  for (int64_t offset = begin; offset < end; offset += 64) _mm_prefetch(bytes + offset, _MM_HINT_T0);
}

// ---- the product of a decoded panel with the tokens -------------------------------------------

// Lane sums in a fixed tree: (j, j+4), then (j, j+2), then (0, 1).
inline float horizontal_sum(__m256 v) {
  __m128 sum = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  sum = _mm_add_ps(sum, _mm_movehl_ps(sum, sum));
  sum = _mm_add_ss(sum, _mm_movehdup_ps(sum));
  return _mm_cvtss_f32(sum);
}

struct Panel {
  const float* weights;      // rows of decoded weights, `stride` floats apart, zero-padded to a chunk
  int64_t stride;
  int64_t full_chunks;       // 8-column chunks fully inside the panel
  bool has_partial_chunk;    // a last chunk with fewer than 8 columns
  __m256i partial_mask;      // its valid lanes
};

// ROWS x TOKENS accumulators: the 8 floats at accumulators + (t * row_stride + i) * 8 hold
// (token t, row i)'s lanes between panels (a store and reload is exact).
template <int ROWS, int TOKENS>
void multiply_panel(const Panel& panel, const float* x, int64_t x_stride, float* accumulators, int64_t row_stride) {
  __m256 acc[ROWS][TOKENS];
  for (int i = 0; i < ROWS; ++i)
    for (int t = 0; t < TOKENS; ++t) acc[i][t] = _mm256_loadu_ps(accumulators + (t * row_stride + i) * 8);
  for (int64_t k = 0; k < panel.full_chunks; ++k) {
    __m256 xs[TOKENS];
    for (int t = 0; t < TOKENS; ++t) xs[t] = _mm256_loadu_ps(x + t * x_stride + k * 8);
    for (int i = 0; i < ROWS; ++i) {
      const __m256 w = _mm256_loadu_ps(panel.weights + i * panel.stride + k * 8);
      for (int t = 0; t < TOKENS; ++t) acc[i][t] = _mm256_fmadd_ps(xs[t], w, acc[i][t]);
    }
  }
  if (panel.has_partial_chunk) {
    const int64_t k = panel.full_chunks;
    __m256 xs[TOKENS];
    for (int t = 0; t < TOKENS; ++t) xs[t] = _mm256_maskload_ps(x + t * x_stride + k * 8, panel.partial_mask);
    for (int i = 0; i < ROWS; ++i) {
      const __m256 w = _mm256_loadu_ps(panel.weights + i * panel.stride + k * 8);
      for (int t = 0; t < TOKENS; ++t) acc[i][t] = _mm256_fmadd_ps(xs[t], w, acc[i][t]);
    }
  }
  for (int i = 0; i < ROWS; ++i)
    for (int t = 0; t < TOKENS; ++t) _mm256_storeu_ps(accumulators + (t * row_stride + i) * 8, acc[i][t]);
}

// All tokens against `rows` (<= kPanelRows) decoded rows of one panel. Tokens go three at a time
// (4 rows x 3 tokens = 12 accumulators + 3 x + 1 weight: the 16 ymm registers, 7 loads per 12
// FMAs) over every 4-row group of the panel, so a token block's x stays in L1 while the panel's
// rows pass; then the one or two tokens left over, and rows left over one at a time.
template <int TOKENS>
void multiply_token_block(const Panel& panel, int rows, const float* x, int64_t cols, float* accumulators) {
  int i = 0;
  for (; i + kRowBlock <= rows; i += kRowBlock) {
    Panel group = panel;
    group.weights = panel.weights + i * panel.stride;
    multiply_panel<kRowBlock, TOKENS>(group, x, cols, accumulators + i * 8, kPanelRows);
  }
  for (; i < rows; ++i) {
    Panel row = panel;
    row.weights = panel.weights + i * panel.stride;
    multiply_panel<1, TOKENS>(row, x, cols, accumulators + i * 8, kPanelRows);
  }
}

void multiply_panel_all_tokens(const Panel& panel, int rows, const float* x, int64_t tokens, int64_t cols,
                               float* accumulators) {
  int64_t t = 0;
  for (; t + kTokenBlock <= tokens; t += kTokenBlock)
    multiply_token_block<kTokenBlock>(panel, rows, x + t * cols, cols, accumulators + t * kPanelRows * 8);
  if (tokens - t == 2) multiply_token_block<2>(panel, rows, x + t * cols, cols, accumulators + t * kPanelRows * 8);
  else if (tokens - t == 1) multiply_token_block<1>(panel, rows, x + t * cols, cols, accumulators + t * kPanelRows * 8);
}

struct Scratch {
  std::vector<float> weights;        // kPanelRows x kPanelCols decoded panel
  std::vector<float> accumulators;  // tokens x kPanelRows x 8 lanes
};

void linear_rows(const float* x, int64_t tokens, const WeightMatrix& w, float* y, int64_t first_row, int64_t end_row) {
  thread_local Scratch scratch;  // grows to the largest call a thread has seen; no per-call allocation
  scratch.weights.resize(kPanelRows * kPanelCols);
  const auto accumulator_floats = static_cast<std::size_t>(tokens * kPanelRows * 8);
  if (scratch.accumulators.size() < accumulator_floats) scratch.accumulators.resize(accumulator_floats);
  float* weights = scratch.weights.data();
  float* accumulators = scratch.accumulators.data();

  for (int64_t row0 = first_row; row0 < end_row; row0 += kPanelRows) {
    const int rows = static_cast<int>(std::min<int64_t>(kPanelRows, end_row - row0));
    std::fill(accumulators, accumulators + accumulator_floats, 0.0f);
    for (int64_t col0 = 0; col0 < w.cols; col0 += kPanelCols) {
      const int64_t width = std::min(kPanelCols, w.cols - col0);
      const int64_t padded = (width + 7) / 8 * 8;
      const bool last_panel = col0 + kPanelCols >= w.cols;
      const int64_t next_row0 = last_panel ? row0 + kPanelRows : row0;
      const int64_t next_col0 = last_panel ? 0 : col0 + kPanelCols;
      for (int64_t r = next_row0; r < std::min(next_row0 + kPanelRows, end_row); ++r)
        prefetch_span(w, r, next_col0, std::min(kPanelCols, w.cols - next_col0));
      for (int i = 0; i < rows; ++i) {
        float* row_weights = weights + i * kPanelCols;
        decode_span(w, row0 + i, col0, width, row_weights);
        std::fill(row_weights + width, row_weights + padded, 0.0f);
      }
      Panel panel{weights, kPanelCols, width / 8, width % 8 != 0, _mm256_setzero_si256()};
      if (panel.has_partial_chunk) {
        const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        panel.partial_mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(width % 8)), lane);
      }
      multiply_panel_all_tokens(panel, rows, x + col0, tokens, w.cols, accumulators);
    }
    for (int64_t t = 0; t < tokens; ++t)
      for (int i = 0; i < rows; ++i)
        y[t * w.rows + row0 + i] = horizontal_sum(_mm256_loadu_ps(accumulators + (t * kPanelRows + i) * 8));
  }
}

}  // namespace

void linear_avx2(const float* x, int64_t tokens, const WeightMatrix& weight, float* y, ThreadPool& pool) {
  const int64_t row_blocks = (weight.rows + kRowBlock - 1) / kRowBlock;
  pool.parallel_for(row_blocks, [&](int64_t first_block, int64_t end_block) {
    linear_rows(x, tokens, weight, y, first_block * kRowBlock, std::min(end_block * kRowBlock, weight.rows));
  });
}

}  // namespace deepinfer::kernels::cpu

#endif  // __AVX2__
