// The mHC steps of model/hyper_connections.cpp: the per-token mixing weights (sigmoids and the
// truncated Sinkhorn), the collapse of the streams into one sublayer input, and the write-back.
#include <cooperative_groups.h>
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

constexpr int kThreads = 256;
constexpr int kMixThreads = 64;
constexpr int64_t kMaxStreams = 16;  // hc_mult; V4 uses 4

// Any n up to kMaxStreams: one thread per token, the n x n matrix in local memory.
__global__ void __launch_bounds__(kMixThreads)
    hc_mix_kernel(const float* __restrict__ logits, int64_t tokens, int n, const float* __restrict__ base,
                  const float* __restrict__ scale, float hc_eps, int64_t iters, float* __restrict__ pre,
                  float* __restrict__ post, float* __restrict__ comb_out) {
  await_previous_grid();
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= tokens) return;
  const int mixes = (2 + n) * n;
  const float* row = logits + t * mixes;
  const float scale_pre = scale[0];
  const float scale_post = scale[1];
  const float scale_comb = scale[2];
  for (int i = 0; i < n; ++i) {
    pre[t * n + i] = sigmoid(row[i] * scale_pre + base[i]) + hc_eps;
    post[t * n + i] = 2.0f * sigmoid(row[n + i] * scale_post + base[n + i]);
  }
  float comb[kMaxStreams * kMaxStreams];
  for (int j = 0; j < n * n; ++j) comb[j] = row[2 * n + j] * scale_comb + base[2 * n + j];
  // Row softmax (model::softmax: max, exp, sum in order, divide) plus eps.
  for (int j = 0; j < n; ++j) {
    float* r = comb + j * n;
    float max_value = -INFINITY;
    for (int k = 0; k < n; ++k) max_value = fmaxf(max_value, r[k]);
    float sum = 0.0f;
    for (int k = 0; k < n; ++k) {
      r[k] = expf(r[k] - max_value);
      sum += r[k];
    }
    for (int k = 0; k < n; ++k) r[k] /= sum;
    for (int k = 0; k < n; ++k) r[k] += hc_eps;
  }
  auto normalize_columns = [&] {
    for (int k = 0; k < n; ++k) {
      float sum = 0.0f;
      for (int j = 0; j < n; ++j) sum += comb[j * n + k];
      for (int j = 0; j < n; ++j) comb[j * n + k] /= sum + hc_eps;
    }
  };
  auto normalize_rows = [&] {
    for (int j = 0; j < n; ++j) {
      float sum = 0.0f;
      for (int k = 0; k < n; ++k) sum += comb[j * n + k];
      for (int k = 0; k < n; ++k) comb[j * n + k] /= sum + hc_eps;
    }
  };
  normalize_columns();
  for (int64_t iter = 1; iter < iters; ++iter) {
    normalize_rows();
    normalize_columns();
  }
  for (int j = 0; j < n * n; ++j) comb_out[t * n * n + j] = comb[j];
}

// V4's 4 streams: 16 lanes per token, lane l holding element (l / 4, l % 4) of the matrix. Each
// normalisation is one division per lane after the lane gathers its row or column (4 shuffles)
// and adds it in index order: the same operations in the same order as the one-thread form, so
// the same bits, with a dependent chain 4x shorter. In the one-thread form V4's 20 rounds of 32
// dependent divisions took 24 us a call (53 us with the matrix in local memory), 8 calls a
// decode step.
constexpr int kFourStreams = 4;
constexpr int kLanesPerToken = kFourStreams * kFourStreams;

