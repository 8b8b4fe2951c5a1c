// rms_norm and rope, mirroring model/ops.cpp's rms_norm and model/rope.cpp's RopeTable::apply.
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
constexpr int kRowsPerWarpBlock = kThreads / kWarp;
// Rows up to this width take one warp each; wider rows take a block of kThreads each. The choice
// depends on n alone, so a row's reduction order does too. (At 4096, the hidden width's norms ran
// 128 elements a lane on one warp: at one token a launch then used one warp of the device.)
constexpr int64_t kWarpRowLimit = 1024;

// Loads issued before their uses (see sum_of_squares): 32 covers a lane's whole share of a row
// up to 1024 wide (the warp kernel) and of a 4096-wide row in a block in one round trip.
constexpr int kInFlight = 32;

__device__ __forceinline__ void normalize(const float* x, int64_t n, const float* weight, float eps, float* out,
                                          double sum_squares, int first, int step) {
  const float inverse_rms = 1.0f / sqrtf(static_cast<float>(sum_squares / static_cast<double>(n)) + eps);
  for (int64_t base = first; base < n; base += kInFlight * step) {
    float v[kInFlight], w[kInFlight];
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) {
      const int64_t i = base + u * step;
      v[u] = i < n ? x[i] : 0.0f;
      w[u] = weight && i < n ? weight[i] : 1.0f;
    }
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) {
      const int64_t i = base + u * step;
      const float normalized = v[u] * inverse_rms;
      if (i < n) out[i] = weight ? w[u] * normalized : normalized;
    }
  }
}

// Thread `first` of a group of `step` threads: the squares of elements first, first + step, ...
// added in order in double (each product x^2 is exact in double). kInFlight loads are issued
// before their adds: a loop that loaded one element per add waited out a memory round trip per
// element (12 us a 4096-wide row, one warp at one token), and with 8 in flight a 16,384-wide row
// (the mHC's 4 x 4096) still took 8 round trips a pass, ~8 us.
__device__ __forceinline__ double sum_of_squares(const float* xr, int64_t n, int64_t first, int64_t step) {
  double sum = 0.0;
  for (int64_t base = first; base < n; base += kInFlight * step) {
    float v[kInFlight];
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) v[u] = base + u * step < n ? xr[base + u * step] : 0.0f;
#pragma unroll
    for (int u = 0; u < kInFlight; ++u)
      if (base + u * step < n) sum += static_cast<double>(v[u]) * static_cast<double>(v[u]);
  }
  return sum;
}

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
    float* tail = x + head * head_dim + (head_dim - rope_dims);
    const float angle = static_cast<float>(positions[t]) * inv_freq[i];
    const float cosine = cosf(angle);
    const float sine = inverse ? -sinf(angle) : sinf(angle);
    const float even = tail[2 * i];
    const float odd = tail[2 * i + 1];
    tail[2 * i] = even * cosine + (-odd) * sine;
    tail[2 * i + 1] = odd * cosine + even * sine;
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
