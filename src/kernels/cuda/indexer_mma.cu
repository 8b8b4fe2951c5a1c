// V4.1's index scores on the tensor cores, bit for bit the SIMT kernel's (indexer.cu).
//
// Why integers give the CPU's bits: V4.1's index queries are fake-quantised to FP4 (e2m1 under an
// E8M0 scale per 32 values) and its index keys are stored so, so every product q_i k_i of a
// 32-value block is a small integer (|q code| < 16, |k code| <= 12 in units of half a step) times
// one power of two, 2^(E_b), for the block. model::dot sums the products in a fixed order of
// rounded f32 steps; but when the blocks' exponents span at most D bits, every partial sum of any
// order is an integer multiple of 2^(min E_b) below 2^24 of them (the bound: blocks x 32 x 15 x 12
// x 2^D < 2^24, D = 9 at 128 values), so no step rounds and every order gives the exact sum. So
// the kernel takes each block's exact integer sum from one m16n8k32 s8 MMA, scales it by 2^(E_b)
// and adds the blocks in f32 (exact, by the same bound): the CPU's dot, to the bit. A (head,
// entry) outside the bound (a span over D, an exponent outside f32's normal range, a NaN scale,
// a q that is not such codes) takes model::dot's order from the stored values instead, as the
// SIMT kernel computes it; real rows never need it, the tests make some that do.
//
// The rest is the SIMT kernel's arithmetic: relu times score_scale, then the head sum in
// ascending head order by one thread an entry, contracted as the CPU build contracts it.
//
// A block takes one row and up to 16 tiles of 64 entries. Its queries become codes once, in the
// key's nibble order (a word's four low nibbles, then its four high ones: each 8-value group is
// permuted the same way on both sides, so the sums do not change). Each warp multiplies 16 heads
// by 32 entries a 32-value block at a time; a block's MMA starts from the integer 0x4B400000,
// so its result read as f32 is 1.5 * 2^23 + the sum, exact for sums below 2^22.
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "core/error.h"
#include "kernels/cuda/indexer_mma.h"
#include "kernels/cuda/indexer_rows.cuh"
#include "kernels/cuda/launch_gate.h"

