#include "core/dtype.h"

#include <array>

namespace deepinfer {
namespace {

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  std::size_t size;
};

constexpr std::array<DTypeInfo, 13> kDTypes = {{
    {DType::F64, "F64", 8},
    {DType::F32, "F32", 4},
    {DType::F16, "F16", 2},
    {DType::BF16, "BF16", 2},
    {DType::F8_E4M3, "F8_E4M3", 1},
    {DType::F8_E5M2, "F8_E5M2", 1},
    {DType::F8_E8M0, "F8_E8M0", 1},
    {DType::I64, "I64", 8},
    {DType::I32, "I32", 4},
    {DType::I16, "I16", 2},
    {DType::I8, "I8", 1},
    {DType::U8, "U8", 1},
    {DType::BOOL, "BOOL", 1},
}};

const DTypeInfo& info(DType dtype) {
  for (const auto& entry : kDTypes)
    if (entry.dtype == dtype) return entry;
  __builtin_unreachable();
}

}  // namespace

std::size_t dtype_size(DType dtype) { return info(dtype).size; }
std::string_view dtype_name(DType dtype) { return info(dtype).name; }

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& entry : kDTypes)
    if (entry.name == name) return entry.dtype;
  return std::nullopt;
}

}  // namespace deepinfer
