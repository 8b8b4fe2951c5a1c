// The mixture-of-experts steps around the expert linears: routing (model/moe.cpp moe_forward's
// scores, top-k or hash choice, renormalisation), the clamped SwiGLU, and the combination of a
// token's expert outputs.
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "core/error.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/launch_gate.h"

namespace deepinfer::kernels::cuda {
namespace {

using namespace detail;

constexpr int kThreads = 256;
constexpr int kRouteThreads = 256;
constexpr int kRouteWarps = kRouteThreads / kWarp;
constexpr int64_t kMaxTopK = 64;
constexpr int64_t kMaxRouteSharedBytes = 48 * 1024;

// (value, id) ordered by value descending, ties to the lower id; NaN counts as -inf so the
// order is total and the choice never depends on the reduction's shape.
__device__ __forceinline__ bool better(float value, int id, float best_value, int best_id) {
  return value > best_value || (value == best_value && id < best_id);
}

// One block per token.
__global__ void __launch_bounds__(kRouteThreads)
    route_kernel(float* logits, RouterParams params, const float* bias, const int32_t* tid2eid,
                 const int32_t* token_ids, int32_t* experts_out, float* weights_out) {
  await_previous_grid();
  extern __shared__ float shared[];
  __shared__ float scratch[kWarp];
  __shared__ float warp_value[kRouteWarps];
  __shared__ int warp_id[kRouteWarps];
  __shared__ int32_t chosen[kMaxTopK];
  const int experts = static_cast<int>(params.experts);
  const int k = static_cast<int>(params.top_k);
  float* score = shared;                                               // [experts]
  float* biased = shared + experts;                                    // [experts]
  auto* taken = reinterpret_cast<unsigned char*>(shared + 2 * experts);  // [experts]
  const int64_t t = blockIdx.x;
  const int tid = static_cast<int>(threadIdx.x);
  float* row = logits + t * experts;

  for (int e = tid; e < experts; e += kRouteThreads) {
    float v = row[e];
    if (params.gate_temperature != 1.0f) v /= params.gate_temperature;
    if (params.scoring == 0) v = sqrtf(softplus(v));
    else if (params.scoring == 1) v = sigmoid(v);
    score[e] = v;
  }
  if (params.scoring == 2) {  // softmax over the experts (model::softmax, with a fixed-order sum)
    float local_max = -INFINITY;
    for (int e = tid; e < experts; e += kRouteThreads) local_max = fmaxf(local_max, score[e]);
    const float max_value = block_max(local_max, scratch);
    float local_sum = 0.0f;
    for (int e = tid; e < experts; e += kRouteThreads) {
      const float ex = expf(score[e] - max_value);
      score[e] = ex;
      local_sum += ex;
    }
    const float sum = block_sum(local_sum, scratch);
    for (int e = tid; e < experts; e += kRouteThreads) score[e] /= sum;
  }
  for (int e = tid; e < experts; e += kRouteThreads) row[e] = score[e];

  if (tid2eid) {
    if (tid == 0) {
      const int64_t id = token_ids[t];
      const bool valid = params.tid2eid_rows <= 0 || (id >= 0 && id < params.tid2eid_rows);
      for (int s = 0; s < k; ++s) {
        const int32_t e = valid ? tid2eid[id * k + s] : -1;
        chosen[s] = e >= 0 && e < experts ? e : -1;
      }
    }
  } else {
    for (int e = tid; e < experts; e += kRouteThreads) {
      const float v = score[e] + (bias ? bias[e] : 0.0f);
      biased[e] = isnan(v) ? -INFINITY : v;
      taken[e] = 0;
    }
    __syncthreads();
    const int lane = tid % kWarp;
    const int warp = tid / kWarp;
    for (int s = 0; s < k; ++s) {
      float best_value = -INFINITY;
      int best_id = INT_MAX;
      for (int e = tid; e < experts; e += kRouteThreads)
        if (!taken[e] && better(biased[e], e, best_value, best_id)) {
          best_value = biased[e];
          best_id = e;
        }
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1) {
        const float other_value = __shfl_xor_sync(kFullMask, best_value, offset);
        const int other_id = __shfl_xor_sync(kFullMask, best_id, offset);
        if (better(other_value, other_id, best_value, best_id)) {
          best_value = other_value;
          best_id = other_id;
        }
      }
      if (lane == 0) {
        warp_value[warp] = best_value;
        warp_id[warp] = best_id;
      }
      __syncthreads();
      if (tid == 0) {
        for (int w = 1; w < kRouteWarps; ++w)
          if (better(warp_value[w], warp_id[w], best_value, best_id)) {
            best_value = warp_value[w];
            best_id = warp_id[w];
          }
        // best_id is INT_MAX only when every expert is taken (k > experts is refused on the host).
        chosen[s] = best_id == INT_MAX ? -1 : best_id;
        if (best_id != INT_MAX) taken[best_id] = 1;
      }
      __syncthreads();
    }
  }
  __syncthreads();
  if (tid == 0) {
    // Ascending expert ids (insertion sort; k is small), then the unbiased scores as weights.
    for (int s = 1; s < k; ++s) {
      const int32_t e = chosen[s];
      int j = s - 1;
      for (; j >= 0 && chosen[j] > e; --j) chosen[j + 1] = chosen[j];
      chosen[j + 1] = e;
    }
    float w[kMaxTopK];
    float sum = 0.0f;
    for (int s = 0; s < k; ++s) {
      w[s] = chosen[s] >= 0 ? score[chosen[s]] : 0.0f;
      sum += w[s];
    }
    for (int s = 0; s < k; ++s) {
      const float value = params.renormalize ? w[s] / (sum + params.renormalize_eps) : w[s];
      experts_out[t * k + s] = chosen[s];
      weights_out[t * k + s] = chosen[s] >= 0 ? value * params.routed_scaling : 0.0f;
    }
  }
}

__global__ void swiglu_kernel(float* gate, const float* up, int64_t rows, int64_t inner, float limit,
                              const float* row_scale) {
  await_previous_grid();
  const int64_t total = rows * inner;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float g = gate[i];
    float u = up[i];
    if (limit > 0) {
      g = fminf(g, limit);                                      // std::fmin
      u = u < -limit ? -limit : (limit < u ? limit : u);        // std::clamp (NaN passes through)
    }
    float value = silu(g) * u;
    if (row_scale) {
      int64_t r, column;
      split_index(i, inner, r, column);
      value = value * row_scale[r];
    }
    gate[i] = value;
  }
}