// Lane l (< 16) of token t's group: element (l / 4, l % 4) of its matrix, and pre[l] (l < 4) or
// post[l - 4] (l < 8). group_mask: the 16 lanes of the group, all live.
__device__ __forceinline__ void mix4_lane(const float* __restrict__ row, int l, unsigned group_mask,
                                          const float* __restrict__ base, const float* __restrict__ scale,
                                          float hc_eps, int64_t iters, float* __restrict__ pre,
                                          float* __restrict__ post, float* __restrict__ comb) {
  constexpr int n = kFourStreams;
  const int j = l / n, k = l % n;
  if (l < n) pre[l] = sigmoid(row[l] * scale[0] + base[l]) + hc_eps;
  else if (l < 2 * n) post[l - n] = 2.0f * sigmoid(row[l] * scale[1] + base[l]);
  float v = row[2 * n + l] * scale[2] + base[2 * n + l];
  auto lane_of = [](int jj, int kk) { return jj * n + kk; };
  float max_value = -INFINITY;
#pragma unroll
  for (int kk = 0; kk < n; ++kk)
    max_value = fmaxf(max_value, __shfl_sync(group_mask, v, lane_of(j, kk), kLanesPerToken));
  v = expf(v - max_value);
  float sum = 0.0f;
#pragma unroll
  for (int kk = 0; kk < n; ++kk) sum += __shfl_sync(group_mask, v, lane_of(j, kk), kLanesPerToken);
  v = v / sum + hc_eps;
  auto normalize_column = [&] {
    float column = 0.0f;
#pragma unroll
    for (int jj = 0; jj < n; ++jj) column += __shfl_sync(group_mask, v, lane_of(jj, k), kLanesPerToken);
    v /= column + hc_eps;
  };
  auto normalize_row = [&] {
    float across = 0.0f;
#pragma unroll
    for (int kk = 0; kk < n; ++kk) across += __shfl_sync(group_mask, v, lane_of(j, kk), kLanesPerToken);
    v /= across + hc_eps;
  };
  normalize_column();
  for (int64_t iter = 1; iter < iters; ++iter) {
    normalize_row();
    normalize_column();
  }
  comb[l] = v;
}

__global__ void __launch_bounds__(kMixThreads)
    hc_mix4_kernel(const float* __restrict__ logits, int64_t tokens, const float* __restrict__ base,
                   const float* __restrict__ scale, float hc_eps, int64_t iters, float* __restrict__ pre,
                   float* __restrict__ post, float* __restrict__ comb_out) {
  await_previous_grid();
  constexpr int n = kFourStreams;
  const int64_t thread = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t t = thread / kLanesPerToken;
  const int l = static_cast<int>(thread % kLanesPerToken);
  // Whole 16-lane groups are live or not (blockDim is a multiple of 16), so the shuffles below
  // run in the groups of live tokens only; the mask names them.
  const unsigned group_mask = 0xFFFFu << (threadIdx.x % kWarp / kLanesPerToken * kLanesPerToken);
  if (t >= tokens) return;
  constexpr int mixes = (2 + n) * n;
  mix4_lane(logits + t * mixes, l, group_mask, base, scale, hc_eps, iters, pre + t * n, post + t * n,
            comb_out + t * n * n);
}

// The fused mHC entry (hc_enter, hc_collapse_norm) runs a block of kFusedThreads a token: at one
// token a block is all that runs, and its loads must be in flight together (a 256-thread block
// walking a token's 4 x 5120 streams column by column waited out a memory round trip a column:
// 21-36 us a call). Each thread computes columns c = i, i + kFusedThreads, ... into shared memory;
// then the first kRmsNormBlockThreads threads add the squares of the row in rms_norm_block_kernel's
// order (thread i: elements i, i + 256, ... in increasing order) from shared memory, and block_sum
// over all the threads adds the same per-warp sums plus zeros, in the same tree: rms_norm's bits.
constexpr int kFusedThreads = 1024;
constexpr int kFusedColumns = 4;  // columns a thread loads before it computes any
constexpr std::size_t kMaxFusedShared = 200 * 1024;

__device__ __forceinline__ double squares_in_norm_order(const float* row, int64_t width) {
  const int tid = static_cast<int>(threadIdx.x);
  double squares = 0.0;
  if (tid < kRmsNormBlockThreads)
    for (int64_t i = tid; i < width; i += kRmsNormBlockThreads) {
      const double v = row[i];
      squares += v * v;
    }
  return squares;
}

