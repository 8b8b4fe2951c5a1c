#pragma once
// What both index-score kernels read (indexer.cu's SIMT kernel, indexer_mma.cu's tensor-core
// one): stored key rows, a row's visible entries, and model::dot's summation order.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/attention_keys.cuh"
#include "kernels/cuda/attention_kernels.h"
#include "kernels/cuda/cuda_common.cuh"

namespace deepinfer::kernels::cuda::detail {

struct StoredRowLayout {
  RowFormat format = RowFormat::F32;
  bool quantized = false;  // false: f32 values (F32, or a width that does not block)
  int64_t code_bytes = 0;  // where the scale bytes start
  int64_t scale_bytes = 0;
};

inline StoredRowLayout stored_row_layout(RowFormat format, int64_t width) {
  const int64_t block = format == RowFormat::Fp4E4m3x16 ? 16 : 32;
  StoredRowLayout layout;
  layout.format = format;
  layout.quantized = format != RowFormat::F32 && width > 0 && width % block == 0;
  if (!layout.quantized) {
    layout.code_bytes = width * 4;
  } else {
    layout.code_bytes = format == RowFormat::Fp8Ue8m0x32 ? width : width / 2;
    layout.scale_bytes = width / block;
  }
  return layout;
}

// Value i of a stored row, as model::dequantize_vector gives it (one product, same bits).
__device__ __forceinline__ float stored_value(const uint8_t* row, int32_t i, const StoredRowLayout& layout) {
  if (!layout.quantized) return __uint_as_float(load_u32_bytes(row + 4 * static_cast<int64_t>(i)));
  const uint8_t* scales = row + layout.code_bytes;
  if (layout.format == RowFormat::Fp8Ue8m0x32) return __fmul_rn(e4m3_value(row[i]), e8m0_value(scales[i / 32]));
  const uint32_t codes = row[i / 2];
  const float value = e2m1_value(i % 2 == 0 ? codes : codes >> 4);
  if (layout.format == RowFormat::Fp4E4m3x16) return __fmul_rn(value, e4m3_value(scales[i / 16]));
  return __fmul_rn(value, e8m0_value(scales[i / 32]));
}

// (p + 1) / ratio for row `row` of its segment, never past the scores' row stride.
__device__ __forceinline__ int32_t visible_entries(const SegmentRows* segments, const int32_t* row_segment,
                                                   int64_t row, int32_t ratio, int32_t max_visible) {
  const int32_t s = row_segment[row];
  if (s < 0) return 0;  // a padding row of a fixed-size launch sees nothing
  const SegmentRows& segment = segments[s];
  const int64_t position = segment.first_position + (row - segment.row_begin);
  const int64_t visible = (position + 1) / ratio;
  return static_cast<int32_t>(visible < max_visible ? visible : max_visible);
}

// model::dot's order over a(i) * b(i): 32 lane sums, lane L taking elements L mod 32 by FMA; the
// lanes folded as the AVX2 branch folds them; then the n % 32 tail by FMA. Plain adds never
// contract.
template <class A, class B>
__device__ __forceinline__ float dot_as_cpu(A a, B b, int32_t n) {
  const int32_t vector_end = n / 32 * 32;
  float lanes[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    float sums[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int32_t i = 0; i < vector_end; i += 32) {
#pragma unroll
      for (int q = 0; q < 4; ++q) sums[q] = fmaf(a(i + 8 * q + j), b(i + 8 * q + j), sums[q]);
    }
    lanes[j] = (sums[0] + sums[1]) + (sums[2] + sums[3]);
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) lanes[j] += lanes[j + 4];
#pragma unroll
  for (int j = 0; j < 2; ++j) lanes[j] += lanes[j + 2];
  float sum = lanes[0] + lanes[1];
  for (int32_t i = vector_end; i < n; ++i) sum = fmaf(a(i), b(i), sum);
  return sum;
}

}  // namespace deepinfer::kernels::cuda::detail
