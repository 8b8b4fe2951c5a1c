#pragma once
// Where a weight element's scale lives, shared by every CPU linear path.
#include <cstdint>
#include <cstring>

#include "core/float_formats.h"
#include "kernels/kernels.h"

namespace deepinfer::kernels::cpu {

inline float scale_at(const WeightMatrix& w, int64_t index) {
  switch (w.scale_encoding) {
    case ScaleEncoding::None: return 1.0f;
    case ScaleEncoding::E8M0: return e8m0_to_float(static_cast<const uint8_t*>(w.scales)[index]);
    case ScaleEncoding::F32: {
      float value;
      std::memcpy(&value, static_cast<const char*>(w.scales) + index * static_cast<int64_t>(sizeof(float)), sizeof(float));
      return value;
    }
  }
  return 1.0f;
}

// Scales in one row of scale blocks: FP8 tiles cover block_rows rows each; FP4 has one row of
// groups per weight row.
inline int64_t scale_columns(const WeightMatrix& w) { return (w.cols + w.block_cols - 1) / w.block_cols; }

// Index of the first scale of weight row `row` in w.scales.
inline int64_t scale_row_start(const WeightMatrix& w, int64_t row) {
  const int64_t scale_row = w.encoding == WeightEncoding::FP8_E4M3 ? row / w.block_rows : row;
  return scale_row * scale_columns(w);
}

}  // namespace deepinfer::kernels::cpu