namespace deepinfer::kernels::cuda::detail {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / kWarp;
constexpr int kTileEntries = 64;
constexpr int kMaxTilesPerBlock = 16;
constexpr int kMaxHeads = 64;
constexpr int kMaxHeadDim = 128;
constexpr int kMaxBlocks = kMaxHeadDim / 32;
// Code rows padded by 16 bytes: a fragment's eight rows x four words land in 32 distinct banks.
constexpr int kCodePitch = kMaxHeadDim + 16;
constexpr int kTermPitch = kMaxHeads + 1;
constexpr int32_t kBlockSum = 32 * 15 * 12;   // the largest |sum| of one block, in its units
constexpr int32_t kNotExact = 1 << 20;        // a span that fails every bound
constexpr int32_t kZeroBlock = INT32_MIN;     // an all-zero q block: its products vanish
constexpr int32_t kMinExponent = -126;        // f32's smallest normal exponent
constexpr int32_t kMaxExponent = 100;         // far below overflow for sums under 2^24 units
constexpr int kFloatBias = 0x4B400000;        // 1.5 * 2^23 as f32 bits
constexpr float kFloatBiasValue = 12582912.0f;
constexpr int64_t kTargetBlocks = 528;        // 4 a streaming multiprocessor of an H100 / H200

struct Shared {
  alignas(16) uint8_t q_codes[kMaxHeads * kCodePitch];
  alignas(16) uint8_t key_codes[kTileEntries * kCodePitch];
  float q_units[kMaxHeads][kMaxBlocks];  // 2^(E) of a q block's codes; 0 for a zero or inexact block
  float key_units[kTileEntries][kMaxBlocks];
  int32_t q_exponents[kMaxHeads][kMaxBlocks];
  int32_t q_low[kMaxHeads];  // the lowest exponent of a head's non-zero blocks
  int32_t q_span[kMaxHeads]; // highest - lowest; kNotExact where a block is not codes
  int32_t key_low[kTileEntries];
  int32_t key_span[kTileEntries];
  float weights[kMaxHeads];
  float terms[kTileEntries * kTermPitch];
  const uint8_t* key_rows[kTileEntries];
};

__device__ __forceinline__ float power_of_two(int32_t exponent) {  // a normal exponent
  return __int_as_float((exponent + 127) << 23);
}

// Element c of a row (c < head_dim) goes to byte position code_position(c) of its code row: each
// group of 8 holds its even elements, then its odd ones, as a word's low and high nibbles decode.
__device__ __forceinline__ int32_t code_position(int32_t c) {
  return (c & ~7) + ((c & 1) << 2) + ((c & 7) >> 1);
}

// Four e2m1 codes (the low nibble of each byte) as four signed bytes of twice their value.
__device__ __forceinline__ uint32_t e2m1_doubled(uint32_t nibbles) {
  const uint32_t magnitude_codes = nibbles & 0x07070707u;
  const uint32_t packed = magnitude_codes | (magnitude_codes >> 4);
  const uint32_t selector = (packed & 0xffu) | ((packed >> 8) & 0xff00u);
  const uint32_t magnitude = __byte_perm(0x03020100u, 0x0c080604u, selector);  // 0 1 2 3 4 6 8 12
  const uint32_t negative = ((nibbles >> 3) & 0x01010101u) * 0xffu;
  return (magnitude & ~negative) | (__vsub4(0u, magnitude) & negative);
}

__device__ __forceinline__ uint32_t load_shared_word(const uint8_t* p) { return *reinterpret_cast<const uint32_t*>(p); }

__device__ __forceinline__ void mma_s8(int32_t (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// model::dot of a q head and a stored key, for the pairs the integer path cannot take.
__device__ __noinline__ float dot_in_cpu_order(const float* q_head, const uint8_t* key_row, int32_t head_dim) {
  const StoredRowLayout layout{RowFormat::Fp4Ue8m0x32, true, head_dim / 2, head_dim / 32};
  return dot_as_cpu([&](int32_t i) { return q_head[i]; },
                    [&](int32_t i) { return stored_value(key_row, i, layout); }, head_dim);
}

// A warp turns one 32-value block of a q head into codes: E = floor(log2 amax) - 3 makes every
// fake-quantised value an integer below 16 in units of 2^E; anything else is marked not exact.
__device__ __forceinline__ void quantize_q_block(Shared& s, const float* row_q, int32_t h, int32_t b, int32_t head_dim) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int32_t c = b * 32 + lane;
  const float v = row_q[h * head_dim + c];
  float amax = fabsf(v);
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset >>= 1) amax = fmaxf(amax, __shfl_xor_sync(kFullMask, amax, offset));
  const bool finite = __all_sync(kFullMask, isfinite(v));
  const int32_t top = static_cast<int32_t>((__float_as_uint(amax) >> 23) & 0xffu) - 127;
  int32_t exponent = kNotExact;
  int32_t code = 0;
  if (finite && amax == 0.0f) {
    exponent = kZeroBlock;
  } else if (finite && top > -127 && top - 3 >= kMinExponent && top - 3 <= kMaxExponent) {
    const float m = v * power_of_two(3 - top);  // a power of two: exact
    if (__all_sync(kFullMask, m == truncf(m) && (m != 0.0f || v == 0.0f))) {  // no value lost below the unit
      exponent = top - 3;
      code = static_cast<int32_t>(m);
    }
  }
  s.q_codes[h * kCodePitch + code_position(c)] = static_cast<uint8_t>(static_cast<int8_t>(code));
  if (lane == 0) {
    s.q_exponents[h][b] = exponent;
    s.q_units[h][b] = exponent == kNotExact || exponent == kZeroBlock ? 0.0f : power_of_two(exponent);
  }
}

__global__ void __launch_bounds__(kThreads) index_scores_mma_kernel(IndexerParams params, int32_t tiles_per_block,
                                                                     int32_t max_span,
                                                                     const SegmentRows* __restrict__ segments,
                                                                     const int32_t* __restrict__ row_segment,
                                                                     const float* __restrict__ q,
                                                                     const float* __restrict__ head_weights,
                                                                     float* __restrict__ scores) {
  await_previous_grid();
  __shared__ Shared s;
  const int64_t row = blockIdx.x;
  const int32_t visible = visible_entries(segments, row_segment, row, params.ratio, params.max_visible);
  const int32_t first = static_cast<int32_t>(blockIdx.y) * tiles_per_block * kTileEntries;
  if (first >= visible) return;
  const int32_t end = min(visible, first + tiles_per_block * kTileEntries);
  const int32_t heads = params.heads;
  const int32_t d = params.head_dim;
  const int32_t blocks = d / 32;
  const int warp = static_cast<int>(threadIdx.x) / kWarp;
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const float* row_q = q + row * heads * d;
  const SegmentRows& segment = segments[row_segment[row]];  // visible > 0: a real row

  for (int32_t unit = warp; unit < heads * blocks; unit += kWarps) quantize_q_block(s, row_q, unit / blocks, unit % blocks, d);
  for (int32_t h = threadIdx.x; h < heads; h += kThreads)
    s.weights[h] = __fmul_rn(head_weights[row * heads + h], params.weight_scale);
  __syncthreads();
  for (int32_t h = threadIdx.x; h < heads; h += kThreads) {
    int32_t low = INT32_MAX;
    int32_t high = INT32_MIN;
    bool exact = true;
    for (int32_t b = 0; b < blocks; ++b) {
      const int32_t e = s.q_exponents[h][b];
      if (e == kNotExact) exact = false;
      if (e == kNotExact || e == kZeroBlock) continue;
      low = min(low, e);
      high = max(high, e);
    }
    if (low > high) low = high = 0;  // every block zero: every product is 0
    s.q_low[h] = low;
    s.q_span[h] = exact ? high - low : kNotExact;
  }

  const int group = lane / 4;  // the MMA fragments' row (A) or column (B, C) within 8
  const int quad = lane % 4;
  const int32_t words_per_key = d / 8;
  for (int32_t tile = first; tile < end; tile += kTileEntries) {
    const int32_t entries = min(kTileEntries, end - tile);
    // The tile's key rows, units and exponent ranges (an E8M0 byte s scales doubled codes by 2^(s - 128)).
    for (int32_t e = threadIdx.x; e < kTileEntries; e += kThreads) {
      int32_t low = 0;
      int32_t span = 0;
      const uint8_t* key = e < entries ? entry_row(params.keys, segment.blocks, tile + e) : nullptr;
      if (key != nullptr) {
        int32_t high = INT32_MIN;
        low = INT32_MAX;
        for (int32_t b = 0; b < blocks; ++b) {
          const int32_t scale_byte = key[d / 2 + b];
          const int32_t exponent = scale_byte - 128;
          const bool normal = scale_byte != 255 && exponent >= kMinExponent && exponent <= kMaxExponent;
          if (!normal) span = kNotExact;
          s.key_units[e][b] = normal ? power_of_two(exponent) : 0.0f;
          low = min(low, exponent);
          high = max(high, exponent);
        }
        if (span == 0) span = high - low;
      } else {
        for (int32_t b = 0; b < blocks; ++b) s.key_units[e][b] = 0.0f;
      }
      s.key_rows[e] = key;
      s.key_low[e] = low;
      s.key_span[e] = span;
    }
    __syncthreads();
    for (int32_t i = threadIdx.x; i < kTileEntries * words_per_key; i += kThreads) {
      const int32_t e = i / words_per_key;
      const int32_t w = i - e * words_per_key;
      uint32_t word = 0;
      if (e < entries) {
        const uint8_t* p = s.key_rows[e] + 4 * w;
        word = (reinterpret_cast<uintptr_t>(p) & 3u) == 0 ? *reinterpret_cast<const uint32_t*>(p) : load_u32_bytes(p);
      }
      const uint2 codes = make_uint2(e2m1_doubled(word), e2m1_doubled(word >> 4));
      *reinterpret_cast<uint2*>(s.key_codes + e * kCodePitch + 8 * w) = codes;
    }
    __syncthreads();

    for (int32_t unit = warp; unit < heads / 16 * 2; unit += kWarps) {
      const int32_t h0 = unit / 2 * 16 + group;
      const int32_t entry_base = unit % 2 * 32;
      float acc[4][4] = {};
      for (int32_t b = 0; b < blocks; ++b) {
        const uint8_t* qa = s.q_codes + h0 * kCodePitch + b * 32 + quad * 4;
        const uint32_t a[4] = {load_shared_word(qa), load_shared_word(qa + 8 * kCodePitch), load_shared_word(qa + 16),
                               load_shared_word(qa + 8 * kCodePitch + 16)};
        const float q_unit[2] = {s.q_units[h0][b], s.q_units[h0 + 8][b]};
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
          const uint8_t* kb = s.key_codes + (entry_base + nt * 8 + group) * kCodePitch + b * 32 + quad * 4;
          int32_t c[4] = {kFloatBias, kFloatBias, kFloatBias, kFloatBias};
          mma_s8(c, a, load_shared_word(kb), load_shared_word(kb + 16));
          const int32_t e = entry_base + nt * 8 + quad * 2;
          const float key_unit[2] = {s.key_units[e][b], s.key_units[e + 1][b]};
#pragma unroll
          for (int i = 0; i < 4; ++i)
            acc[nt][i] = fmaf(__int_as_float(c[i]) - kFloatBiasValue, q_unit[i / 2] * key_unit[i % 2], acc[nt][i]);
        }
      }
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int32_t h = h0 + 8 * (i / 2);
          const int32_t e = entry_base + nt * 8 + quad * 2 + i % 2;
          if (e >= entries) continue;
          const int32_t low = s.q_low[h] + s.key_low[e];
          const int32_t span = s.q_span[h] + s.key_span[e];
          float dot = acc[nt][i];
          if (span > max_span || low < kMinExponent || low + span > kMaxExponent)
            dot = dot_in_cpu_order(row_q + h * d, s.key_rows[e], d);
          // std::max(dot, 0.0f): keeps dot unless it is below zero.
          s.terms[e * kTermPitch + h] = __fmul_rn(dot < 0.0f ? 0.0f : dot, params.score_scale);
        }
      }
    }
    __syncthreads();
    if (static_cast<int32_t>(threadIdx.x) < entries) {
      const float* entry_terms = s.terms + threadIdx.x * kTermPitch;
      float score = 0.0f;
      // The CPU's `score += relu * (w * weight_scale)`, contracted into one FMA (indexer.cu).
      for (int32_t h = 0; h < heads; ++h) score = fmaf(entry_terms[h], s.weights[h], score);
      scores[row * params.max_visible + tile + threadIdx.x] = score;
    }
  }
}

