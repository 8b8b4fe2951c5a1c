// Portable linear kernel: each thread decodes one weight row at a time into f32 and takes its
// dot product with every token, left to right. Correct for every encoding on any CPU; the AVX2
// path is the fast one.
#include <cstring>
#include <vector>

#include "core/float_formats.h"
#include "kernels/cpu/linear_cpu.h"
#include "kernels/cpu/weight_scales.h"

namespace deepinfer::kernels {

void decode_row(const WeightMatrix& w, int64_t row, float* out) {
  using cpu::scale_at;
  using cpu::scale_row_start;
  const auto* bytes = static_cast<const uint8_t*>(w.data);
  switch (w.encoding) {
    case WeightEncoding::F32:
      std::memcpy(out, bytes + row * w.cols * 4, static_cast<std::size_t>(w.cols) * 4);
      return;
    case WeightEncoding::BF16:
      for (int64_t c = 0; c < w.cols; ++c) {
        uint16_t bits;
        std::memcpy(&bits, bytes + (row * w.cols + c) * 2, 2);
        out[c] = bf16_to_float(bits);
      }
      return;
    case WeightEncoding::FP8_E4M3: {
      const int64_t first_scale = scale_row_start(w, row);
      for (int64_t c = 0; c < w.cols; ++c)
        out[c] = e4m3fn_to_float(bytes[row * w.cols + c]) * scale_at(w, first_scale + c / w.block_cols);
      return;
    }
    case WeightEncoding::FP4_E2M1: {
      const int64_t first_scale = scale_row_start(w, row);
      for (int64_t c = 0; c < w.cols; ++c) {
        const uint8_t byte = bytes[row * (w.cols / 2) + c / 2];
        const uint8_t nibble = (c % 2 == 0) ? (byte & 0x0f) : (byte >> 4);
        out[c] = e2m1_to_float(nibble) * scale_at(w, first_scale + c / w.block_cols);
      }
      return;
    }
  }
}

}  // namespace deepinfer::kernels

namespace deepinfer::kernels::cpu {

void linear_portable(const float* x, int64_t tokens, const WeightMatrix& weight, float* y, ThreadPool& pool) {
  pool.parallel_for(weight.rows, [&](int64_t first_row, int64_t end_row) {
    thread_local std::vector<float> row_values;  // grows once per thread, never per call
    if (row_values.size() < static_cast<std::size_t>(weight.cols)) row_values.resize(static_cast<std::size_t>(weight.cols));
    for (int64_t r = first_row; r < end_row; ++r) {
      decode_row(weight, r, row_values.data());
      for (int64_t t = 0; t < tokens; ++t) {
        const float* xt = x + t * weight.cols;
        float sum = 0.0f;
        for (int64_t c = 0; c < weight.cols; ++c) sum += xt[c] * row_values[static_cast<std::size_t>(c)];
        y[t * weight.rows + r] = sum;
      }
    }
  });
}

}  // namespace deepinfer::kernels::cpu
