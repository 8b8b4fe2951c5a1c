#include "model/weights.h"

#include <cstring>

#include "core/error.h"
#include "core/float_formats.h"
#include "io/checkpoint_match.h"
#include "io/dequant.h"

namespace deepinfer::model {
namespace {

constexpr std::string_view kWeightSuffix = ".weight";

std::string scale_name(const std::string& weight_name) {
  if (!weight_name.ends_with(kWeightSuffix)) return weight_name + ".scale";
  return weight_name.substr(0, weight_name.size() - kWeightSuffix.size()) + ".scale";
}

kernels::ScaleEncoding scale_encoding(const TensorView& scale, const std::string& name) {
  if (scale.dtype == DType::F8_E8M0) return kernels::ScaleEncoding::E8M0;
  if (scale.dtype == DType::F32) return kernels::ScaleEncoding::F32;
  fail(name, ": scale dtype ", dtype_name(scale.dtype), " (expected F8_E8M0 or F32)");
}

}  // namespace

Weights Weights::open(const std::string& dir, const ModelConfig& config) {
  Weights weights(Checkpoint::open(dir));
  weights.quantization_ = config.quantization;
  const CheckpointMatch match = match_checkpoint(config, weights.checkpoint_);
  if (!match.complete()) {
    std::string problems;
    for (const auto& missing : match.missing) problems += "\n  missing: " + missing;
    for (const auto& bad : match.mismatched) problems += "\n  mismatched: " + bad;
    fail("checkpoint ", dir, " does not fit its config.json:", problems);
  }
  for (const auto& tensor : weights.checkpoint_.tensors()) {
    const auto canonical = canonical_tensor_name(tensor.info->name);
    if (!canonical) continue;  // reported as unexpected by match_checkpoint; never read
    if (!canonical->is_fused()) {
      weights.entries_.emplace(canonical->name, Entry{tensor.info->name, std::nullopt});
      continue;
    }
    const int64_t experts = tensor.info->shape.empty() ? 0 : tensor.info->shape[0];
    for (const auto& part : canonical->fused_parts)
      for (int64_t e = 0; e < experts; ++e)
        weights.entries_.emplace(expert_part_name(part, e),
                                 Entry{tensor.info->name, ExpertSlice{e, part.part, part.parts}});
  }
  return weights;
}

const Weights::Entry& Weights::entry(const std::string& canonical) const {
  const auto found = entries_.find(canonical);
  if (found == entries_.end()) fail("checkpoint ", checkpoint_.path(), " has no tensor ", canonical);
  return found->second;
}

TensorView Weights::view(const std::string& canonical) const {
  const Entry& stored = entry(canonical);
  TensorView view = checkpoint_.view(stored.stored_name);
  if (!stored.slice) return view;
  // Expert e, row block `part` of a fused [experts, parts * rows, cols] stack.
  if (view.shape.size() != 3 || view.shape[1] % stored.slice->parts != 0)
    fail(stored.stored_name, ": fused expert stack of shape ", shape_string(view.shape));
  const int64_t rows = view.shape[1] / stored.slice->parts;
  const int64_t cols = view.shape[2];
  const std::size_t element = dtype_size(view.dtype);
  const std::size_t offset = static_cast<std::size_t>((stored.slice->expert * view.shape[1] + stored.slice->part * rows) * cols) * element;
  view.bytes = view.bytes.subspan(offset, static_cast<std::size_t>(rows * cols) * element);
  view.shape = {rows, cols};
  return view;
}

kernels::WeightMatrix Weights::matrix(const std::string& canonical) const {
  const TensorView weight = view(canonical);
  if (weight.shape.size() != 2) fail(canonical, ": expected a matrix, got shape ", shape_string(weight.shape));
  kernels::WeightMatrix matrix;
  matrix.rows = weight.shape[0];
  matrix.cols = weight.shape[1];
  matrix.data = weight.bytes.data();
  switch (weight.dtype) {
    case DType::F32: matrix.encoding = kernels::WeightEncoding::F32; return matrix;
    case DType::BF16: matrix.encoding = kernels::WeightEncoding::BF16; return matrix;
    case DType::F8_E4M3: {
      const std::string scale_key = scale_name(canonical);
      const TensorView scale = view(scale_key);
      const BlockShape block{quantization_.block_rows > 0 ? quantization_.block_rows : 128,
                             quantization_.block_cols > 0 ? quantization_.block_cols : 128};
      // Validates dtypes and the scale grid (throws naming the tensor).
      (void)QuantizedMatrix::fp8_block_scaled(weight, scale, block, canonical);
      matrix.encoding = kernels::WeightEncoding::FP8_E4M3;
      matrix.scale_encoding = scale_encoding(scale, scale_key);
      matrix.scales = scale.bytes.data();
      matrix.block_rows = block.rows;
      matrix.block_cols = block.cols;
      return matrix;
    }
    case DType::I8:
    case DType::U8: {
      const std::string scale_key = scale_name(canonical);
      const TensorView scale = view(scale_key);
      constexpr int64_t kGroup = 32;
      (void)QuantizedMatrix::fp4_group_scaled(weight, scale, canonical, kGroup);
      matrix.encoding = kernels::WeightEncoding::FP4_E2M1;
      matrix.cols = weight.shape[1] * 2;
      matrix.scale_encoding = scale_encoding(scale, scale_key);
      matrix.scales = scale.bytes.data();
      matrix.block_rows = 1;
      matrix.block_cols = kGroup;
      return matrix;
    }
    default: fail(canonical, ": dtype ", dtype_name(weight.dtype), " is not a weight encoding deepinfer computes with");
  }
}

kernels::WeightMatrix Weights::matrix_rows(const std::string& canonical, int64_t row_begin, int64_t rows) const {
  kernels::WeightMatrix whole = matrix(canonical);
  if (row_begin < 0 || rows <= 0 || row_begin + rows > whole.rows)
    fail(canonical, ": rows [", row_begin, ", ", row_begin + rows, ") outside ", whole.rows);
  kernels::WeightMatrix part = whole;
  part.rows = rows;
  const auto* data = static_cast<const std::byte*>(whole.data);
  switch (whole.encoding) {
    case kernels::WeightEncoding::F32: part.data = data + row_begin * whole.cols * 4; break;
    case kernels::WeightEncoding::BF16: part.data = data + row_begin * whole.cols * 2; break;
    case kernels::WeightEncoding::FP4_E2M1: {
      part.data = data + row_begin * whole.cols / 2;
      const std::size_t scale_bytes = whole.scale_encoding == kernels::ScaleEncoding::F32 ? 4 : 1;
      part.scales = static_cast<const std::byte*>(whole.scales) + row_begin * (whole.cols / whole.block_cols) * scale_bytes;
      break;
    }
    case kernels::WeightEncoding::FP8_E4M3: {
      // The kernel finds a row's scale row as row / block_rows, so the slice must start a tile or
      // lie inside one tile.
      const int64_t first_tile = row_begin / whole.block_rows;
      const int64_t last_tile = (row_begin + rows - 1) / whole.block_rows;
      if (row_begin % whole.block_rows != 0 && first_tile != last_tile)
        fail(canonical, ": rows [", row_begin, ", ", row_begin + rows, ") straddle a ", whole.block_rows,
             "-row FP8 scale tile");
      const int64_t scale_cols = (whole.cols + whole.block_cols - 1) / whole.block_cols;
      const std::size_t scale_bytes = whole.scale_encoding == kernels::ScaleEncoding::F32 ? 4 : 1;
      part.data = data + row_begin * whole.cols;
      part.scales = static_cast<const std::byte*>(whole.scales) + first_tile * scale_cols * scale_bytes;
      break;
    }
  }
  return part;
}

std::vector<float> Weights::floats(const std::string& canonical) const {
  const TensorView tensor = view(canonical);
  std::vector<float> out(static_cast<std::size_t>(tensor.numel()));
  convert_to_f32(tensor, out, canonical);
  return out;
}

std::vector<int32_t> Weights::integers(const std::string& canonical) const {
  const TensorView tensor = view(canonical);
  std::vector<int32_t> out(static_cast<std::size_t>(tensor.numel()));
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (tensor.dtype == DType::I64) {
      int64_t value;
      std::memcpy(&value, tensor.bytes.data() + i * 8, 8);
      out[i] = static_cast<int32_t>(value);
    } else if (tensor.dtype == DType::I32) {
      std::memcpy(&out[i], tensor.bytes.data() + i * 4, 4);
    } else {
      fail(canonical, ": dtype ", dtype_name(tensor.dtype), ", expected I64 or I32");
    }
  }
  return out;
}

}  // namespace deepinfer::model
