// Row copies: the embedding lookup into every residual stream, gather_rows, and the streams'
// means (DSpark taps); the e4m3 NaN scan of weights at upload.
#include <cuda_runtime.h>

#include <cstdint>

#include "core/error.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/launch_gate.h"

namespace deepinfer::kernels::cuda {
namespace {

using namespace detail;

constexpr int kThreads = 256;

// One thread per (t, c), writing all copies; an id outside the table gives zeros.
template <WeightEncoding E>
__global__ void embed_kernel(const uint8_t* table, int64_t vocab, int64_t width, bool aligned, const int32_t* ids,
                             int64_t tokens, int64_t copies, float* streams) {
  await_previous_grid();
  const int64_t total = tokens * width;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t t, c;
    split_index(i, width, t, c);
    const int64_t id = ids[t];
    float value = 0.0f;
    if (id >= 0 && id < vocab) {
      const int64_t element = id * width + c;
      if constexpr (E == WeightEncoding::F32) {
        const uint8_t* p = table + element * 4;
        value = aligned ? *reinterpret_cast<const float*>(p) : __uint_as_float(load_u32_bytes(p));
      } else {
        const uint8_t* p = table + element * 2;
        value = bf16_value(aligned ? uint32_t{*reinterpret_cast<const uint16_t*>(p)} : load_u16_bytes(p));
      }
    }
    float* out = streams + t * copies * width + c;
    for (int64_t copy = 0; copy < copies; ++copy) out[copy * width] = value;
  }
}

// Sets *found when a byte of codes is an e4m3 NaN; 16 bytes a thread a step where aligned.
__global__ void e4m3_nan_kernel(const uint8_t* __restrict__ codes, int64_t count, int* __restrict__ found) {
  await_previous_grid();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t head = reinterpret_cast<uintptr_t>(codes) % 16 == 0 ? count / 16 : 0;
  bool nan = false;
  for (int64_t i = first; i < head; i += stride) {
    const uint4 v = reinterpret_cast<const uint4*>(codes)[i];
    for (const uint32_t w : {v.x, v.y, v.z, v.w}) nan |= (((w & 0x7F7F7F7Fu) + 0x01010101u) & 0x80808080u) != 0;
  }
  for (int64_t i = head * 16 + first; i < count; i += stride) nan |= (codes[i] & 0x7F) == 0x7F;
  if (nan) *found = 1;
}

__global__ void gather_rows_kernel(const float* __restrict__ in, const int64_t* __restrict__ rows, int64_t count,
                                   int64_t width, float* __restrict__ out) {
  await_previous_grid();
  const int64_t total = count * width;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t r, c;
    split_index(i, width, r, c);
    out[i] = in[rows[r] * width + c];
  }
}

__global__ void stream_means_kernel(const float* __restrict__ streams, int64_t rows, int64_t n, int64_t d, int64_t tap,
                                    int64_t taps, float* __restrict__ out) {
  await_previous_grid();
  const int64_t total = rows * d;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t r, e;
    split_index(i, d, r, e);
    float sum = 0.0f;
    for (int64_t k = 0; k < n; ++k) sum = __fadd_rn(sum, streams[(r * n + k) * d + e]);
    out[(r * taps + tap) * d + e] = __fdiv_rn(sum, static_cast<float>(n));
  }
}

__global__ void resolve_token_ids_kernel(const int32_t* staged, const int32_t* sources,
                                         const int32_t* const* drawn_address, int64_t tokens, int64_t vocab,
                                         int32_t* ids) {
  await_previous_grid();
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < tokens;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int32_t source = sources[t];
    if (source < 0) {
      ids[t] = staged[t];
      continue;
    }
    const int32_t id = (*drawn_address)[source];
    ids[t] = id >= 0 && id < vocab ? id : 0;
  }
}

__global__ void fill_kernel(int32_t* out, int64_t count, int32_t value, bool ascending) {
  await_previous_grid();
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = ascending ? static_cast<int32_t>(i) : value;
}

}  // namespace

void copy_floats(float* dst, const float* src, int64_t count, Stream stream) {
  if (launches_skipped()) return;
  if (count < 0) fail("cuda::copy_floats: ", count, " values");
  if (count == 0) return;
  const cudaError_t status =
      cudaMemcpyAsync(dst, src, static_cast<std::size_t>(count) * 4, cudaMemcpyDeviceToDevice, native(stream));
  if (status != cudaSuccess) fail("cuda::copy_floats: ", cudaGetErrorString(status));
}

void fill(int32_t* out, int64_t count, int32_t value, Stream stream) {
  if (launches_skipped()) return;
  if (count < 0) fail("cuda::fill: ", count, " values");
  if (count == 0) return;
  launch(fill_kernel, grid_for(count, kThreads), kThreads, 0, native(stream), out, count, value, false);
  check_launch("cuda::fill");
}

