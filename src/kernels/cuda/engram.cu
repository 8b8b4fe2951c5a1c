// engram_gate, mirroring the gate loop of model/engram.cpp (Engram::apply after the projection).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "core/error.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/launch_gate.h"

namespace deepinfer::kernels::cuda {
namespace {

using namespace detail;

constexpr int kThreads = 256;

// One block per (token, stream): the three sums in double (a tree where the CPU adds in index
// order: the same to rounding in the last bits of a double), the gate in double, then the add.
__global__ void __launch_bounds__(kThreads)
    engram_gate_kernel(float* streams, const float* kv, const float* gate_weight, int64_t hc, int64_t hidden,
                       double eps) {
  await_previous_grid();
  __shared__ double scratch[kWarp];
  const int64_t t = blockIdx.x / hc;
  const int64_t s = blockIdx.x % hc;
  const int64_t kv_width = (hc + 1) * hidden;
  float* h = streams + (t * hc + s) * hidden;
  const float* key = kv + t * kv_width + s * hidden;
  const float* value = kv + t * kv_width + hc * hidden;
  const float* weight = gate_weight + s * hidden;
  double h_square = 0, key_square = 0, dot = 0;
  for (int64_t d = threadIdx.x; d < hidden; d += kThreads) {
    const double hd = h[d];
    h_square += hd * hd;
    key_square += static_cast<double>(key[d]) * key[d];
    dot += hd * weight[d] * key[d];
  }
  h_square = block_sum(h_square, scratch);
  key_square = block_sum(key_square, scratch);
  dot = block_sum(dot, scratch);
  const double n = static_cast<double>(hidden);
  const double scaled = dot / sqrt(h_square / n + eps) / sqrt(key_square / n + eps) * (1.0 / sqrt(n));
  const double signed_root = copysign(sqrt(fmax(fabs(scaled), 1e-6)), scaled);
  const auto gate = static_cast<float>(1.0 / (1.0 + exp(-signed_root)));
  for (int64_t d = threadIdx.x; d < hidden; d += kThreads) h[d] += gate * value[d];
}

}  // namespace

void engram_gate(float* streams, const float* kv, const float* gate_weight, int64_t tokens, int64_t hc,
                 int64_t hidden, double eps, Stream stream) {
  if (launches_skipped()) return;
  if (tokens < 0 || hc <= 0 || hidden <= 0)
    fail("cuda::engram_gate: sizes (tokens ", tokens, ", hc ", hc, ", hidden ", hidden, ")");
  if (tokens == 0) return;
  if (tokens * hc >= (int64_t{1} << 31)) fail("cuda::engram_gate: ", tokens * hc, " blocks, over 2^31");
  launch(engram_gate_kernel, static_cast<unsigned>(tokens * hc), kThreads, 0, native(stream), streams, kv, gate_weight,
         hc, hidden, eps);
  check_launch("cuda::engram_gate");
}

}  // namespace deepinfer::kernels::cuda