// A site's entry in one launch (hc_enter): lanes 0-15 of warp 0 mix the token's four streams as
// hc_mix4_kernel does; every thread collapses its columns as hc_collapse_kernel does, with
// `carried` (V4.1's pre of the site before, then replaced by this site's pre) or this site's pre;
// then the norm as above: the four kernels' bits in one launch. Shared: the collapsed row [d].
// Without Mix (hc_collapse_norm) the block collapses with `carried` and norms, and leaves the
// mix, its outputs and `carried` to hc_mix: logits, base, scale, pre, post and comb are unread.
template <bool Mix>
__global__ void __launch_bounds__(kFusedThreads)
    hc_enter_kernel(const float* __restrict__ logits, const float* __restrict__ base,
                    const float* __restrict__ scale, float hc_eps, int64_t iters, float* __restrict__ pre,
                    float* __restrict__ post, float* __restrict__ comb, float* carried,
                    const float* __restrict__ streams, int64_t d, const float* __restrict__ norm_weight,
                    float norm_eps, float* __restrict__ out) {
  await_previous_grid();
  constexpr int n = kFourStreams;
  extern __shared__ float collapsed[];
  __shared__ float weights[n];
  __shared__ double scratch[kWarp];
  const int64_t t = blockIdx.x;
  const int tid = static_cast<int>(threadIdx.x);
  float* token_pre = Mix ? pre + t * n : nullptr;
  auto mix = [&] {
    if (Mix && tid < kLanesPerToken)
      mix4_lane(logits + t * (2 + n) * n, tid, 0xFFFFu, base, scale, hc_eps, iters, token_pre, post + t * n,
                comb + t * n * n);
  };
  if (!Mix || carried) {
    if (tid < n) weights[tid] = carried[t * n + tid];
  } else {
    mix();
    __syncwarp();
    if (tid < n) weights[tid] = token_pre[tid];
  }
  __syncthreads();
  float p[n];
#pragma unroll
  for (int i = 0; i < n; ++i) p[i] = weights[i];
  const float* s = streams + t * n * d;
  for (int64_t first = tid; first < d; first += int64_t{kFusedThreads} * kFusedColumns) {
    float v[kFusedColumns][n];
#pragma unroll
    for (int u = 0; u < kFusedColumns; ++u) {
      const int64_t c = first + int64_t{u} * kFusedThreads;
#pragma unroll
      for (int i = 0; i < n; ++i) v[u][i] = c < d ? s[i * d + c] : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kFusedColumns; ++u) {
      const int64_t c = first + int64_t{u} * kFusedThreads;
      float sum = 0.0f;
#pragma unroll
      for (int i = 0; i < n; ++i) sum += p[i] * v[u][i];
      if (c < d) collapsed[c] = sum;
    }
  }
  if (carried) mix();  // V4.1: this site's mix is needed by its exit and the next site only
  __syncthreads();
  double squares = squares_in_norm_order(collapsed, d);
  squares = block_sum(squares, scratch);  // barriers: the mix's pre is written
  if (Mix && carried && tid < n) carried[t * n + tid] = token_pre[tid];
  normalize(collapsed, d, norm_weight, norm_eps, out + t * d, squares, tid, kFusedThreads);
}

__global__ void hc_head_pre_kernel(const float* __restrict__ logits, int64_t tokens, int64_t n,
                                   const float* __restrict__ base, const float* __restrict__ scale, float hc_eps,
                                   float* __restrict__ pre) {
  await_previous_grid();
  const int64_t total = tokens * n;
  for (int64_t item = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; item < total;
       item += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t t, i;
    split_index(item, n, t, i);
    pre[item] = sigmoid(logits[item] * scale[0] + base[i]) + hc_eps;
  }
}

// One thread per (t, d): sum over the streams in order.
__global__ void hc_collapse_kernel(const float* __restrict__ pre, const float* __restrict__ streams, int64_t tokens,
                                   int64_t n, int64_t d, float* __restrict__ collapsed) {
  await_previous_grid();
  const int64_t total = tokens * d;
  for (int64_t item = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; item < total;
       item += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t t, c;
    split_index(item, d, t, c);
    const float* p = pre + t * n;
    const float* s = streams + t * n * d + c;
    float sum = 0.0f;
    for (int64_t i = 0; i < n; ++i) sum += p[i] * s[i * d];
    collapsed[item] = sum;
  }
}

