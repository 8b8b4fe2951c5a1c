#pragma once
// The RMSNorm's per-thread parts (norm_rope.cu's kernels, and the mHC kernel that norms the rows it
// collapses): a row's squares added in a fixed order in double, and the normalisation. Rows wider
// than kWarpRowLimit take a block of kRmsNormBlockThreads threads each, thread i taking elements
// i, i + threads, ... in increasing order; a kernel that computes a row's elements itself and
// adds their squares in that order, then block_sum and normalize, gives rms_norm's bits.
#include <cstdint>

namespace deepinfer::kernels::cuda::detail {

constexpr int kRmsNormBlockThreads = 256;
// Rows up to this width take one warp each; wider rows take a block of kRmsNormBlockThreads each.
// The choice depends on n alone, so a row's reduction order does too. (At 4096, the hidden width's
// norms ran 128 elements a lane on one warp: at one token a launch then used one warp of the device.)
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

}  // namespace deepinfer::kernels::cuda::detail
