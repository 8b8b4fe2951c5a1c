#pragma once
// Dequantization of DeepSeek's quantized checkpoint weights (v4_arch.md §3.3):
//
//  * FP8 block-scaled: weight F8_E4M3 [out, in], scale [ceil(out/br), ceil(in/bc)],
//    W[r,c] = e4m3(W[r,c]) * S[r/br, c/bc]. Block br x bc is 128x128 in V4, 32x32 in V4.1,
//    1x32 for the V4.1 Engram table (one scale per 32 columns of a row).
//  * FP4 group-scaled (MXFP4 experts): weight I8/U8 [out, in/2], byte k of a row holds logical
//    columns 2k (low nibble) and 2k+1 (high nibble); scale [out, in/g], g = 32,
//    W[r,c] = e2m1(nibble) * S[r, c/g].
//
// Scales are F8_E8M0 (byte b = 2^(b-127), 255 = NaN) or F32 (`weight_scale_inv` dumps), and are
// multiplied in. A QuantizedMatrix is validated once when built (a user-facing deepinfer::Error
// naming the tensor on any mismatch) and then dequantizes any row range on demand, so the
// forward pass can expand rows just in time instead of materializing the whole matrix.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "core/tensor_view.h"

namespace deepinfer {

// Rows x columns of the weight tile that shares one scale.
struct BlockShape {
  int64_t rows = 128;
  int64_t cols = 128;
};

class QuantizedMatrix {
 public:
  // Throws deepinfer::Error (naming `name`) if dtypes, ranks, byte sizes or the scale shape are wrong.
  static QuantizedMatrix fp8_block_scaled(TensorView weight, TensorView scale, BlockShape block, std::string name);
  static QuantizedMatrix fp4_group_scaled(TensorView weight, TensorView scale, std::string name,
                                          int64_t group_size = 32);

  // Logical shape: FP4 rows hold two values per stored byte.
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  const std::string& name() const { return name_; }

  // Writes rows [row_begin, row_end) row-major into the first (row_end - row_begin) * cols()
  // elements of `out`. bf16 output is the round-to-nearest-even of the f32 result.
  void dequantize_rows(int64_t row_begin, int64_t row_end, std::span<float> out) const;
  void dequantize_rows(int64_t row_begin, int64_t row_end, std::span<uint16_t> out_bf16) const;
  void dequantize(std::span<float> out) const { dequantize_rows(0, rows_, out); }
  void dequantize(std::span<uint16_t> out_bf16) const { dequantize_rows(0, rows_, out_bf16); }

 private:
  enum class Format { Fp8BlockScaled, Fp4GroupScaled };

  QuantizedMatrix() = default;
  void check_row_range(int64_t row_begin, int64_t row_end, std::size_t out_size) const;
  float scale_at(int64_t scale_row, int64_t scale_col) const;
  void dequantize_row(int64_t row, float* out) const;

  Format format_ = Format::Fp8BlockScaled;
  TensorView weight_;
  TensorView scale_;
  BlockShape block_;  // FP4: {1, group_size}
  int64_t rows_ = 0;
  int64_t cols_ = 0;
  std::string name_;
};

// Converts a tensor of any plain float dtype (F32, F16, BF16, F8_E4M3, F8_E5M2; any rank) to
// f32 in `out` (at least numel() elements). Throws deepinfer::Error naming `name` otherwise.
void convert_to_f32(const TensorView& tensor, std::span<float> out, std::string_view name);

}  // namespace deepinfer
