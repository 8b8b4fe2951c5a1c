// sink_attention: model/attention.cpp's attend_head over the keys attention_core gathers (window
// positions oldest..p, then the compressed entries ascending), read from the stored rows on the
// device. Where sink_attention_on_tensor_cores holds (V4.1's FP8 window and FP4 entries), the
// tensor-core kernel of sink_attention_mma.cu runs instead; this SIMT kernel serves F32 keys
// (V4's cache), other head widths and DEEPINFER_CUDA_SIMT=1.
//
// One thread block per (call row, group of kHeadsPerBlock heads), one warp per head. The row's
// keys go through shared memory a tile of 16 at a time, each decoded once (by all the block's
// threads) for every head of the group. A warp keeps an online softmax: each lane owns a strip of
// output elements (4 side by side where head_dim is a multiple of 128, so shared memory is read 16
// bytes at a time), takes its part of the tile's 16 dot products, and halving exchanges complete
// them (16 shuffles a tile, where a butterfly a key took 80; the same tree, so the same sums where
// a lane holds one value a strip); lane 2k's key k gets its weight there and the lanes read it
// back to add P V and the denominator key by key. The running max starts at the sink logit (so every
// exponent is of a value <= 0), and the sink joins the denominator at the end; it contributes no
// value.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "kernels/cuda/attention_kernels.h"
#include "kernels/cuda/attention_keys.cuh"
#include "kernels/cuda/launch_gate.h"
#include "kernels/cuda/sink_attention_mma.h"
#include "kernels/cuda/cache_codes.cuh"
#include "kernels/cuda/cuda_common.cuh"