// Column c of token t's n streams after the site: it reads all n streams at c before writing any,
// so in place is safe. (hc_post_norm_kernel does the same operations for n = 4.)
__device__ __forceinline__ void post_column(const float* post, const float* comb, const float* output, int64_t t,
                                            int n, int64_t d, int64_t c, float* streams) {
  float* s = streams + t * n * d + c;
  float previous[kMaxStreams];
  for (int j = 0; j < n; ++j) previous[j] = s[j * d];
  const float* m = comb + t * n * n;
  const float out = output[t * d + c];
  for (int k = 0; k < n; ++k) {
    float mixed = 0.0f;
    for (int j = 0; j < n; ++j) mixed += m[j * n + k] * previous[j];
    s[k * d] = post[t * n + k] * out + mixed;
  }
}

// One thread per (t, d).
__global__ void hc_post_kernel(const float* post, const float* comb, const float* output, int64_t tokens, int n,
                               int64_t d, float* streams) {
  await_previous_grid();
  const int64_t total = tokens * d;
  for (int64_t item = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; item < total;
       item += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t t, c;
    split_index(item, d, t, c);
    post_column(post, comb, output, t, n, d, c, streams);
  }
}

// hc_post_norm and hc_post_enter: a cluster of kBoundaryBlocks blocks a token (at one token a
// block a token is one SM of the device: 8.5 us for hc_post_norm, most of it one block's round
// trips). The norm's order is rms_norm_block_kernel's: thread i of 256 adds the squares of elements
// i, i + 256, ... of the row in order, warps add their threads by warp_sum, and warp 0 adds the 8
// warp sums (and 24 zeros) by warp_sum. Block r of the cluster plays warp r: it owns the columns
// c with c % 256 in [32 r, 32 r + 32) (d a multiple of 256, so every stream's element k d + c falls
// to the same thread), computes hc_post's values there (post_column's operations), keeps them in
// shared memory and adds its 32 threads' squares; the blocks' sums meet through distributed
// shared memory in the same warp_sum. So the bits are rms_norm's (and the one-block kernel's that
// this replaced).
// With Enter (V4.1's boundary between two sites), each column's new streams are also collapsed
// with `carried` as hc_enter collapses them, and that row [d] normed with norm_weight into
// `entry` in the same way: hc_post_norm's and hc_collapse_norm's bits in one launch.
constexpr int kBoundaryBlocks = 8;
constexpr int kBoundaryThreads = 256;
static_assert(kBoundaryBlocks * kWarp == kRmsNormBlockThreads);
constexpr std::size_t kMaxBoundaryShared = 48 * 1024;

