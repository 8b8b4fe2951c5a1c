#pragma once
// The compute kernels the model layer runs on: one small interface, one implementation per
// backend (kernels/cpu now; kernels/cuda later). Weights stay in their checkpoint encoding (BF16,
// DeepSeek's block-scaled FP8 and group-scaled FP4) and are decoded inside the kernels, so no
// dequantized copy of a model ever exists in memory.
#include <cstdint>

namespace deepinfer::kernels {

enum class WeightEncoding {
  F32,
  BF16,
  FP8_E4M3,  // with a scale per block_rows x block_cols tile
  FP4_E2M1,  // two per byte, low nibble = even column; a scale per block_cols inputs of a row
};

enum class ScaleEncoding {
  None,
  E8M0,  // one byte: 2^(b - 127); 255 is NaN
  F32,
};

// How a matrix's codes are laid out. Checkpoints, and every CPU kernel, are RowMajor.
enum class WeightLayout {
  RowMajor,
  // FP4 only (device copies of routed experts, backend/cuda): rows in 16-row tiles, and within a
  // tile each 128-column chunk of its 16 rows contiguous (16 x 64 bytes), so the CUDA expert
  // kernels read 512 contiguous bytes a load instead of 64 from each of 8 rows. Scales stay
  // row-major. Byte b of row r sits at (r / 16) * 16 * row_bytes + (b / 64) * 1024 + (r % 16) * 64
  // + b % 64. Within each little-endian 32-bit word the bits are permuted: bit b of nibble n moves
  // to bit expert_tile_bit(n, b) (kernels/cuda/expert_decode.cuh), the order the kernels decode in
  // the fewest instructions.
  ExpertTiles,
};

// A [rows, cols] weight matrix (rows = output features), as stored (layout): non-owning.
struct WeightMatrix {
  WeightEncoding encoding = WeightEncoding::F32;
  int64_t rows = 0;
  int64_t cols = 0;            // logical columns (FP4 stores cols / 2 bytes a row)
  const void* data = nullptr;  // may be unaligned (safetensors offsets are not aligned)
  ScaleEncoding scale_encoding = ScaleEncoding::None;
  const void* scales = nullptr;  // FP8: [ceil(rows / block_rows), ceil(cols / block_cols)]; FP4: [rows, cols / block_cols]
  int64_t block_rows = 1;
  int64_t block_cols = 1;
  // FP8: every code was checked and none is an e4m3 NaN (S.1111.111). A backend that decodes NaN
  // codes specially may then skip that work (the CUDA weight store checks at upload; no released
  // checkpoint has one). False means unchecked, never "has NaNs".
  bool no_nan_codes = false;
  // E8M0 scales: the largest scale byte, where the backend checked them at upload (255, the NaN
  // code, when unchecked). The CUDA FP4 decode folds its code unit and the scale into one exact
  // multiply when every scale is small enough (mma_common.cuh); no released checkpoint is past it.
  uint8_t max_e8m0 = 255;
  WeightLayout layout = WeightLayout::RowMajor;
};

const char* encoding_name(WeightEncoding encoding);
// Refuses (deepinfer::Error naming `who`) a descriptor whose shape, blocks or scales are
// inconsistent; every backend's linear checks this before it reads.
void check_weight(const WeightMatrix& weight, const char* who);

// Row `row` of a weight in f32, decoded from any encoding (embeddings; the Markov table).
void decode_row(const WeightMatrix& table, int64_t row, float* out);

// y[t, r] = sum_c x[t, c] * W[r, c] for t < tokens; x is [tokens, cols], y is [tokens, rows], f32.
// Batch invariance: each y[t, r] is reduced in one fixed order that depends on neither `tokens`
// nor how the work is split across threads, so a row of logits is bit-identical alone or batched.
void linear(const float* x, int64_t tokens, const WeightMatrix& weight, float* y);

}  // namespace deepinfer::kernels
