#include "model/quantized_rows.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace deepinfer::model {

QuantizedRows::QuantizedRows(CacheFormat format, int64_t width)
    : format_(format), width_(width), quantized_(quantizes(format, width)) {
  if (quantized_) {
    code_bytes_ = code_bytes(format, width);
    scale_bytes_ = width / cache_block(format);
  } else {
    code_bytes_ = width * static_cast<int64_t>(sizeof(float));
  }
}

void QuantizedRows::append(const float* row) {
  if (!quantized_) {
    floats_.insert(floats_.end(), row, row + width_);
  } else {
    const std::size_t at = bytes_.size();
    bytes_.resize(at + static_cast<std::size_t>(row_bytes()));
    quantize_vector(format_, row, width_, bytes_.data() + at, bytes_.data() + at + code_bytes_);
  }
  ++rows_;
}

void QuantizedRows::read(int64_t index, float* out) const {
  if (index < 0 || index >= rows_) fail("cache row ", index, " outside ", rows_, " rows");
  if (!quantized_) {
    std::copy_n(floats_.data() + index * width_, width_, out);
    return;
  }
  const uint8_t* row = bytes_.data() + index * row_bytes();
  dequantize_vector(format_, row, row + code_bytes_, width_, out);
}

void QuantizedRows::erase_front(int64_t count) {
  count = std::min(count, rows_);
  if (count <= 0) return;
  if (!quantized_) floats_.erase(floats_.begin(), floats_.begin() + count * width_);
  else bytes_.erase(bytes_.begin(), bytes_.begin() + count * row_bytes());
  rows_ -= count;
}

std::span<const uint8_t> QuantizedRows::stored() const {
  if (quantized_) return bytes_;
  return {reinterpret_cast<const uint8_t*>(floats_.data()), floats_.size() * sizeof(float)};
}

void QuantizedRows::restore_stored(int64_t rows, std::span<const uint8_t> bytes) {
  if (rows < 0 || static_cast<int64_t>(bytes.size()) != rows * row_bytes())
    fail("cache rows: ", bytes.size(), " bytes do not hold ", rows, " rows of ", row_bytes());
  if (quantized_) {
    bytes_.assign(bytes.begin(), bytes.end());
  } else {
    floats_.resize(static_cast<std::size_t>(rows * width_));
    if (!bytes.empty()) std::memcpy(floats_.data(), bytes.data(), bytes.size());
  }
  rows_ = rows;
}

}  // namespace deepinfer::model