template <bool Enter>
__global__ void __cluster_dims__(kBoundaryBlocks, 1, 1) __launch_bounds__(kBoundaryThreads)
    hc_boundary_kernel(const float* __restrict__ post, const float* __restrict__ comb,
                       const float* __restrict__ output, int64_t d, float* __restrict__ streams, float norm_eps,
                       float* __restrict__ flat, const float* __restrict__ carried,
                       const float* __restrict__ norm_weight, float entry_eps, float* __restrict__ entry) {
  await_previous_grid();
  namespace cg = cooperative_groups;
  const cg::cluster_group cluster = cg::this_cluster();
  constexpr int n = kFourStreams;
  const int rank = static_cast<int>(cluster.block_rank());
  const int64_t t = blockIdx.x / kBoundaryBlocks;
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t rounds = d / kRmsNormBlockThreads;  // a norm thread's columns
  const int64_t columns = rounds * kWarp;           // the block's
  extern __shared__ float values[];                 // [n][columns] the new streams, then [columns] collapsed
  float* collapsed = values + n * columns;
  __shared__ double partial[2];  // the block's warp sums: the streams' squares, the collapsed row's
  __shared__ double total[2];
  // The block's column j: round j / 32 of the norm, thread 32 rank + j % 32.
  auto column_of = [&](int64_t j) { return (j / kWarp) * kRmsNormBlockThreads + rank * kWarp + j % kWarp; };
  float m[n * n], gain[n], p[n];
#pragma unroll
  for (int i = 0; i < n * n; ++i) m[i] = comb[t * n * n + i];
#pragma unroll
  for (int k = 0; k < n; ++k) gain[k] = post[t * n + k];
#pragma unroll
  for (int k = 0; k < n; ++k) p[k] = Enter ? carried[t * n + k] : 0.0f;
  float* s = streams + t * n * d;
  for (int64_t first = tid; first < columns; first += int64_t{kBoundaryThreads} * kFusedColumns) {
    float previous[kFusedColumns][n], out[kFusedColumns];
#pragma unroll
    for (int u = 0; u < kFusedColumns; ++u) {
      const int64_t j = first + int64_t{u} * kBoundaryThreads;
      const int64_t c = column_of(j);
#pragma unroll
      for (int i = 0; i < n; ++i) previous[u][i] = j < columns ? s[i * d + c] : 0.0f;
      out[u] = j < columns ? output[t * d + c] : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kFusedColumns; ++u) {
      const int64_t j = first + int64_t{u} * kBoundaryThreads;
      if (j >= columns) continue;
      const int64_t c = column_of(j);
      float value[n];
#pragma unroll
      for (int k = 0; k < n; ++k) {
        float mixed = 0.0f;
#pragma unroll
        for (int i = 0; i < n; ++i) mixed += m[i * n + k] * previous[u][i];
        value[k] = gain[k] * out[u] + mixed;
        s[k * d + c] = value[k];
        values[k * columns + j] = value[k];
      }
      if (Enter) {
        float sum = 0.0f;
#pragma unroll
        for (int k = 0; k < n; ++k) sum += p[k] * value[k];
        collapsed[j] = sum;
      }
    }
  }
  __syncthreads();
  if (tid < kWarp) {
    // Norm thread 32 rank + tid: its elements k d + 256 r + 32 rank + tid in increasing order.
    double squares = 0.0, entry_squares = 0.0;
    for (int k = 0; k < n; ++k)
      for (int64_t r = 0; r < rounds; ++r) {
        const double v = values[k * columns + r * kWarp + tid];
        squares += v * v;
      }
    if (Enter)
      for (int64_t r = 0; r < rounds; ++r) {
        const double v = collapsed[r * kWarp + tid];
        entry_squares += v * v;
      }
    squares = warp_sum(squares);
    entry_squares = warp_sum(entry_squares);
    if (tid == 0) {
      partial[0] = squares;
      partial[1] = entry_squares;
    }
  }
  cluster.sync();
  if (tid < kWarp) {
    double squares = 0.0, entry_squares = 0.0;
    if (tid < kBoundaryBlocks) {
      const double* remote = cluster.map_shared_rank(partial, tid);
      squares = remote[0];
      entry_squares = remote[1];
    }
    squares = warp_sum(squares);
    entry_squares = warp_sum(entry_squares);
    if (tid == 0) {
      total[0] = squares;
      total[1] = entry_squares;
    }
  }
  cluster.sync();  // total is the block's, and no block leaves while another reads its partial
  // normalize()'s operations on the block's elements.
  const float inverse_rms = 1.0f / sqrtf(static_cast<float>(total[0] / static_cast<double>(n * d)) + norm_eps);
  float* f = flat + t * n * d;
  for (int64_t j = tid; j < columns; j += kBoundaryThreads) {
    const int64_t c = column_of(j);
#pragma unroll
    for (int k = 0; k < n; ++k) f[k * d + c] = values[k * columns + j] * inverse_rms;
  }
  if (!Enter) return;
  const float entry_inverse_rms = 1.0f / sqrtf(static_cast<float>(total[1] / static_cast<double>(d)) + entry_eps);
  for (int64_t j = tid; j < columns; j += kBoundaryThreads) {
    const int64_t c = column_of(j);
    const float normalized = collapsed[j] * entry_inverse_rms;
    entry[t * d + c] = norm_weight[c] * normalized;
  }
}

