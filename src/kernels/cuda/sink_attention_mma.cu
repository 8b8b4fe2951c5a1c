// sink_attention on the tensor cores: the same sink softmax as sink_attention.cu's SIMT kernel
// (model/attention.cpp attend_head over attention_core's keys), with every key read once for
// 16 heads instead of once per head.
//
// Layout. One thread block per (call row, 16 heads): the 16 heads are one m16n8k16 MMA's M, so
// S = Q K^T and O = P V are MMAs over the block's keys, which go through shared memory 32 at a
// time, decoded once to BF16 (exact: FP8 and FP4 codes under power-of-two or e4m3 scales have at
// most 6 significant bits). The head dimension is cut into 8 slices, one per warp:
//   1. each warp's S is over its slice of the dimensions (a partial dot product per (head, key)),
//      written to shared memory;
//   2. 256 threads, one per (head, key pair), sum the 8 partials in slice order, keep the online
//      softmax (running max from the sink logit, as the SIMT kernel) and write the weights P;
//   3. each warp rescales its accumulators and adds P V for its slice of the output dimensions.
// So no warp computes S twice, and each warp's accumulators are 16 heads x 64 dimensions
// (32 registers a lane) however wide the head.
//
// Numerics (mma_common.cuh): q and the weights P are f32, split into three BF16 terms (24 bits);
// the keys are exact in BF16; every MMA sums its 16 exact products from zero and an f32 add
// takes them into the accumulator. So S and O are f32 sums in another order than the SIMT
// kernel's, as two f32 orders differ.
//
// Shared memory per block: 32 keys x (head_dim + 8) BF16 (the 8 spread an ldmatrix's rows over
// the banks) + 8 x 16 x 40 partial scores + 16 x 40 weights: 54 KiB at head_dim 512.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "kernels/cuda/attention_keys.cuh"
#include "kernels/cuda/cache_codes.cuh"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/mma_common.cuh"
#include "kernels/cuda/sink_attention_mma.h"

namespace deepinfer::kernels::cuda::detail {
namespace {

using mma::kPlanes;

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * kWarp;
constexpr int kHeads = 16;     // one MMA's M
constexpr int kTileKeys = 32;  // keys per pass through shared memory
constexpr int kMaxHeadDim = 512;
constexpr int kMaxSliceDims = kMaxHeadDim / kWarps;
constexpr int kMaxScoreSteps = kMaxSliceDims / 16;  // S's k steps in a warp's slice
constexpr int kMaxOutputTiles = kMaxSliceDims / 8;  // O's n tiles in a warp's slice
constexpr int kScoreStride = kTileKeys + 8;         // floats per (head) row of scores or weights
constexpr int kKeyPad = 8;                          // BF16 past each key row
constexpr int kChunk = 8;                           // values decoded per 16-byte store

static_assert(kThreads == kHeads * kTileKeys / 2, "step 2 takes two keys of one head per thread");

struct SharedLayout {
  int key_stride = 0;  // BF16 per key row
  std::size_t keys_bytes = 0;
  std::size_t bytes = 0;
};

__host__ __device__ inline SharedLayout shared_layout(int head_dim) {
  SharedLayout layout;
  layout.key_stride = head_dim + kKeyPad;
  layout.keys_bytes = static_cast<std::size_t>(kTileKeys) * layout.key_stride * 2;
  layout.bytes = layout.keys_bytes + static_cast<std::size_t>(kWarps + 1) * kHeads * kScoreStride * sizeof(float);
  return layout;
}

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row)));
}

__device__ __forceinline__ void ldmatrix_x2(uint32_t (&r)[2], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(shared_address(row)));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row)));
}

// The three BF16 terms of the pair (x, y) as three bf16x2 words (low half: x).
__device__ __forceinline__ void split_pair(float x, float y, uint32_t (&word)[kPlanes]) {
  uint32_t tx[kPlanes];
  uint32_t ty[kPlanes];
  mma::split_value(x, tx);
  mma::split_value(y, ty);
#pragma unroll
  for (int p = 0; p < kPlanes; ++p) word[p] = tx[p] | (ty[p] << 16);
}

// Code value times 2^-120 (e4m3) or 2^-126 (e2m1) by placing its bits under the f32 exponent's
// low bits (exponent 0 lands on an f32 subnormal of the right value); the decoders below scale
// them back exactly.
__device__ __forceinline__ float e4m3_shifted(uint32_t byte) {
  return __uint_as_float(((byte & 0x7fu) << 20) | ((byte & 0x80u) << 24));
}
__device__ __forceinline__ float e2m1_shifted(uint32_t nibble) {
  return __uint_as_float(((nibble & 0x7u) << 22) | ((nibble & 0x8u) << 28));
}

