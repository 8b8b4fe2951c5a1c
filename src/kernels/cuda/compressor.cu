// compressor_pool and compressor_keep, mirroring model/compressor.cpp (close_window: softmax-gated
// pooling over one or, with overlap, two windows) and model/latent_compressor.cpp (the same
// pooling without position bias or overlap). The norm and RoPE that follow run as the generic
// rms_norm and rope kernels.
#include <cuda_runtime.h>

#include <cstdint>

#include "core/error.h"
#include "kernels/cuda/attention_kernels.h"
#include "kernels/cuda/launch_gate.h"
#include "kernels/cuda/cuda_common.cuh"

namespace deepinfer::kernels::cuda {
namespace {

using namespace detail;

constexpr int kThreads = 128;
// 2 * ratio slots at most: V4's CSA ratio is 4, HCA 128; V4.1's kv sources pool `ratio` slots.
constexpr int kMaxSlots = 256;

// The kv and gate values of channel c for position p of a segment: from the call's rows when the
// call fed p, else from the ring (where the gate already holds ape).
struct RowSource {
  const CompressorParams& params;
  const SegmentRows& segment;
  const CompressorRing& ring;
  const float* kv;
  const float* gate;

  __device__ void load(int64_t p, int64_t c, float& value, float& logit) const {
    const int64_t width = params.width;
    if (p >= segment.first_position) {
      const int64_t row = segment.row_begin + (p - segment.first_position);
      value = kv[row * width + c];
      logit = gate[row * width + c];
      if (params.ape) logit += params.ape[(p % params.ratio) * width + c];
    } else {
      const int64_t slot = p % params.capacity;
      value = ring.kv[slot * width + c];
      logit = ring.gate[slot * width + c];
    }
  }
};

// One block per closing entry, one thread per channel (strided): the softmax and the weighted sum
// run over the slots in the CPU's order (previous window's A half, then this window).
__global__ void __launch_bounds__(kThreads)
    pool_kernel(CompressorParams params, const SegmentRows* segments, const CompressorRing* rings,
                const int32_t* entry_segment, const int32_t* entry_index, const float* kv, const float* gate,
                float* pooled) {
  await_previous_grid();
  const int64_t item = blockIdx.x;
  const int32_t s = entry_segment[item];
  const int64_t d = params.head_dim;
  if (s < 0) {  // a padding slot of a fixed-capacity launch
    for (int64_t e = threadIdx.x; e < d; e += kThreads) pooled[item * d + e] = 0.0f;
    return;
  }
  const int64_t w = entry_index[item];
  const RowSource source{params, segments[s], rings[s], kv, gate};
  const int64_t ratio = params.ratio;
  const bool has_previous = params.overlap && w > 0;
  for (int64_t e = threadIdx.x; e < d; e += kThreads) {
    float logits[kMaxSlots];
    float values[kMaxSlots];
    int slots = 0;
    if (has_previous)
      for (int64_t j = 0; j < ratio; ++j, ++slots) source.load((w - 1) * ratio + j, e, values[slots], logits[slots]);
    const int64_t channel = params.overlap ? d + e : e;
    for (int64_t j = 0; j < ratio; ++j, ++slots) source.load(w * ratio + j, channel, values[slots], logits[slots]);
    float max_logit = -INFINITY;
    for (int j = 0; j < slots; ++j) max_logit = fmaxf(max_logit, logits[j]);
    float total = 0.0f;
    for (int j = 0; j < slots; ++j) {
      logits[j] = expf(logits[j] - max_logit);
      total += logits[j];
    }
    for (int j = 0; j < slots; ++j) logits[j] /= total;
    float sum = 0.0f;
    for (int j = 0; j < slots; ++j) sum += values[j] * logits[j];
    pooled[item * d + e] = sum;
  }
}

// One block per segment: the call's rows the ring keeps, gate with ape added.
__global__ void __launch_bounds__(kThreads)
    keep_kernel(CompressorParams params, const SegmentRows* segments, const CompressorRing* rings,
                const int32_t* keep_from, const float* kv, const float* gate) {
  await_previous_grid();
  const int32_t s = blockIdx.x;
  const SegmentRows segment = segments[s];
  const CompressorRing ring = rings[s];
  const int64_t end = static_cast<int64_t>(segment.first_position) + segment.rows;
  const int64_t first = max(static_cast<int64_t>(segment.first_position), static_cast<int64_t>(keep_from[s]));
  const int64_t width = params.width;
  const int64_t total = (end - first) * width;
  for (int64_t i = threadIdx.x; i < total; i += kThreads) {
    const int64_t p = first + i / width;
    const int64_t c = i % width;
    const int64_t row = segment.row_begin + (p - segment.first_position);
    const int64_t slot = p % params.capacity;
    float logit = gate[row * width + c];
    if (params.ape) logit += params.ape[(p % params.ratio) * width + c];
    ring.kv[slot * width + c] = kv[row * width + c];
    ring.gate[slot * width + c] = logit;
  }
}

void check_params(const CompressorParams& params, const char* what) {
  const int slots = params.overlap ? 2 * params.ratio : params.ratio;
  if (params.ratio <= 0 || params.head_dim <= 0 || slots > kMaxSlots)
    fail(what, ": ratio ", params.ratio, " (", slots, " slots; at most ", kMaxSlots, ") and head_dim ",
         params.head_dim, " must be positive");
  if (params.width != (params.overlap ? 2 : 1) * params.head_dim)
    fail(what, ": width ", params.width, " for head_dim ", params.head_dim, params.overlap ? " with" : " without",
         " overlap");
  if (params.capacity < slots) fail(what, ": a ring of ", params.capacity, " rows cannot hold ", slots, " slots");
}

}  // namespace

void compressor_pool(const CompressorParams& params, const SegmentRows* segments, const CompressorRing* rings,
                     const int32_t* entry_segment, const int32_t* entry_index, int64_t count, const float* kv,
                     const float* gate, float* pooled, Stream stream) {
  if (launches_skipped()) return;
  if (count < 0) fail("cuda::compressor_pool: ", count, " entries");
  if (count == 0) return;
  check_params(params, "cuda::compressor_pool");
  if (count >= (int64_t{1} << 31)) fail("cuda::compressor_pool: ", count, " entries, over 2^31");
  launch(pool_kernel, static_cast<unsigned>(count), kThreads, 0, native(stream), params, segments, rings, entry_segment,
         entry_index, kv, gate, pooled);
  check_launch("cuda::compressor_pool");
}

void compressor_keep(const CompressorParams& params, const SegmentRows* segments, const CompressorRing* rings,
                     const int32_t* keep_from, int64_t segment_count, const float* kv, const float* gate,
                     Stream stream) {
  if (launches_skipped()) return;
  if (segment_count < 0) fail("cuda::compressor_keep: ", segment_count, " segments");
  if (segment_count == 0) return;
  check_params(params, "cuda::compressor_keep");
  launch(keep_kernel, static_cast<unsigned>(segment_count), kThreads, 0, native(stream), params, segments, rings,
         keep_from, kv, gate);
  check_launch("cuda::compressor_keep");
}

}  // namespace deepinfer::kernels::cuda
