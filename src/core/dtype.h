#pragma once
// Element types of checkpoint tensors, named as safetensors names them.
#include <cstddef>
#include <optional>
#include <string_view>

namespace deepinfer {

enum class DType {
  F64,
  F32,
  F16,
  BF16,
  F8_E4M3,
  F8_E5M2,
  F8_E8M0,  // power-of-two scale byte: 2^(b-127), 255 = NaN
  I64,
  I32,
  I16,
  I8,  // also carries packed FP4 e2m1 (two per byte, low nibble first) in DeepSeek checkpoints
  U8,
  BOOL,
};

// Bytes per stored element.
std::size_t dtype_size(DType dtype);
std::string_view dtype_name(DType dtype);
// The safetensors spelling ("F32", "F8_E4M3", ...); nullopt for anything else.
std::optional<DType> dtype_from_name(std::string_view name);

}  // namespace deepinfer