__device__ __forceinline__ uint32_t load_u32_any(const uint8_t* p) {
  if ((reinterpret_cast<uintptr_t>(p) & 3u) == 0) return *reinterpret_cast<const uint32_t*>(p);
  return load_u32_bytes(p);
}

// Values [first, first + 8) of a stored row (a quantising format; first a multiple of 8) as
// eight BF16, equal to stored_value's floats (decode_value's products, rounded to BF16 exactly).
// A NaN code or scale takes decode_value's path, value by value.
__device__ __forceinline__ uint4 decode_chunk(RowFormat format, int width, const uint8_t* row, int first) {
  const uint8_t* scales = row + code_bytes(format, width);
  const uint32_t scale_byte = scales[first / cache_block(format)];
  float v[kChunk];
  if (format == RowFormat::Fp8Ue8m0x32) {
    const uint32_t low = load_u32_any(row + first);
    const uint32_t high = load_u32_any(row + first + 4);
    if (scale_byte == 255u || mma::e4m3_has_nan(low) || mma::e4m3_has_nan(high)) {
#pragma unroll
      for (int i = 0; i < kChunk; ++i) v[i] = decode_value(format, row[first + i], scale_byte);
    } else {
      const float scale = e8m0_value(scale_byte);
#pragma unroll
      for (int i = 0; i < kChunk; ++i)
        v[i] = e4m3_shifted(((i < 4 ? low : high) >> (8 * (i % 4))) & 0xffu) * 0x1p120f * scale;
    }
  } else {
    const uint32_t codes = load_u32_any(row + first / 2);
    const bool nan_scale = format == RowFormat::Fp4E4m3x16 ? (scale_byte & 0x7fu) == 0x7fu : scale_byte == 255u;
    const float scale = nan_scale ? quiet_nan()
                        : format == RowFormat::Fp4E4m3x16 ? e4m3_value(scale_byte)
                                                          : e8m0_value(scale_byte);
#pragma unroll
    for (int i = 0; i < kChunk; ++i) v[i] = nan_scale ? scale : e2m1_shifted(codes >> (4 * i)) * 0x1p126f * scale;
  }
  uint4 out;
  out.x = mma::bf16_bits_rn(v[0]) | (mma::bf16_bits_rn(v[1]) << 16);
  out.y = mma::bf16_bits_rn(v[2]) | (mma::bf16_bits_rn(v[3]) << 16);
  out.z = mma::bf16_bits_rn(v[4]) | (mma::bf16_bits_rn(v[5]) << 16);
  out.w = mma::bf16_bits_rn(v[6]) | (mma::bf16_bits_rn(v[7]) << 16);
  return out;
}

__global__ void __launch_bounds__(kThreads, 2)
    sink_attention_mma_kernel(const __grid_constant__ AttentionParams params, const SegmentRows* segments,
                              const int32_t* row_segment, const float* q, float* attended) {
  await_previous_grid();
  extern __shared__ __align__(16) unsigned char shared[];
  __shared__ const uint8_t* tile_rows[kTileKeys];
  __shared__ float rescale[kHeads];
  __shared__ float denominator[kHeads];
  const int head_dim = params.head_dim;
  const SharedLayout layout = shared_layout(head_dim);
  auto* keys_bf16 = reinterpret_cast<uint16_t*>(shared);
  auto* partial = reinterpret_cast<float*>(shared + layout.keys_bytes);  // [kWarps][kHeads][kScoreStride]
  float* weights = partial + kWarps * kHeads * kScoreStride;               // [kHeads][kScoreStride]

  const int64_t t = blockIdx.x;
  const int head0 = static_cast<int>(blockIdx.y) * kHeads;
  const int thread = static_cast<int>(threadIdx.x);
  const int warp = thread / kWarp;
  const int lane = thread % kWarp;
  const int g = lane / 4;  // the MMA fragments' row group
  const int c = lane % 4;  // and column pair
  const int slice = head_dim / kWarps;
  const int dim0 = warp * slice;
  const int score_steps = slice / 16;
  const int output_tiles = slice / 8;
  const RowKeys keys = row_keys(params, segments, row_segment, t);
  const int64_t key_count = keys.window_keys + keys.entry_keys;

  // q's A fragments for this warp's slice: rows g and g + 8 (heads), columns 2c, 2c + 1 and 8
  // past them (dimensions), in three planes.
  uint32_t qa[kMaxScoreSteps][kPlanes][4];
#pragma unroll
  for (int step = 0; step < kMaxScoreSteps; ++step) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int head = head0 + g + (r % 2) * 8;
      const int dim = dim0 + 16 * step + 2 * c + (r / 2) * 8;
      float x = 0.0f;
      float y = 0.0f;
      if (step < score_steps && head < params.heads) {
        const float* at = q + (t * params.heads + head) * head_dim + dim;
        x = at[0];
        y = at[1];
      }
      uint32_t word[kPlanes];
      split_pair(x, y, word);
#pragma unroll
      for (int p = 0; p < kPlanes; ++p) qa[step][p][r] = word[p];
    }
  }

  // Step 2's thread: head (thread / 16), keys (thread % 16) and 16 past it.
  const int softmax_head = thread / 16;
  const int softmax_key = thread % 16;
  const float sink = head0 + softmax_head < params.heads ? params.sink[head0 + softmax_head] : 0.0f;
  float running_max = sink;
  float weight_sum = 0.0f;

  float acc[kMaxOutputTiles][4];