void iota(int32_t* out, int64_t count, Stream stream) {
  if (launches_skipped()) return;
  if (count < 0 || count > (int64_t{1} << 31)) fail("cuda::iota: ", count, " values");
  if (count == 0) return;
  launch(fill_kernel, grid_for(count, kThreads), kThreads, 0, native(stream), out, count, 0, true);
  check_launch("cuda::iota");
}

void embed(const WeightMatrix& table, const int32_t* ids, int64_t tokens, int64_t copies, float* streams,
           Stream stream) {
  if (launches_skipped()) return;
  if (tokens < 0 || copies < 0) fail("cuda::embed: negative size (tokens ", tokens, ", copies ", copies, ")");
  if (table.rows < 0 || table.cols < 0) fail("cuda::embed: table has negative shape [", table.rows, ", ", table.cols, "]");
  if (table.encoding != WeightEncoding::F32 && table.encoding != WeightEncoding::BF16)
    fail("cuda::embed: the embedding table must be F32 or BF16, not encoding ", static_cast<int>(table.encoding));
  if (tokens == 0 || copies == 0 || table.cols == 0) return;
  if (table.rows > 0 && table.data == nullptr) fail("cuda::embed: table has no data");
  const auto* bytes = static_cast<const uint8_t*>(table.data);
  const auto address = reinterpret_cast<uintptr_t>(table.data);
  const unsigned blocks = grid_for(tokens * table.cols, kThreads);
  if (table.encoding == WeightEncoding::F32)
    launch(embed_kernel<WeightEncoding::F32>, blocks, kThreads, 0, native(stream), bytes, table.rows, table.cols,
           address % 4 == 0, ids, tokens, copies, streams);
  else
    launch(embed_kernel<WeightEncoding::BF16>, blocks, kThreads, 0, native(stream), bytes, table.rows, table.cols,
           address % 2 == 0, ids, tokens, copies, streams);
  check_launch("cuda::embed");
}

void resolve_token_ids(const int32_t* staged, const int32_t* sources, const int32_t* const* drawn_address,
                       int64_t tokens, int64_t vocab, int32_t* ids, Stream stream) {
  if (launches_skipped()) return;
  if (tokens < 0) fail("cuda::resolve_token_ids: ", tokens, " tokens");
  if (tokens == 0) return;
  launch(resolve_token_ids_kernel, grid_for(tokens, kThreads), kThreads, 0, native(stream), staged, sources,
         drawn_address, tokens, vocab, ids);
  check_launch("cuda::resolve_token_ids");
}

void stream_means(const float* streams, int64_t rows, int64_t n, int64_t d, int64_t tap, int64_t taps, float* out,
                  Stream stream) {
  if (launches_skipped()) return;
  if (rows < 0 || n <= 0 || d < 0 || tap < 0 || tap >= taps)
    fail("cuda::stream_means: ", rows, " rows of ", n, " x ", d, ", tap ", tap, " of ", taps);
  if (rows * d == 0) return;
  launch(stream_means_kernel, grid_for(rows * d, kThreads), kThreads, 0, native(stream), streams, rows, n, d, tap, taps,
         out);
  check_launch("cuda::stream_means");
}

void gather_rows(const float* in, const int64_t* rows, int64_t count, int64_t width, float* out, Stream stream) {
  if (launches_skipped()) return;
  if (count < 0 || width < 0) fail("cuda::gather_rows: negative size (count ", count, ", width ", width, ")");
  if (count * width == 0) return;
  launch(gather_rows_kernel, grid_for(count * width, kThreads), kThreads, 0, native(stream), in, rows, count, width,
         out);
  check_launch("cuda::gather_rows");
}

bool has_e4m3_nan(const uint8_t* codes, int64_t count, Stream stream) {
  if (count < 0) fail("cuda::has_e4m3_nan: negative count ", count);
  if (count == 0) return false;
  const auto check = [](cudaError_t status, const char* what) {
    if (status != cudaSuccess) fail("cuda::has_e4m3_nan: ", what, ": ", cudaGetErrorString(status));
  };
  int* found = nullptr;
  check(cudaMalloc(&found, sizeof(int)), "cudaMalloc");
  int host = 0;
  try {
    check(cudaMemsetAsync(found, 0, sizeof(int), native(stream)), "cudaMemsetAsync");
    launch(e4m3_nan_kernel, grid_for(count / 16 + 1, kThreads), kThreads, 0, native(stream), codes, count, found);
    check_launch("cuda::has_e4m3_nan");
    check(cudaMemcpyAsync(&host, found, sizeof(int), cudaMemcpyDeviceToHost, native(stream)), "cudaMemcpyAsync");
    check(cudaStreamSynchronize(native(stream)), "cudaStreamSynchronize");
  } catch (...) {
    cudaFree(found);
    throw;
  }
  check(cudaFree(found), "cudaFree");
  return host != 0;
}

}  // namespace deepinfer::kernels::cuda