// The largest exponent span D for which blocks x kBlockSum x 2^D stays below 2^24.
int32_t exact_span(int32_t blocks) {
  int32_t span = 0;
  while (int64_t{blocks} * kBlockSum << (span + 1) < (int64_t{1} << 24)) ++span;
  return span;
}

}  // namespace

void index_scores_mma(const IndexerParams& params, const SegmentRows* segments, const int32_t* row_segment,
                      int64_t rows, const float* q, const float* head_weights, float* scores, Stream stream) {
  const int64_t tiles = (int64_t{params.max_visible} + kTileEntries - 1) / kTileEntries;
  if (rows == 0 || tiles == 0) return;
  // Enough blocks to fill the device, and as few q conversions as that allows (the order of
  // every sum is the same at any width).
  const int64_t per_block = std::clamp<int64_t>(rows * tiles / kTargetBlocks, 1, kMaxTilesPerBlock);
  const int64_t chunks = (tiles + per_block - 1) / per_block;
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(chunks));
  launch(index_scores_mma_kernel, grid, kThreads, 0, native(stream), params, static_cast<int32_t>(per_block),
         exact_span(params.head_dim / 32), segments, row_segment, q, head_weights, scores);
  check_launch("cuda::index_scores (tensor cores)");
}

}  // namespace deepinfer::kernels::cuda::detail

namespace deepinfer::kernels::cuda {

bool index_scores_on_tensor_cores(const IndexerParams& params) {
  return params.tensor_cores && params.keys.format == RowFormat::Fp4Ue8m0x32 && params.keys.width == params.head_dim &&
         params.head_dim > 0 && params.head_dim % 32 == 0 && params.head_dim <= detail::kMaxHeadDim &&
         params.heads > 0 && params.heads % 16 == 0 && params.heads <= detail::kMaxHeads;
}

}  // namespace deepinfer::kernels::cuda