#pragma unroll
  for (int n = 0; n < kMaxOutputTiles; ++n)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[n][i] = 0.0f;

  const int chunks = head_dim / kChunk;
  for (int64_t tile_first = 0; tile_first < key_count; tile_first += kTileKeys) {
    const int64_t remaining = key_count - tile_first;
    const int tile_size = static_cast<int>(remaining < kTileKeys ? remaining : kTileKeys);
    if (thread < tile_size) tile_rows[thread] = key_row(params, keys, tile_first + thread);
    __syncthreads();  // also: the previous tile's keys and weights are no longer read
    // Keys past the tile's end are zeros: their weight is 0, and 0 x NaN would not be.
    for (int item = thread; item < kTileKeys * chunks; item += kThreads) {
      const int key = item / chunks;
      const int first = (item - key * chunks) * kChunk;
      uint4 values = make_uint4(0u, 0u, 0u, 0u);
      if (key < tile_size) {
        const bool entry = tile_first + key >= keys.window_keys;
        values = entry ? decode_chunk(params.entries.format, head_dim, tile_rows[key], first)
                       : decode_chunk(params.window_format, head_dim, tile_rows[key], first);
      }
      *reinterpret_cast<uint4*>(keys_bf16 + key * layout.key_stride + first) = values;
    }
    __syncthreads();

    // 1. Partial scores over this warp's slice: n tile j is keys 8 j .. 8 j + 7.
    const int key_tiles = (tile_size + 7) / 8;
    for (int j = 0; j < key_tiles; ++j) {
      float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      // ldmatrix rows: lane l gives key 8 j + l % 8 at dimension 8 (l / 8) of a 32-wide span,
      // so the four matrices are two k steps' (b0, b1).
      const uint16_t* key_at = keys_bf16 + (8 * j + lane % 8) * layout.key_stride + dim0 + 8 * (lane / 8);
#pragma unroll
      for (int step = 0; step < kMaxScoreSteps; step += 2) {
        if (step >= score_steps) break;
        if (step + 1 < score_steps) {
          uint32_t b[4];
          ldmatrix_x4(b, key_at + 16 * step);
#pragma unroll
          for (int p = 0; p < kPlanes; ++p) {
            mma::mma_bf16_add(s, qa[step][p][0], qa[step][p][1], qa[step][p][2], qa[step][p][3], b[0], b[1]);
            mma::mma_bf16_add(s, qa[step + 1][p][0], qa[step + 1][p][1], qa[step + 1][p][2], qa[step + 1][p][3],
                              b[2], b[3]);
          }
        } else {
          uint32_t b[2];
          ldmatrix_x2(b, key_at + 16 * step);  // lanes 0..15's rows: the k step's two matrices
#pragma unroll
          for (int p = 0; p < kPlanes; ++p)
            mma::mma_bf16_add(s, qa[step][p][0], qa[step][p][1], qa[step][p][2], qa[step][p][3], b[0], b[1]);
        }
      }
      float* out = partial + (warp * kHeads + g) * kScoreStride + 8 * j + 2 * c;
      *reinterpret_cast<float2*>(out) = make_float2(s[0], s[1]);
      *reinterpret_cast<float2*>(out + 8 * kScoreStride) = make_float2(s[2], s[3]);
    }
    __syncthreads();

    // 2. Scores, the online softmax and the weights.
    float score[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int key = softmax_key + 16 * i;
      float dot = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) dot += partial[(w * kHeads + softmax_head) * kScoreStride + key];
      score[i] = key < tile_size ? dot * params.scale : -INFINITY;
    }
    float tile_max = fmaxf(score[0], score[1]);
#pragma unroll
    for (int offset = 8; offset > 0; offset >>= 1) tile_max = fmaxf(tile_max, __shfl_xor_sync(kFullMask, tile_max, offset));
    const float new_max = fmaxf(running_max, tile_max);
    const float weight0 = expf(score[0] - new_max);
    const float weight1 = expf(score[1] - new_max);
    float tile_sum = weight0 + weight1;
