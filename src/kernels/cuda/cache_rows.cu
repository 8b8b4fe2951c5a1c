// store_rows and fake_quantize_rows: cache rows quantised on the device byte for byte as
// model::quantize_vector stores them (cache_codes.cuh), or copied as f32 when the width does not
// block.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "kernels/cuda/attention_kernels.h"
#include "kernels/cuda/launch_gate.h"
#include "kernels/cuda/cache_codes.cuh"
#include "kernels/cuda/cuda_common.cuh"

namespace deepinfer::kernels::cuda {
namespace {

using namespace detail;

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / kWarp;

void check_format(RowFormat format, const char* what) {
  const auto value = static_cast<int32_t>(format);
  if (value < static_cast<int32_t>(RowFormat::F32) || value > static_cast<int32_t>(RowFormat::Fp4Ue8m0x32))
    fail(what, ": unknown row format ", value);
}

// One warp per 32 values of a row (rows are a few hundred values, and the chunks are independent
// scale blocks: a warp per row ran its chunks one after another, 16 us a call at one token). A
// null destination: the caller keeps that row nowhere (e.g. the window ring keeps only the last
// rows).
__global__ void __launch_bounds__(kThreads) store_quantized_rows_kernel(const float* rows, int64_t count, int64_t width,
                                                                        RowFormat format,
                                                                        std::byte* const* destinations) {
  await_previous_grid();
  const int64_t chunks = (width + kWarp - 1) / kWarp;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  for (int64_t item = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp; item < count * chunks;
       item += warps) {
    int64_t row, chunk;
    split_index(item, chunks, row, chunk);
    std::byte* destination = destinations[row];
    if (destination != nullptr)
      quantize_chunk_warp(format, rows + row * width, width, chunk * kWarp, reinterpret_cast<uint8_t*>(destination));
  }
}

// One thread per value; a destination need not be 4-byte aligned (it is wherever the caller's
// block layout puts the row).
__global__ void __launch_bounds__(kThreads) store_f32_rows_kernel(const float* rows, int64_t count, int64_t width,
                                                                  std::byte* const* destinations) {
  await_previous_grid();
  const int64_t total = count * width;
  for (int64_t item = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; item < total;
       item += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t row, index;
    split_index(item, width, row, index);
    std::byte* destination = destinations[row];
    if (destination == nullptr) continue;
    const float value = rows[item];
    std::byte* at = destination + index * 4;
    if ((reinterpret_cast<uintptr_t>(at) & 3u) == 0) {
      *reinterpret_cast<float*>(at) = value;
    } else {
      const uint32_t bits = __float_as_uint(value);
      for (int b = 0; b < 4; ++b) at[b] = static_cast<std::byte>((bits >> (8 * b)) & 0xffu);
    }
  }
}

__global__ void __launch_bounds__(kThreads)
    fake_quantize_rows_kernel(float* x, int64_t count, int64_t width, RowFormat format) {
  await_previous_grid();
  const int64_t chunks = (width + kWarp - 1) / kWarp;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  for (int64_t item = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp; item < count * chunks;
       item += warps) {
    int64_t row, chunk;
    split_index(item, chunks, row, chunk);
    fake_quantize_chunk_warp(format, x + row * width, width, chunk * kWarp);
  }
}

}  // namespace

int64_t stored_row_bytes(RowFormat format, int64_t width) {
  check_format(format, "cuda::stored_row_bytes");
  if (width < 0) fail("cuda::stored_row_bytes: negative width ", width);
  if (!quantizes(format, width)) return width * static_cast<int64_t>(sizeof(float));
  return code_bytes(format, width) + width / cache_block(format);
}

void store_rows(const float* rows, int64_t count, int64_t width, RowFormat format, std::byte* const* destinations,
                Stream stream) {
  if (launches_skipped()) return;
  check_format(format, "cuda::store_rows");
  if (count < 0 || width < 0) fail("cuda::store_rows: negative size (count ", count, ", width ", width, ")");
  if (count == 0 || width == 0) return;
  if (quantizes(format, width)) {
    launch(store_quantized_rows_kernel, grid_for(count * ((width + kWarp - 1) / kWarp), kWarpsPerBlock), kThreads, 0,
           native(stream), rows, count, width, format, destinations);
  } else {
    launch(store_f32_rows_kernel, grid_for(count * width, kThreads), kThreads, 0, native(stream), rows, count, width,
           destinations);
  }
  check_launch("cuda::store_rows");
}

void fake_quantize_rows(float* x, int64_t count, int64_t width, RowFormat format, Stream stream) {
  if (launches_skipped()) return;
  check_format(format, "cuda::fake_quantize_rows");
  if (count < 0 || width < 0) fail("cuda::fake_quantize_rows: negative size (count ", count, ", width ", width, ")");
  if (count == 0 || !quantizes(format, width)) return;
  launch(fake_quantize_rows_kernel, grid_for(count * ((width + kWarp - 1) / kWarp), kWarpsPerBlock), kThreads, 0,
         native(stream), x, count, width, format);
  check_launch("cuda::fake_quantize_rows");
}

}  // namespace deepinfer::kernels::cuda
