// Portable linear kernel: decodes one weight row at a time into f32 and takes its dot product
// with every token. Correct for every encoding; the vectorised, threaded path replaces its loops.
#include <cstring>
#include <vector>

#include "core/float_formats.h"
#include "kernels/kernels.h"

namespace deepinfer::kernels {
namespace {

float scale_at(const WeightMatrix& w, int64_t index) {
  switch (w.scale_encoding) {
    case ScaleEncoding::None: return 1.0f;
    case ScaleEncoding::E8M0: return e8m0_to_float(static_cast<const uint8_t*>(w.scales)[index]);
    case ScaleEncoding::F32: {
      float value;
      std::memcpy(&value, static_cast<const char*>(w.scales) + index * sizeof(float), sizeof(float));
      return value;
    }
  }
  return 1.0f;
}

void decode_row(const WeightMatrix& w, int64_t row, float* out) {
  const auto* bytes = static_cast<const uint8_t*>(w.data);
  switch (w.encoding) {
    case WeightEncoding::F32:
      std::memcpy(out, bytes + row * w.cols * sizeof(float), w.cols * sizeof(float));
      return;
    case WeightEncoding::BF16:
      for (int64_t c = 0; c < w.cols; ++c) {
        uint16_t bits;
        std::memcpy(&bits, bytes + (row * w.cols + c) * 2, 2);
        out[c] = bf16_to_float(bits);
      }
      return;
    case WeightEncoding::FP8_E4M3: {
      const int64_t scale_cols = (w.cols + w.block_cols - 1) / w.block_cols;
      const int64_t scale_row = row / w.block_rows;
      for (int64_t c = 0; c < w.cols; ++c)
        out[c] = e4m3fn_to_float(bytes[row * w.cols + c]) * scale_at(w, scale_row * scale_cols + c / w.block_cols);
      return;
    }
    case WeightEncoding::FP4_E2M1: {
      const int64_t groups = w.cols / w.block_cols;
      for (int64_t c = 0; c < w.cols; ++c) {
        const uint8_t byte = bytes[row * (w.cols / 2) + c / 2];
        const uint8_t nibble = (c % 2 == 0) ? (byte & 0x0f) : (byte >> 4);
        out[c] = e2m1_to_float(nibble) * scale_at(w, row * groups + c / w.block_cols);
      }
      return;
    }
  }
}

}  // namespace

void linear(const float* x, int64_t tokens, const WeightMatrix& weight, float* y) {
  std::vector<float> row(static_cast<std::size_t>(weight.cols));
  for (int64_t r = 0; r < weight.rows; ++r) {
    decode_row(weight, r, row.data());
    for (int64_t t = 0; t < tokens; ++t) {
      const float* xt = x + t * weight.cols;
      float sum = 0.0f;
      for (int64_t c = 0; c < weight.cols; ++c) sum += xt[c] * row[c];
      y[t * weight.rows + r] = sum;
    }
  }
}

}  // namespace deepinfer::kernels
