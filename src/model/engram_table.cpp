#include "model/engram_table.h"

#include <span>

#include "core/error.h"

namespace deepinfer::model {

EngramTable::EngramTable(TensorView weight, std::optional<TensorView> scale, std::string name)
    : weight_(std::move(weight)), name_(std::move(name)) {
  if (weight_.shape.size() != 2) fail(name_, ": expected a [rows, head_dim] table, got ", shape_string(weight_.shape));
  rows_ = weight_.shape[0];
  cols_ = weight_.shape[1];
  if (weight_.dtype == DType::F8_E4M3) {
    if (!scale) fail(name_, ": F8_E4M3 table without its `.scale` tensor");
    quantized_ = QuantizedMatrix::fp8_block_scaled(weight_, *scale, BlockShape{1, 32}, name_);
  } else if (weight_.dtype == DType::F32 || weight_.dtype == DType::BF16 || weight_.dtype == DType::F16) {
    const auto expected = static_cast<std::size_t>(rows_ * cols_) * dtype_size(weight_.dtype);
    if (rows_ < 0 || cols_ < 0 || weight_.bytes.size() != expected)
      fail(name_, ": ", dtype_name(weight_.dtype), " ", shape_string(weight_.shape), " needs ", expected,
           " bytes, the file holds ", weight_.bytes.size());
  } else {
    fail(name_, ": table dtype ", dtype_name(weight_.dtype), " (expected F8_E4M3 with scales, F32, BF16 or F16)");
  }
}

void EngramTable::gather(int64_t row, float* out) const {
  if (row < 0 || row >= rows_) fail(name_, ": hash row ", row, " is outside the table's ", rows_, " rows");
  const std::span<float> destination(out, static_cast<std::size_t>(cols_));
  if (quantized_) {
    quantized_->dequantize_rows(row, row + 1, destination);
    return;
  }
  const std::size_t row_bytes = static_cast<std::size_t>(cols_) * dtype_size(weight_.dtype);
  TensorView one_row{weight_.dtype, {1, cols_}, weight_.bytes.subspan(static_cast<std::size_t>(row) * row_bytes, row_bytes)};
  convert_to_f32(one_row, destination, name_);
}

}  // namespace deepinfer::model
