// rms_norm and rope, mirroring model/ops.cpp's rms_norm and model/rope.cpp's RopeTable::apply.
#include <cuda_runtime.h>

#include <cstdint>

#include "core/error.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/launch_gate.h"
#include "kernels/cuda/rms_norm.cuh"

namespace deepinfer::kernels::cuda {
namespace {

using namespace detail;

constexpr int kThreads = kRmsNormBlockThreads;
constexpr int kRowsPerWarpBlock = kThreads / kWarp;

// Each thread's sum_of_squares, then the fixed butterfly / block tree combines them.
__global__ void __launch_bounds__(kThreads)
    rms_norm_warp_kernel(const float* x, int64_t count, int64_t n, const float* weight, float eps, float* out) {
  await_previous_grid();
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerWarpBlock + static_cast<int>(threadIdx.x) / kWarp;
  if (row >= count) return;
  const float* xr = x + row * n;
  double sum = sum_of_squares(xr, n, lane, kWarp);
  sum = warp_sum(sum);
  normalize(xr, n, weight, eps, out + row * n, sum, lane, kWarp);
}

__global__ void __launch_bounds__(kThreads)
    rms_norm_block_kernel(const float* x, int64_t n, const float* weight, float eps, float* out) {
  await_previous_grid();
  __shared__ double scratch[kWarp];
  const int64_t row = blockIdx.x;
  const float* xr = x + row * n;
  double sum = sum_of_squares(xr, n, threadIdx.x, kThreads);
  sum = block_sum(sum, scratch);  // ends with a barrier: every read of x is done before out (maybe x) is written
  normalize(xr, n, weight, eps, out + row * n, sum, static_cast<int>(threadIdx.x), kThreads);
}

// Pair i of a rotated tail at `position`: both kernels below rotate through this one function.
__device__ __forceinline__ void rotate_pair(float* tail, int64_t i, int32_t position, const float* inv_freq,
                                            bool inverse) {
  const float angle = static_cast<float>(position) * inv_freq[i];
  const float cosine = cosf(angle);
  const float sine = inverse ? -sinf(angle) : sinf(angle);
  const float even = tail[2 * i];
  const float odd = tail[2 * i + 1];
  tail[2 * i] = even * cosine + (-odd) * sine;
  tail[2 * i + 1] = odd * cosine + even * sine;
}

// rms_norm_warp_kernel, then rope_kernel's rotation of the row's tail by the same warp: one
// launch where there were two (a head row of q, the K = V row, a pooled entry), the same
// operations on the same values. The lanes' normalised values are in `out` before the warp's
// barrier, which orders them for the lanes that rotate them.
__global__ void __launch_bounds__(kThreads)
    rms_norm_rope_kernel(float* x, int64_t count, int64_t heads, int64_t n, const float* weight, float eps,
                         int64_t rope_dims, const float* inv_freq, const int32_t* positions) {
  await_previous_grid();
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerWarpBlock + static_cast<int>(threadIdx.x) / kWarp;
  if (row >= count * heads) return;
  float* xr = x + row * n;
  double sum = sum_of_squares(xr, n, lane, kWarp);
  sum = warp_sum(sum);
  normalize(xr, n, weight, eps, xr, sum, lane, kWarp);
  __syncwarp();
  const int32_t position = positions[row / heads];
  for (int64_t i = lane; i < rope_dims / 2; i += kWarp) rotate_pair(xr + (n - rope_dims), i, position, inv_freq, false);
}

// One thread per rotated pair (t, h, i).
__global__ void rope_kernel(float* x, int64_t count, int64_t heads, int64_t head_dim, int64_t rope_dims,
                            const float* inv_freq, const int32_t* positions, bool inverse) {
  await_previous_grid();
  const int64_t pairs = rope_dims / 2;
  const int64_t total = count * heads * pairs;
  for (int64_t item = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; item < total;
       item += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t head, i, t, h;
    split_index(item, pairs, head, i);  // head = t * heads + h
    split_index(head, heads, t, h);
    rotate_pair(x + head * head_dim + (head_dim - rope_dims), i, positions[t], inv_freq, inverse);
  }
}

}  // namespace

void rms_norm(const float* x, int64_t count, int64_t n, const float* weight, float eps, float* out, Stream stream) {
  if (launches_skipped()) return;
  if (count < 0 || n < 0) fail("cuda::rms_norm: negative size (count ", count, ", n ", n, ")");
  if (count == 0 || n == 0) return;
  if (n <= kWarpRowLimit) {
    const int64_t blocks = (count + kRowsPerWarpBlock - 1) / kRowsPerWarpBlock;
    launch(rms_norm_warp_kernel, static_cast<unsigned>(blocks), kThreads, 0, native(stream), x, count, n, weight, eps,
           out);
  } else {
    if (count >= (int64_t{1} << 31)) fail("cuda::rms_norm: ", count, " rows, over 2^31");
    launch(rms_norm_block_kernel, static_cast<unsigned>(count), kThreads, 0, native(stream), x, n, weight, eps, out);
  }
  check_launch("cuda::rms_norm");
}

void rms_norm_rope(float* x, int64_t count, int64_t heads, int64_t head_dim, const float* weight, float eps,
                   int64_t rope_dims, const float* inv_freq, const int32_t* positions, Stream stream) {
  if (launches_skipped()) return;
  if (count < 0 || heads < 0 || head_dim < 0 || rope_dims < 0)
    fail("cuda::rms_norm_rope: negative size (count ", count, ", heads ", heads, ", head_dim ", head_dim,
         ", rope_dims ", rope_dims, ")");
  if (rope_dims % 2 != 0) fail("cuda::rms_norm_rope: odd rope_dims ", rope_dims);
  if (head_dim < rope_dims) fail("RoPE over ", rope_dims, " dims applied to a vector of ", head_dim);
  if (count * heads == 0 || head_dim == 0) return;
  if (head_dim > kWarpRowLimit) {  // the block kernel's rows: two launches
    rms_norm(x, count * heads, head_dim, weight, eps, x, stream);
    rope(x, count, heads, head_dim, rope_dims, inv_freq, positions, /*inverse=*/false, stream);
    return;
  }
  const int64_t blocks = (count * heads + kRowsPerWarpBlock - 1) / kRowsPerWarpBlock;
  launch(rms_norm_rope_kernel, static_cast<unsigned>(blocks), kThreads, 0, native(stream), x, count, heads, head_dim,
         weight, eps, rope_dims, inv_freq, positions);
  check_launch("cuda::rms_norm_rope");
}

void rope(float* x, int64_t count, int64_t heads, int64_t head_dim, int64_t rope_dims, const float* inv_freq,
          const int32_t* positions, bool inverse, Stream stream) {
  if (launches_skipped()) return;
  if (count < 0 || heads < 0 || head_dim < 0 || rope_dims < 0)
    fail("cuda::rope: negative size (count ", count, ", heads ", heads, ", head_dim ", head_dim, ", rope_dims ",
         rope_dims, ")");
  if (rope_dims % 2 != 0) fail("cuda::rope: odd rope_dims ", rope_dims);
  if (head_dim < rope_dims) fail("RoPE over ", rope_dims, " dims applied to a vector of ", head_dim);
  const int64_t total = count * heads * (rope_dims / 2);
  if (total == 0) return;
  launch(rope_kernel, grid_for(total, kThreads), kThreads, 0, native(stream), x, count, heads, head_dim, rope_dims,
         inv_freq, positions, inverse);
  check_launch("cuda::rope");
}

}  // namespace deepinfer::kernels::cuda