namespace deepinfer::kernels::cuda {
namespace {

using namespace detail;

constexpr int kHeadsPerBlock = 8;
constexpr int kThreads = kHeadsPerBlock * kWarp;
constexpr int kMaxHeadDim = 512;
// Keys decoded per barrier pair: 16 keys of 512 floats are 32 KiB of shared memory.
constexpr int kKeysPerTile = 16;
static_assert(kKeysPerTile == kWarp / 2, "a tile's scores end in lane pairs, key k in lanes 2k and 2k + 1");

// Values [e, e + V) of a stored row into shared memory: one 16-byte load for aligned f32 rows.
template <int V>
__device__ __forceinline__ void decode_values(RowFormat format, int width, const uint8_t* row, int e, float* out) {
  if constexpr (V == 4) {
    const uint8_t* at = row + 4 * static_cast<int64_t>(e);
    if (!quantizes(format, width) && (reinterpret_cast<uintptr_t>(at) & 15u) == 0) {
      *reinterpret_cast<float4*>(out) = *reinterpret_cast<const float4*>(at);
      return;
    }
  }
#pragma unroll
  for (int v = 0; v < V; ++v) out[v] = stored_value(format, width, row, e + v);
}

// One halving step over values [0, 2 Half) of a lane: the lane whose bit (Half * 2) is set keeps
// the upper half, its partner the lower, and each adds the other's part of what it keeps.
template <int Half>
__device__ __forceinline__ void exchange_halves(float (&part)[kKeysPerTile], int lane) {
  constexpr int kOffset = 2 * Half;
  const bool upper = (lane & kOffset) != 0;
#pragma unroll
  for (int k = 0; k < Half; ++k) {
    const float keep = upper ? part[k + Half] : part[k];
    const float give = upper ? part[k] : part[k + Half];
    part[k] = keep + __shfl_xor_sync(kFullMask, give, kOffset);
  }
}

// V values a lane side by side: lane l owns elements V (32 i + l) + v. V = 4 (16-byte shared
// loads) where head_dim is a multiple of 128.
template <int V>
__global__ void __launch_bounds__(kThreads)
    sink_attention_kernel(const __grid_constant__ AttentionParams params, const SegmentRows* segments,
                          const int32_t* row_segment, const float* q, float* attended) {
  constexpr int kSpans = kMaxHeadDim / (kWarp * V);
  using Values = float[V];
  await_previous_grid();
  extern __shared__ __align__(16) float tile_keys[];  // [kKeysPerTile, head_dim]
  __shared__ const uint8_t* tile_rows[kKeysPerTile];
  const int64_t t = blockIdx.x;
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int head = static_cast<int>(blockIdx.y) * kHeadsPerBlock + static_cast<int>(threadIdx.x) / kWarp;
  const bool head_present = head < params.heads;  // a head count not a multiple of 8 leaves warps idle
  const int head_dim = params.head_dim;
  const RowKeys keys = row_keys(params, segments, row_segment, t);
  const int64_t key_count = keys.window_keys + keys.entry_keys;
  const auto element = [&](int i) { return (i * kWarp + lane) * V; };

  const int64_t pair = t * params.heads + head;
  Values query[kSpans];
  Values accumulated[kSpans];
#pragma unroll
  for (int i = 0; i < kSpans; ++i) {
#pragma unroll
    for (int v = 0; v < V; ++v) {
      const int e = element(i) + v;
      query[i][v] = head_present && e < head_dim ? q[pair * head_dim + e] : 0.0f;
      accumulated[i][v] = 0.0f;
    }
  }
  const float sink = head_present ? params.sink[head] : 0.0f;
  float running_max = sink;
  float weight_sum = 0.0f;  // sum of exp(logit - running_max) over the keys so far

  for (int64_t tile_first = 0; tile_first < key_count; tile_first += kKeysPerTile) {
    const int64_t remaining = key_count - tile_first;
    const int tile_size = static_cast<int>(remaining < kKeysPerTile ? remaining : kKeysPerTile);
    if (static_cast<int>(threadIdx.x) < tile_size)
      tile_rows[threadIdx.x] = key_row(params, keys, tile_first + static_cast<int64_t>(threadIdx.x));
    __syncthreads();  // also: every warp is done with the previous tile's keys
    for (int item = static_cast<int>(threadIdx.x) * V; item < tile_size * head_dim; item += kThreads * V) {
      const int key = item / head_dim;
      const int e = item - key * head_dim;
      const bool entry = tile_first + key >= keys.window_keys;
      if (entry) decode_values<V>(params.entries.format, params.entries.width, tile_rows[key], e, tile_keys + item);
      else decode_values<V>(params.window_format, head_dim, tile_rows[key], e, tile_keys + item);
    }
    __syncthreads();
    if (!head_present) continue;

    // This lane's part of every key's dot product, then halving exchanges: at each step a lane
    // keeps half of its keys and adds its partner's part of them, so after four steps lane l
    // holds key l / 2's sum over half the lanes, and one more add completes it.
    float part[kKeysPerTile];
#pragma unroll
    for (int key = 0; key < kKeysPerTile; ++key) {
      part[key] = 0.0f;
      if (key >= tile_size) continue;
      const float* row = tile_keys + key * head_dim;
#pragma unroll
      for (int i = 0; i < kSpans; ++i) {
        if (element(i) >= head_dim) break;
        Values k;
        if constexpr (V == 4) *reinterpret_cast<float4*>(k) = *reinterpret_cast<const float4*>(row + element(i));
        else k[0] = row[element(i)];
#pragma unroll
        for (int v = 0; v < V; ++v) part[key] = fmaf(query[i][v], k[v], part[key]);
      }
    }
    exchange_halves<kKeysPerTile / 2>(part, lane);
    exchange_halves<kKeysPerTile / 4>(part, lane);
    exchange_halves<kKeysPerTile / 8>(part, lane);
    exchange_halves<kKeysPerTile / 16>(part, lane);
    const int my_key = lane / 2;
    const float dot = part[0] + __shfl_xor_sync(kFullMask, part[0], 1);
    const float logit = my_key < tile_size ? dot * params.scale : -INFINITY;
    float tile_max = logit;
#pragma unroll
    for (int offset = 2; offset < kWarp; offset *= 2) tile_max = fmaxf(tile_max, __shfl_xor_sync(kFullMask, tile_max, offset));
    const float new_max = fmaxf(running_max, tile_max);
    const float rescale = expf(running_max - new_max);
    const float weight = expf(logit - new_max);
    weight_sum *= rescale;
#pragma unroll
    for (int i = 0; i < kSpans; ++i)
#pragma unroll
      for (int v = 0; v < V; ++v) accumulated[i][v] *= rescale;
#pragma unroll
    for (int key = 0; key < kKeysPerTile; ++key) {
      const float key_weight = __shfl_sync(kFullMask, weight, 2 * key);
      if (key >= tile_size) continue;
      weight_sum += key_weight;  // key by key, as the denominator always summed
      const float* row = tile_keys + key * head_dim;
#pragma unroll
      for (int i = 0; i < kSpans; ++i) {
        if (element(i) >= head_dim) break;
        Values k;
        if constexpr (V == 4) *reinterpret_cast<float4*>(k) = *reinterpret_cast<const float4*>(row + element(i));
        else k[0] = row[element(i)];
#pragma unroll
        for (int v = 0; v < V; ++v) accumulated[i][v] = fmaf(key_weight, k[v], accumulated[i][v]);
      }
    }
    running_max = new_max;
  }

  if (!head_present) return;
  // No keys: weight_sum 0 and accumulated 0, so the output is 0 (the sink takes all the mass).
  const float denominator = weight_sum + expf(sink - running_max);
#pragma unroll
  for (int i = 0; i < kSpans; ++i) {
#pragma unroll
    for (int v = 0; v < V; ++v) {
      const int e = element(i) + v;
      if (e < head_dim) attended[pair * head_dim + e] = accumulated[i][v] / denominator;
    }
  }
}

void check_params(const AttentionParams& params) {
  if (params.heads < 0 || params.head_dim < 0 || params.window < 0 || params.window_capacity < 0 ||
      params.window_row_bytes < 0 || params.ratio < 0 || params.pick_stride < 0)
    fail("cuda::sink_attention: negative size (heads ", params.heads, ", head_dim ", params.head_dim, ", window ",
         params.window, ", window_capacity ", params.window_capacity, ", window_row_bytes ", params.window_row_bytes,
         ", ratio ", params.ratio, ", pick_stride ", params.pick_stride, ")");
  if (params.head_dim > kMaxHeadDim)
    fail("cuda::sink_attention: head_dim ", params.head_dim, " over the kernel's ", kMaxHeadDim);
  if (params.range_keys < 0 || params.range_keys % 32 != 0)
    fail("cuda::sink_attention: key ranges of ", params.range_keys, " keys (a multiple of 32 expected, or 0)");
  const int64_t window_stored = stored_row_bytes(params.window_format, params.head_dim);
  if (params.window_row_bytes < window_stored)
    fail("cuda::sink_attention: window rows of ", params.window_row_bytes, " bytes cannot hold a stored row of ",
         window_stored);
  if (params.compressed == CompressedKeys::None) return;
  if (params.compressed != CompressedKeys::Visible && params.compressed != CompressedKeys::Picked)
    fail("cuda::sink_attention: unknown compressed keys ", static_cast<int32_t>(params.compressed));
  const PagedRegion& entries = params.entries;
  if (params.ratio <= 0 || entries.ratio <= 0 || entries.block_tokens <= 0 || entries.offset < 0)
    fail("cuda::sink_attention: compressed entries need a positive ratio (", params.ratio, ", region ", entries.ratio,
         ") and block size (", entries.block_tokens, ") and an offset >= 0 (", entries.offset, ")");
  if (entries.width != params.head_dim)
    fail("cuda::sink_attention: entries of width ", entries.width, " for head_dim ", params.head_dim);
  const int64_t entry_stored = stored_row_bytes(entries.format, entries.width);
  if (entries.row_bytes < entry_stored)
    fail("cuda::sink_attention: entry rows of ", entries.row_bytes, " bytes cannot hold a stored row of ",
         entry_stored);
  if (params.compressed == CompressedKeys::Picked && (params.picks == nullptr || params.pick_count == nullptr))
    fail("cuda::sink_attention: picked entries without picks");
}

}  // namespace

void sink_attention(const AttentionParams& params, const SegmentRows* segments, const int32_t* row_segment,
                    int64_t rows, const float* q, float* attended, Stream stream) {
  if (launches_skipped()) return;
  if (rows < 0) fail("cuda::sink_attention: negative rows ", rows);
  check_params(params);
  if (rows == 0 || params.heads == 0 || params.head_dim == 0) return;
  if (rows >= (int64_t{1} << 31)) fail("cuda::sink_attention: ", rows, " rows, over 2^31");
  if (sink_attention_on_tensor_cores(params)) {
    detail::sink_attention_mma(params, segments, row_segment, rows, q, attended, stream);
    return;
  }
  const dim3 grid(static_cast<unsigned>(rows),
                  static_cast<unsigned>((params.heads + kHeadsPerBlock - 1) / kHeadsPerBlock));
  const std::size_t shared_bytes = static_cast<std::size_t>(kKeysPerTile) * params.head_dim * sizeof(float);
  if (params.head_dim % (kWarp * 4) == 0)
    launch(sink_attention_kernel<4>, grid, kThreads, shared_bytes, native(stream), params, segments, row_segment, q,
           attended);
  else
    launch(sink_attention_kernel<1>, grid, kThreads, shared_bytes, native(stream), params, segments, row_segment, q,
           attended);
  check_launch("cuda::sink_attention");
}

}  // namespace deepinfer::kernels::cuda