// The boundary kernel's launch, or false where it does not apply.
template <bool Enter>
bool launch_boundary(const char* who, const float* post, const float* comb, const float* output, int64_t tokens,
                     int64_t n, int64_t d, float* streams, float norm_eps, float* flat, const float* carried_pre,
                     const float* norm_weight, float entry_eps, float* entry, Stream stream) {
  const std::size_t shared = static_cast<std::size_t>((n + (Enter ? 1 : 0)) * (d / kBoundaryBlocks)) * sizeof(float);
  if (n != kFourStreams || n * d <= kWarpRowLimit || d % kRmsNormBlockThreads != 0 || shared > kMaxBoundaryShared ||
      (Enter && d <= kWarpRowLimit))
    return false;
  if (launches_skipped()) return true;
  if (tokens < 0) fail(who, ": negative token count ", tokens);
  if (tokens == 0) return true;
  if (tokens > (int64_t{1} << 27)) fail(who, ": ", tokens, " tokens, over 2^27");
  if (Enter && !carried_pre) fail(who, ": no carried pre");
  launch(hc_boundary_kernel<Enter>, static_cast<unsigned>(tokens * kBoundaryBlocks), kBoundaryThreads, shared,
         native(stream), post, comb, output, d, streams, norm_eps, flat, carried_pre, norm_weight, entry_eps, entry);
  check_launch(who);
  return true;
}

void check_streams(const char* what, int64_t n) {
  if (n < 1 || n > kMaxStreams) fail(what, ": ", n, " streams; this kernel handles 1 to ", kMaxStreams);
}


// A fused mHC kernel's launch: a block of kFusedThreads a token, `shared` bytes of dynamic shared
// memory (past the default 48 KiB with the kernel's opt-in, which is idempotent).
template <typename... Params, typename... Args>
void launch_fused(const char* who, void (*kernel)(Params...), int64_t tokens, std::size_t shared, Stream stream,
                  Args&&... args) {
  if (launches_skipped()) return;
  if (tokens < 0) fail(who, ": negative token count ", tokens);
  if (tokens == 0) return;
  if (tokens >= (int64_t{1} << 31)) fail(who, ": ", tokens, " tokens, over 2^31");
  if (shared > 48 * 1024) {
    const cudaError_t status =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared));
    if (status != cudaSuccess) fail(who, ": ", shared, " bytes of shared memory refused: ", cudaGetErrorString(status));
  }
  launch(kernel, static_cast<unsigned>(tokens), kFusedThreads, shared, native(stream), std::forward<Args>(args)...);
  check_launch(who);
}

}  // namespace

void hc_mix(const float* logits, int64_t tokens, int64_t n, const float* base, const float* scale, float hc_eps,
            int64_t sinkhorn_iters, float* pre, float* post, float* comb, Stream stream) {
  if (launches_skipped()) return;
  if (tokens < 0) fail("cuda::hc_mix: negative token count ", tokens);
  if (tokens == 0) return;
  check_streams("cuda::hc_mix", n);
  // V4 and V4.1 mix 4 streams (hc_mult); other counts take the general kernel.
  if (n == kFourStreams) {
    const int64_t threads = tokens * kLanesPerToken;
    launch(hc_mix4_kernel, static_cast<unsigned>((threads + kMixThreads - 1) / kMixThreads), kMixThreads, 0,
           native(stream), logits, tokens, base, scale, hc_eps, sinkhorn_iters, pre, post, comb);
  } else {
    const int64_t blocks = (tokens + kMixThreads - 1) / kMixThreads;
    launch(hc_mix_kernel, static_cast<unsigned>(blocks), kMixThreads, 0, native(stream), logits, tokens,
           static_cast<int>(n), base, scale, hc_eps, sinkhorn_iters, pre, post, comb);
  }
  check_launch("cuda::hc_mix");
}

