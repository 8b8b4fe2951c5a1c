#pragma once
// A growing list of equal-width cache rows kept in one of the V4.1 cache formats (fake_quant.h):
// FP8 or packed FP4 codes plus one scale byte per block, or plain f32 when the format is F32 or
// the width does not block (then the reference leaves the values unquantised too). Reading a
// row gives back exactly the reference's fake-quantised values.
#include <cstdint>
#include <span>
#include <vector>

#include "model/fake_quant.h"

namespace deepinfer::model {

class QuantizedRows {
 public:
  QuantizedRows() = default;
  QuantizedRows(CacheFormat format, int64_t width);

  int64_t width() const { return width_; }
  int64_t size() const { return rows_; }
  bool quantized() const { return quantized_; }
  // Bytes held per row (codes + scales, or 4 * width).
  int64_t row_bytes() const { return code_bytes_ + scale_bytes_; }

  void append(const float* row);
  // Dequantised row `index` into out[0, width).
  void read(int64_t index, float* out) const;
  // Drops the first `count` rows (sliding windows).
  void erase_front(int64_t count);

  // The rows exactly as stored, size() * row_bytes() bytes (snapshots: no re-quantisation).
  std::span<const uint8_t> stored() const;
  // Replaces the rows with `rows` rows of stored bytes (as stored() gave them).
  void restore_stored(int64_t rows, std::span<const uint8_t> bytes);

 private:
  CacheFormat format_ = CacheFormat::F32;
  int64_t width_ = 0;
  bool quantized_ = false;
  int64_t code_bytes_ = 0;
  int64_t scale_bytes_ = 0;
  int64_t rows_ = 0;
  std::vector<uint8_t> bytes_;  // quantised: per row, codes then scales
  std::vector<float> floats_;   // unquantised rows
};

}  // namespace deepinfer::model
