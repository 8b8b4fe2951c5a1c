#include "io/dequant.h"

#include <algorithm>
#include <cstring>
#include <sstream>
#include <utility>
#include <vector>

#include "core/int_math.h"
#include "core/error.h"
#include "core/float_formats.h"

namespace deepinfer {
namespace {


// Element count, or an Error if a dimension is negative or the product overflows.
int64_t checked_numel(const TensorView& tensor, std::string_view name, std::string_view role) {
  int64_t count = 1;
  for (int64_t dim : tensor.shape) {
    if (dim < 0 || __builtin_mul_overflow(count, dim, &count))
      fail("tensor '", name, "': ", role, " has an invalid shape ", shape_string(tensor.shape));
  }
  return count;
}

// Checks rank 2 and that the byte span holds exactly shape x element size (the view may come
// from a damaged file; reading past it would be UB).
void check_matrix_bytes(const TensorView& tensor, std::string_view name, std::string_view role) {
  if (tensor.shape.size() != 2)
    fail("tensor '", name, "': ", role, " must be 2-D, got shape ", shape_string(tensor.shape));
  const int64_t numel = checked_numel(tensor, name, role);
  const auto expected = static_cast<uint64_t>(numel) * dtype_size(tensor.dtype);
  if (tensor.bytes.size() != expected)
    fail("tensor '", name, "': ", role, " ", dtype_name(tensor.dtype), " ", shape_string(tensor.shape), " needs ",
         expected, " bytes, got ", tensor.bytes.size());
}

void check_scale_dtype(const TensorView& scale, std::string_view name) {
  if (scale.dtype != DType::F8_E8M0 && scale.dtype != DType::F32)
    fail("tensor '", name, "': scale must be F8_E8M0 or F32, got ", dtype_name(scale.dtype));
}

void check_scale_shape(const TensorView& scale, int64_t expected_rows, int64_t expected_cols, std::string_view name,
                       std::string_view how) {
  if (scale.shape[0] != expected_rows || scale.shape[1] != expected_cols)
    fail("tensor '", name, "': scale shape ", shape_string(scale.shape), " does not match [", expected_rows, ", ",
         expected_cols, "] (", how, ")");
}

template <typename T>
T load(const std::byte* address) {
  T value;
  std::memcpy(&value, address, sizeof(T));  // checkpoint data need not be aligned
  return value;
}

}  // namespace

QuantizedMatrix QuantizedMatrix::fp8_block_scaled(TensorView weight, TensorView scale, BlockShape block,
                                                  std::string name) {
  if (weight.dtype != DType::F8_E4M3)
    fail("tensor '", name, "': FP8 block-scaled weight must be F8_E4M3, got ", dtype_name(weight.dtype));
  check_scale_dtype(scale, name);
  if (block.rows <= 0 || block.cols <= 0)
    fail("tensor '", name, "': block shape must be positive, got [", block.rows, ", ", block.cols, "]");
  check_matrix_bytes(weight, name, "weight");
  check_matrix_bytes(scale, name, "scale");
  const int64_t rows = weight.shape[0];
  const int64_t cols = weight.shape[1];
  std::ostringstream how;
  how << "weight " << shape_string(weight.shape) << " in " << block.rows << "x" << block.cols << " blocks";
  check_scale_shape(scale, ceil_div(rows, block.rows), ceil_div(cols, block.cols), name, how.str());

  QuantizedMatrix matrix;
  matrix.format_ = Format::Fp8BlockScaled;
  matrix.weight_ = std::move(weight);
  matrix.scale_ = std::move(scale);
  matrix.block_ = block;
  matrix.rows_ = rows;
  matrix.cols_ = cols;
  matrix.name_ = std::move(name);
  return matrix;
}

QuantizedMatrix QuantizedMatrix::fp4_group_scaled(TensorView weight, TensorView scale, std::string name,
                                                  int64_t group_size) {
  if (weight.dtype != DType::I8 && weight.dtype != DType::U8)
    fail("tensor '", name, "': packed FP4 weight must be I8 or U8, got ", dtype_name(weight.dtype));
  check_scale_dtype(scale, name);
  // An even group covers whole bytes, so every byte's two nibbles share one scale.
  if (group_size <= 0 || group_size % 2 != 0)
    fail("tensor '", name, "': FP4 group size must be positive and even, got ", group_size);
  check_matrix_bytes(weight, name, "weight");
  check_matrix_bytes(scale, name, "scale");
  const int64_t rows = weight.shape[0];
  const int64_t cols = weight.shape[1] * 2;
  if (cols % group_size != 0)
    fail("tensor '", name, "': FP4 input dimension ", cols, " (2 x ", weight.shape[1],
         " packed bytes) is not divisible by the group size ", group_size);
  std::ostringstream how;
  how << "logical weight [" << rows << ", " << cols << "] in groups of " << group_size;
  check_scale_shape(scale, rows, cols / group_size, name, how.str());

  QuantizedMatrix matrix;
  matrix.format_ = Format::Fp4GroupScaled;
  matrix.weight_ = std::move(weight);
  matrix.scale_ = std::move(scale);
  matrix.block_ = {1, group_size};
  matrix.rows_ = rows;
  matrix.cols_ = cols;
  matrix.name_ = std::move(name);
  return matrix;
}

void QuantizedMatrix::check_row_range(int64_t row_begin, int64_t row_end, std::size_t out_size) const {
  if (row_begin < 0 || row_begin > row_end || row_end > rows_)
    fail("tensor '", name_, "': row range [", row_begin, ", ", row_end, ") is outside [0, ", rows_, ")");
  const auto needed = static_cast<uint64_t>(row_end - row_begin) * static_cast<uint64_t>(cols_);
  if (out_size < needed)
    fail("tensor '", name_, "': output holds ", out_size, " values, rows [", row_begin, ", ", row_end, ") need ",
         needed);
}

float QuantizedMatrix::scale_at(int64_t scale_row, int64_t scale_col) const {
  const auto index = static_cast<std::size_t>(scale_row * scale_.shape[1] + scale_col);
  if (scale_.dtype == DType::F8_E8M0) return e8m0_to_float(static_cast<uint8_t>(scale_.bytes[index]));
  return load<float>(scale_.bytes.data() + index * sizeof(float));
}

void QuantizedMatrix::dequantize_row(int64_t row, float* out) const {
  const auto* bytes = reinterpret_cast<const uint8_t*>(weight_.bytes.data());
  if (format_ == Format::Fp8BlockScaled) {
    const uint8_t* row_bytes = bytes + row * cols_;
    const int64_t scale_row = row / block_.rows;
    for (int64_t col_begin = 0; col_begin < cols_; col_begin += block_.cols) {
      const float scale = scale_at(scale_row, col_begin / block_.cols);
      const int64_t col_end = std::min(col_begin + block_.cols, cols_);
      for (int64_t col = col_begin; col < col_end; ++col) out[col] = e4m3fn_to_float(row_bytes[col]) * scale;
    }
    return;
  }
  const uint8_t* row_bytes = bytes + row * (cols_ / 2);
  const int64_t group_bytes = block_.cols / 2;
  for (int64_t group = 0; group < cols_ / block_.cols; ++group) {
    const float scale = scale_at(row, group);
    const uint8_t* packed = row_bytes + group * group_bytes;
    float* group_out = out + group * block_.cols;
    for (int64_t k = 0; k < group_bytes; ++k) {
      group_out[2 * k] = e2m1_to_float(packed[k] & 0xFu) * scale;
      group_out[2 * k + 1] = e2m1_to_float(packed[k] >> 4) * scale;
    }
  }
}

void QuantizedMatrix::dequantize_rows(int64_t row_begin, int64_t row_end, std::span<float> out) const {
  check_row_range(row_begin, row_end, out.size());
  for (int64_t row = row_begin; row < row_end; ++row) dequantize_row(row, out.data() + (row - row_begin) * cols_);
}

void QuantizedMatrix::dequantize_rows(int64_t row_begin, int64_t row_end, std::span<uint16_t> out_bf16) const {
  check_row_range(row_begin, row_end, out_bf16.size());
  std::vector<float> row_values(static_cast<std::size_t>(cols_));
  for (int64_t row = row_begin; row < row_end; ++row) {
    dequantize_row(row, row_values.data());
    uint16_t* row_out = out_bf16.data() + (row - row_begin) * cols_;
    for (int64_t col = 0; col < cols_; ++col) row_out[col] = float_to_bf16(row_values[col]);
  }
}

void convert_to_f32(const TensorView& tensor, std::span<float> out, std::string_view name) {
  const int64_t numel = checked_numel(tensor, name, "tensor");
  const auto expected_bytes = static_cast<uint64_t>(numel) * dtype_size(tensor.dtype);
  if (tensor.bytes.size() != expected_bytes)
    fail("tensor '", name, "': ", dtype_name(tensor.dtype), " ", shape_string(tensor.shape), " needs ", expected_bytes,
         " bytes, got ", tensor.bytes.size());
  if (out.size() < static_cast<uint64_t>(numel))
    fail("tensor '", name, "': output holds ", out.size(), " values, the tensor has ", numel);
  const std::byte* data = tensor.bytes.data();
  const auto count = static_cast<std::size_t>(numel);
  switch (tensor.dtype) {
    case DType::F32:
      if (count) std::memcpy(out.data(), data, count * sizeof(float));
      return;
    case DType::F16:
      for (std::size_t i = 0; i < count; ++i) out[i] = f16_to_float(load<uint16_t>(data + 2 * i));
      return;
    case DType::BF16:
      for (std::size_t i = 0; i < count; ++i) out[i] = bf16_to_float(load<uint16_t>(data + 2 * i));
      return;
    case DType::F8_E4M3:
      for (std::size_t i = 0; i < count; ++i) out[i] = e4m3fn_to_float(static_cast<uint8_t>(data[i]));
      return;
    case DType::F8_E5M2:
      for (std::size_t i = 0; i < count; ++i) out[i] = e5m2_to_float(static_cast<uint8_t>(data[i]));
      return;
    default:
      fail("tensor '", name, "': cannot convert ", dtype_name(tensor.dtype),
           " to f32 (expected F32, F16, BF16, F8_E4M3 or F8_E5M2)");
  }
}

}  // namespace deepinfer