bool hc_enter(const float* logits, int64_t tokens, int64_t n, const float* base, const float* scale, float hc_eps,
              int64_t sinkhorn_iters, float* pre, float* post, float* comb, float* carried_pre,
              const float* streams, int64_t d, const float* norm_weight, float norm_eps, float* out, Stream stream) {
  const std::size_t shared = static_cast<std::size_t>(d) * sizeof(float);
  if (n != kFourStreams || d <= kWarpRowLimit || shared > kMaxFusedShared) return false;
  launch_fused("cuda::hc_enter", hc_enter_kernel<true>, tokens, shared, stream, logits, base, scale, hc_eps,
               sinkhorn_iters, pre, post, comb, carried_pre, streams, d, norm_weight, norm_eps, out);
  return true;
}

bool hc_collapse_norm(const float* pre, const float* streams, int64_t tokens, int64_t n, int64_t d,
                      const float* norm_weight, float norm_eps, float* out, Stream stream) {
  const std::size_t shared = static_cast<std::size_t>(d) * sizeof(float);
  if (n != kFourStreams || d <= kWarpRowLimit || shared > kMaxFusedShared) return false;
  if (!pre) fail("cuda::hc_collapse_norm: no pre");
  // The kernel reads `carried` only; the mix's arguments are unread without Mix.
  launch_fused("cuda::hc_collapse_norm", hc_enter_kernel<false>, tokens, shared, stream, nullptr, nullptr, nullptr,
               0.0f, int64_t{0}, nullptr, nullptr, nullptr, const_cast<float*>(pre), streams, d, norm_weight, norm_eps,
               out);
  return true;
}

void hc_head_pre(const float* logits, int64_t tokens, int64_t n, const float* base, const float* scale, float hc_eps,
                 float* pre, Stream stream) {
  if (launches_skipped()) return;
  if (tokens < 0 || n < 0) fail("cuda::hc_head_pre: negative size (tokens ", tokens, ", n ", n, ")");
  if (tokens * n == 0) return;
  launch(hc_head_pre_kernel, grid_for(tokens * n, kThreads), kThreads, 0, native(stream), logits, tokens, n, base,
         scale, hc_eps, pre);
  check_launch("cuda::hc_head_pre");
}

void hc_collapse(const float* pre, const float* streams, int64_t tokens, int64_t n, int64_t d, float* collapsed,
                 Stream stream) {
  if (launches_skipped()) return;
  if (tokens < 0 || n < 0 || d < 0) fail("cuda::hc_collapse: negative size (tokens ", tokens, ", n ", n, ", d ", d, ")");
  if (tokens * d == 0) return;
  launch(hc_collapse_kernel, grid_for(tokens * d, kThreads), kThreads, 0, native(stream), pre, streams, tokens, n, d,
         collapsed);
  check_launch("cuda::hc_collapse");
}

bool hc_post_norm(const float* post, const float* comb, const float* output, int64_t tokens, int64_t n, int64_t d,
                  float* streams, float norm_eps, float* flat, Stream stream) {
  return launch_boundary<false>("cuda::hc_post_norm", post, comb, output, tokens, n, d, streams, norm_eps, flat,
                                nullptr, nullptr, 0.0f, nullptr, stream);
}

bool hc_post_enter(const float* post, const float* comb, const float* output, int64_t tokens, int64_t n, int64_t d,
                   float* streams, float norm_eps, float* flat, const float* carried_pre, const float* norm_weight,
                   float entry_eps, float* entry, Stream stream) {
  return launch_boundary<true>("cuda::hc_post_enter", post, comb, output, tokens, n, d, streams, norm_eps, flat,
                               carried_pre, norm_weight, entry_eps, entry, stream);
}

void hc_post(const float* post, const float* comb, const float* output, int64_t tokens, int64_t n, int64_t d,
             float* streams, Stream stream) {
  if (launches_skipped()) return;
  if (tokens < 0 || d < 0) fail("cuda::hc_post: negative size (tokens ", tokens, ", d ", d, ")");
  if (tokens * d == 0) return;
  check_streams("cuda::hc_post", n);
  launch(hc_post_kernel, grid_for(tokens * d, kThreads), kThreads, 0, native(stream), post, comb, output, tokens,
         static_cast<int>(n), d, streams);
  check_launch("cuda::hc_post");
}

}  // namespace deepinfer::kernels::cuda
