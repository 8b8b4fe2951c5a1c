#pragma once
// One Engram hash table, read by row gather straight from the checkpoint mapping (the released
// tables are ~98 GB each and are never materialised): F8_E4M3 rows with one E8M0 (or F32) scale
// per 32 columns (DeepSeek's release), or plain F32 / BF16 / F16 rows (save_pretrained).
#include <cstdint>
#include <optional>
#include <string>

#include "core/tensor_view.h"
#include "io/dequant.h"

namespace deepinfer::model {

class EngramTable {
 public:
  // Validates dtypes and shapes (throws deepinfer::Error naming `name`): `scale` is required for
  // FP8 rows and ignored otherwise (the reference applies it only to float8 tables; a BF16 table
  // saved from a model whose `scale` parameter was never trained may still carry one).
  EngramTable(TensorView weight, std::optional<TensorView> scale, std::string name);

  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  // Row `row` as f32 into out[0, cols()); throws when the row is out of range.
  void gather(int64_t row, float* out) const;

 private:
  TensorView weight_;
  std::optional<QuantizedMatrix> quantized_;
  int64_t rows_ = 0;
  int64_t cols_ = 0;
  std::string name_;
};

}  // namespace deepinfer::model