// out[t, c]: the slots in ascending order from 0, each scaled first (no fused multiply-add, as
// the CPU scales a slot before summing it), then the shared expert.
__global__ void moe_combine_kernel(const float* contributions, const int64_t* row_of, const float* slot_scale,
                                   int64_t tokens, int64_t k, int64_t d, const float* shared, float* out) {
  await_previous_grid();
  const int64_t total = tokens * d;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t t, c;
    split_index(i, d, t, c);
    float sum = 0.0f;
    for (int64_t s = 0; s < k; ++s) {
      const int64_t slot = t * k + s;
      float v = contributions[(row_of ? row_of[slot] : slot) * d + c];
      if (slot_scale) v = __fmul_rn(v, slot_scale[slot]);
      sum = __fadd_rn(sum, v);
    }
    if (shared) sum = __fadd_rn(sum, shared[i]);
    out[i] = sum;
  }
}

}  // namespace

void route(float* logits, int64_t tokens, const RouterParams& params, const float* bias, const int32_t* tid2eid,
           const int32_t* token_ids, int32_t* experts, float* weights, Stream stream) {
  if (launches_skipped()) return;
  if (tokens < 0) fail("cuda::route: negative token count ", tokens);
  if (params.scoring < 0 || params.scoring > 2) fail("cuda::route: unknown scoring function ", params.scoring);
  if (params.top_k < 1 || params.top_k > kMaxTopK)
    fail("cuda::route: top_k ", params.top_k, "; this kernel handles 1 to ", kMaxTopK);
  if (params.experts < params.top_k) fail("cuda::route: top_k ", params.top_k, " of ", params.experts, " experts");
  const int64_t shared_bytes = params.experts * (2 * static_cast<int64_t>(sizeof(float)) + 1);
  if (shared_bytes > kMaxRouteSharedBytes)
    fail("cuda::route: ", params.experts, " experts; this kernel handles up to ", kMaxRouteSharedBytes / 9);
  if (tid2eid && !token_ids) fail("cuda::route: hash routing needs the token ids");
  if (tokens == 0) return;
  if (tokens >= (int64_t{1} << 31)) fail("cuda::route: ", tokens, " tokens, over 2^31");
  launch(route_kernel, static_cast<unsigned>(tokens), kRouteThreads, static_cast<size_t>(shared_bytes), native(stream),
         logits, params, bias, tid2eid, token_ids, experts, weights);
  check_launch("cuda::route");
}

void swiglu(float* gate, const float* up, int64_t rows, int64_t inner, float limit, const float* row_scale,
            Stream stream) {
  if (launches_skipped()) return;
  if (rows < 0 || inner < 0) fail("cuda::swiglu: negative size (rows ", rows, ", inner ", inner, ")");
  if (rows * inner == 0) return;
  launch(swiglu_kernel, grid_for(rows * inner, kThreads), kThreads, 0, native(stream), gate, up, rows, inner, limit,
         row_scale);
  check_launch("cuda::swiglu");
}

void moe_combine(const float* contributions, const int64_t* row_of, const float* slot_scale, int64_t tokens,
                 int64_t k, int64_t d, const float* shared, float* out, Stream stream) {
  if (launches_skipped()) return;
  if (tokens < 0 || k < 0 || d < 0) fail("cuda::moe_combine: negative size (tokens ", tokens, ", k ", k, ", d ", d, ")");
  if (tokens * d == 0) return;
  launch(moe_combine_kernel, grid_for(tokens * d, kThreads), kThreads, 0, native(stream), contributions, row_of,
         slot_scale, tokens, k, d, shared, out);
  check_launch("cuda::moe_combine");
}

}  // namespace deepinfer::kernels::cuda