#pragma unroll
    for (int offset = 8; offset > 0; offset >>= 1) tile_sum += __shfl_xor_sync(kFullMask, tile_sum, offset);
    const float scale_old = expf(running_max - new_max);
    weight_sum = weight_sum * scale_old + tile_sum;
    running_max = new_max;
    weights[softmax_head * kScoreStride + softmax_key] = weight0;
    weights[softmax_head * kScoreStride + softmax_key + 16] = weight1;
    if (softmax_key == 0) rescale[softmax_head] = scale_old;
    __syncthreads();

    // 3. O = O * rescale + P V over this warp's output slice: k step u is keys 16 u .. 16 u + 15.
    const float rescale_low = rescale[g];
    const float rescale_high = rescale[g + 8];
#pragma unroll
    for (int n = 0; n < kMaxOutputTiles; ++n) {
      acc[n][0] *= rescale_low;
      acc[n][1] *= rescale_low;
      acc[n][2] *= rescale_high;
      acc[n][3] *= rescale_high;
    }
    const int key_steps = (tile_size + 15) / 16;
    for (int u = 0; u < key_steps; ++u) {
      uint32_t pa[4][kPlanes];
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const float2 w = *reinterpret_cast<const float2*>(weights + (g + (r % 2) * 8) * kScoreStride + 16 * u +
                                                          2 * c + (r / 2) * 8);
        split_pair(w.x, w.y, pa[r]);
      }
      // ldmatrix rows (transposed): lane l gives key 16 u + l % 8 + 8 ((l / 8) % 2) at dimension
      // 8 (l / 16) of a 16-wide span: (b0, b1) of two n tiles.
      const uint16_t* value_at =
          keys_bf16 + (16 * u + lane % 8 + 8 * ((lane / 8) % 2)) * layout.key_stride + dim0 + 8 * (lane / 16);
#pragma unroll
      for (int n = 0; n < kMaxOutputTiles; n += 2) {
        if (n >= output_tiles) break;
        uint32_t b[4];
        ldmatrix_x4_trans(b, value_at + 8 * n);
#pragma unroll
        for (int p = 0; p < kPlanes; ++p) {
          mma::mma_bf16_add(acc[n], pa[0][p], pa[1][p], pa[2][p], pa[3][p], b[0], b[1]);
          mma::mma_bf16_add(acc[n + 1], pa[0][p], pa[1][p], pa[2][p], pa[3][p], b[2], b[3]);
        }
      }
    }
  }

  // No keys: weight_sum 0 and acc 0, so the output is 0 (the sink takes all the mass).
  if (softmax_key == 0) denominator[softmax_head] = weight_sum + expf(sink - running_max);
  __syncthreads();
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int head = head0 + g + 8 * h;
    if (head >= params.heads) continue;
    const float d = denominator[g + 8 * h];
    float* out = attended + (t * params.heads + head) * head_dim + dim0 + 2 * c;
#pragma unroll
    for (int n = 0; n < kMaxOutputTiles; ++n) {
      if (n >= output_tiles) break;
      out[8 * n] = acc[n][2 * h] / d;
      out[8 * n + 1] = acc[n][2 * h + 1] / d;
    }
  }
}

}  // namespace

void sink_attention_mma(const AttentionParams& params, const SegmentRows* segments, const int32_t* row_segment,
                        int64_t rows, const float* q, float* attended, Stream stream) {
  const SharedLayout layout = shared_layout(params.head_dim);
  if (layout.bytes > 48 * 1024) {
    const cudaError_t status = cudaFuncSetAttribute(sink_attention_mma_kernel,
                                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                    static_cast<int>(layout.bytes));
    if (status != cudaSuccess) {
      (void)cudaGetLastError();  // do not leave the refusal for the next check
      fail("cuda::sink_attention: head_dim ", params.head_dim, " needs ", layout.bytes,
           " bytes of shared memory: ", cudaGetErrorString(status));
    }
  }
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>((params.heads + kHeads - 1) / kHeads));
  launch(sink_attention_mma_kernel, grid, kThreads, layout.bytes, native(stream), params, segments, row_segment, q,
         attended);
  check_launch("cuda::sink_attention (tensor cores)");
}

}  // namespace deepinfer::kernels::cuda::detail

namespace deepinfer::kernels::cuda {

bool sink_attention_on_tensor_cores(const AttentionParams& params) {
  const auto exact = [&](RowFormat format) { return detail::quantizes(format, params.head_dim); };
  const bool entries_exact = params.compressed == CompressedKeys::None || exact(params.entries.format);
  return params.tensor_cores && params.head_dim > 0 && params.head_dim % 128 == 0 &&
         params.head_dim <= detail::kMaxHeadDim && exact(params.window_format) && entries_exact;
}

}  // namespace deepinfer::kernels::cuda
