// engine::sample on the device (sampler_kernels.h): one thread block per row, the same pipeline
// as src/engine/sampler.cpp, written so that every rounding the CPU does happens here too.
//
// How the CPU binary rounds (objdump of build-cpu's sampling_math.cpp.o and sampler.cpp.o; GCC
// 12 -O3 -march=x86-64-v3, default -ffp-contract=fast). Contraction is a compiler choice, so the
// device does not rely on nvcc's: every operation below is an explicit __f*_rn / __d*_rn / fma
// intrinsic that reproduces one CPU instruction.
//  - exp_nonpositive (vector, SSE and scalar tail paths alike): vsubps, vdivps (not fused), then
//      n = cvtt(fma(x, log2e, -0.5))            vfmadd132ps
//      t = fma(-n, 0.693359375, x)              vfnmadd231ps (exact product: same either way)
//      r = fma(n, 2.12194440e-4, t)             vfmadd132ps (the source's "- n * -c")
//      p = fma(fma(fma(fma(fma(c0, r, c1), r, c2), r, c3), r, c4), r, c5)   5 x vfmadd213ps
//      p = fma(p * r, r, r) + 1                 vmulps, vfmadd132ps, vaddps
//      result = p * 2^n                         vmulps
//  - apply_penalties: `frequency * count + presence` is one vfmadd132ss, then vsubss; the
//    repetition penalty is a plain vdivss / vmulss; the bias a plain vaddss. No other FMA in
//    sampler.cpp.o (fill_logprobs, draw_token, the cutoff and targets are plain mul/div/add).
//  - sum_of: 8 double lanes (lane = index % 8, tail included), each summed in index order,
//    then 0 + lane0 + ... + lane7; invert_cdf: blocks of 8 summed 0 + w0 + ... + w7 in double.
//
// Bit-exact by construction: Philox and uniform(0); NaN -> -inf; penalties and bias; argmax
// (ties to the lowest id); the weights; min-p; the top-k set (an exact radix select on the
// rank keys); sum_of and invert_cdf (their fixed orders reproduced: zero terms are skipped,
// which changes nothing since x + 0 == x for the non-negative sums here); the top-p cutoff and
// target of the top-p-only path; raw log-probabilities and the top alternatives.
// Exact only up to rounding:
//  - the nucleus (select_nucleus). The CPU sums masses in the order its quickselect partitions
//    leave them; here masses are summed exactly (integers in units of 2^-149, no rounding at
//    all), so the two nuclei differ only where a partial sum of the ranking lies within the
//    CPU's accumulated rounding (~1e-16 relative per term) of the target.
//  - with top_k and top_p both on, the target top_p * weight_sum(top-k set): the CPU sums in
//    its min-heap's order; here the exact sum is rounded once to double. Same caveat.
//  - log(sum) of the log-normaliser: the CPU calls glibc's log, the device CUDA's log(double)
//    (max error 1 ulp, glibc's < 0.52 ulp). A host port of libdevice's __nv_log (the
//    rcp.approx seed emulated; the Newton step makes the result insensitive to it) differs from
//    glibc's log by one ulp on 0.13% of sums in [1, 2e5]; none of 25K such cases changed the
//    float logprob, as expected: raw - normaliser must lie within a double ulp of a float
//    rounding boundary (probability about 2^-29).
//
// Cost (part 1, correctness first; estimated, not measured): each row is one 512-thread block.
// The fixed-order double sums are sequential chains: sum_of is 8 chains of vocab/8 dependent
// adds (one warp each), invert_cdf adds a chain over the vocab/8 block sums, and logprobs
// another sum_of: about 16K dependent adds each at vocab 129280, of the order of 0.1 ms per
// chain per row, hidden only by running rows on different SMs. Top-k / top-p / alternatives are 8-pass radix selects over the
// row (one read of the row per pass). Scratch: the row's weights (float) and block sums (double).
#include <cuda_runtime.h>

#include <cstdint>
#include <limits>

#include "core/error.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/sampler_kernels.h"

namespace deepinfer::kernels::cuda {
namespace {

using detail::kFullMask;
using detail::await_previous_grid;
using detail::launch;
using detail::native;

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kSumLanes = 8;  // sum_of's lanes, invert_cdf's block
constexpr float kMinusInfinity = -std::numeric_limits<float>::infinity();

std::size_t align16(std::size_t bytes) { return (bytes + 15) & ~std::size_t{15}; }
__host__ __device__ inline int64_t block_count(int64_t vocab) { return vocab / kSumLanes > 0 ? vocab / kSumLanes : 1; }

// ---- counter_rng.cpp ----

__device__ double philox_uniform0(uint64_t seed, uint64_t request_id, uint32_t position) {
  uint32_t c0 = 0u, c1 = position, c2 = static_cast<uint32_t>(request_id),
           c3 = static_cast<uint32_t>(request_id >> 32);
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    const uint32_t high0 = __umulhi(0xD2511F53u, c0), low0 = 0xD2511F53u * c0;
    const uint32_t high1 = __umulhi(0xCD9E8D57u, c2), low1 = 0xCD9E8D57u * c2;
    const uint32_t n0 = high1 ^ c1 ^ k0, n2 = high0 ^ c3 ^ k1;
    c0 = n0;
    c1 = low1;
    c2 = n2;
    c3 = low0;
  }
  const uint64_t mantissa = ((static_cast<uint64_t>(c0) << 32) | c1) >> 11;  // 53 bits: exact
  return __dmul_rn(__ull2double_rn(mantissa), 0x1.0p-53);
}

// ---- sampling_math.cpp, operation for operation as the CPU object code does them ----

__device__ __forceinline__ float exp_nonpositive(float x) {
  constexpr float kLowest = -87.33654f;
  const uint32_t lowest_bits = __float_as_uint(kLowest);
  const uint32_t x_bits = __float_as_uint(x);
  const uint32_t underflows = x_bits > lowest_bits ? 0xFFFFFFFFu : 0u;
  const float clamped = __uint_as_float((x_bits & ~underflows) | (lowest_bits & underflows));
  const int32_t n = __float2int_rz(__fmaf_rn(clamped, 1.44269504088896341f, -0.5f));
  const float n_float = __int2float_rn(n);
  const float r = __fmaf_rn(n_float, 2.12194440e-4f, __fmaf_rn(-n_float, 0.693359375f, clamped));
  float p = __fmaf_rn(1.9875691500e-4f, r, 1.3981999507e-3f);
  p = __fmaf_rn(p, r, 8.3334519073e-3f);
  p = __fmaf_rn(p, r, 4.1665795894e-2f);
  p = __fmaf_rn(p, r, 1.6666665459e-1f);
  p = __fmaf_rn(p, r, 5.0000001201e-1f);
  p = __fadd_rn(__fmaf_rn(__fmul_rn(p, r), r, r), 1.0f);
  const float result = __fmul_rn(p, __int_as_float((n + 127) << 23));
  return __uint_as_float(__float_as_uint(result) & ~underflows);
}

__device__ __forceinline__ float exp_of_shifted(float value, float max_value, float divisor) {
  return exp_nonpositive(__fdiv_rn(__fsub_rn(value, max_value), divisor));
}

__device__ __forceinline__ float sanitized(float logit) { return logit != logit ? kMinusInfinity : logit; }
__device__ __forceinline__ bool is_finite(float value) {
  return (__float_as_uint(value) & 0x7F800000u) != 0x7F800000u;
}

// ---- rank keys (sampler.cpp's rank_key) and orderable raw logits ----

__device__ __forceinline__ uint64_t rank_key(float weight, int64_t token) {
  return (static_cast<uint64_t>(__float_as_uint(weight)) << 32) | (0xFFFFFFFFu - static_cast<uint32_t>(token));
}
__device__ __forceinline__ int32_t token_of(uint64_t key) {
  return static_cast<int32_t>(0xFFFFFFFFu - static_cast<uint32_t>(key));
}
// Any non-NaN float as an unsigned that orders like it, -0 and +0 equal (they compare equal on
// the CPU, so their order falls to the id); then the lower id first.
__device__ __forceinline__ uint64_t value_key(float value, int64_t token) {
  const uint32_t bits = value == 0.0f ? 0u : __float_as_uint(value);
  const uint32_t ordered = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
  return (static_cast<uint64_t>(ordered) << 32) | (0xFFFFFFFFu - static_cast<uint32_t>(token));
}

// ---- exact masses: unsigned 192-bit integers in units of 2^-149 (the smallest float) ----
// A weight <= 2 is at most 2^151 units; a row of 2^31 of them sums below 2^183.

struct Wide {
  uint64_t w0, w1, w2;
};

__device__ __forceinline__ Wide wide_add(Wide a, Wide b) {
  Wide r;
  r.w0 = a.w0 + b.w0;
  const uint64_t c0 = r.w0 < a.w0;
  const uint64_t t = a.w1 + b.w1;
  const uint64_t c1 = t < a.w1;
  r.w1 = t + c0;
  const uint64_t c2 = r.w1 < t;
  r.w2 = a.w2 + b.w2 + c1 + c2;
  return r;
}
__device__ __forceinline__ bool wide_less(Wide a, Wide b) {
  if (a.w2 != b.w2) return a.w2 < b.w2;
  if (a.w1 != b.w1) return a.w1 < b.w1;
  return a.w0 < b.w0;
}
// value << shift for shift in [0, 128].
__device__ __forceinline__ Wide wide_shl(uint64_t value, int shift) {
  if (shift == 0) return {value, 0, 0};
  if (shift < 64) return {value << shift, value >> (64 - shift), 0};
  if (shift == 64) return {0, value, 0};
  if (shift < 128) return {0, value << (shift - 64), value >> (128 - shift)};
  return {0, 0, value};
}
__device__ __forceinline__ uint64_t wide_limb(Wide v, int index) {
  return index == 0 ? v.w0 : index == 1 ? v.w1 : index == 2 ? v.w2 : 0;
}
// Low 64 bits of v >> shift, shift in [0, 192).
__device__ uint64_t wide_shr64(Wide v, int shift) {
  const int q = shift >> 6, r = shift & 63;
  const uint64_t low = wide_limb(v, q), high = wide_limb(v, q + 1);
  return r == 0 ? low : (low >> r) | (high << (64 - r));
}
// Whether any of the low `bits` bits of v is set.
__device__ bool wide_low_nonzero(Wide v, int bits) {
  bool any = false;
  for (int index = 0; index < 3; ++index) {
    const int start = 64 * index;
    const uint64_t limb = wide_limb(v, index);
    if (bits >= start + 64)
      any |= limb != 0;
    else if (bits > start)
      any |= (limb & ((uint64_t{1} << (bits - start)) - 1)) != 0;
  }
  return any;
}
// v * 2^-149 rounded to the nearest double (ties to even).
__device__ double wide_to_double(Wide v) {
  int top;
  if (v.w2)
    top = 191 - __clzll(static_cast<long long>(v.w2));
  else if (v.w1)
    top = 127 - __clzll(static_cast<long long>(v.w1));
  else if (v.w0)
    top = 63 - __clzll(static_cast<long long>(v.w0));
  else
    return 0.0;
  uint64_t mantissa;
  int shift = 0;
  if (top <= 52) {
    mantissa = v.w0;
  } else {
    shift = top - 52;
    mantissa = wide_shr64(v, shift) & ((uint64_t{1} << 53) - 1);
    const bool half = (wide_shr64(v, shift - 1) & 1u) != 0;
    const bool sticky = wide_low_nonzero(v, shift - 1);
    if (half && (sticky || (mantissa & 1u))) ++mantissa;  // 2^53 at most: still exact below
  }
  const double scale = __longlong_as_double(static_cast<long long>(static_cast<uint64_t>(1023 + shift - 149) << 52));
  return __dmul_rn(__ull2double_rn(mantissa), scale);
}
// The least number of units that is >= target (target > 0 finite, below 2^32).
__device__ Wide wide_ceil(double target) {
  const uint64_t bits = static_cast<uint64_t>(__double_as_longlong(target));
  const int biased = static_cast<int>(bits >> 52) & 0x7FF;
  uint64_t mantissa = bits & ((uint64_t{1} << 52) - 1);
  int exponent = 1 - 1075;
  if (biased != 0) {
    mantissa |= uint64_t{1} << 52;
    exponent = biased - 1075;
  }
  const int shift = exponent + 149;  // target = mantissa * 2^shift units
  if (shift >= 0) return wide_shl(mantissa, shift);
  if (-shift >= 64) return {mantissa != 0 ? 1u : 0u, 0, 0};
  const uint64_t whole = mantissa >> -shift;
  const bool fraction = (mantissa & ((uint64_t{1} << -shift) - 1)) != 0;
  return {whole + (fraction ? 1u : 0u), 0, 0};
}
// A positive float's mantissa (implicit bit included) and the shift that makes it units.
__device__ __forceinline__ uint32_t mantissa_units(uint32_t bits) {
  const uint32_t fraction = bits & 0x7FFFFFu;
  return (bits >> 23) != 0 ? (fraction | 0x800000u) : fraction;
}
__device__ __forceinline__ int exponent_shift(uint32_t biased_exponent) {
  return biased_exponent != 0 ? static_cast<int>(biased_exponent) - 1 : 0;
}

// ---- shared state of one row's block ----

struct RowShared {
  unsigned long long bins[512];
  Wide chunks[32];
  Wide above;
  unsigned long long prefix, mask;
  int all_kept;
  unsigned slots[kWarps][32];  // per-warp staging: histogram values
  float fbuf[kWarps][32];      // per-warp staging: sequential float sums
  double dbuf[32];             // warp 0 staging: block sums
  double lanes[kSumLanes];
  unsigned long long reduce_u64[kWarps];
  unsigned long long reduced_u64;
  int32_t token;
  int top_count;
  unsigned long long top_keys[kSampleMaxLogprobs];
};

__device__ __forceinline__ int lane_id() { return static_cast<int>(threadIdx.x & 31u); }
__device__ __forceinline__ int warp_id() { return static_cast<int>(threadIdx.x >> 5); }

// Block-wide max (or min) of a 64-bit value; every thread gets it.
template <bool kMax>
__device__ uint64_t block_extreme(uint64_t value, RowShared& sh) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    const uint64_t other = __shfl_xor_sync(kFullMask, value, offset);
    value = kMax ? (other > value ? other : value) : (other < value ? other : value);
  }
  if (lane_id() == 0) sh.reduce_u64[warp_id()] = value;
  __syncthreads();
  if (warp_id() == 0) {
    value = sh.reduce_u64[lane_id() < kWarps ? lane_id() : 0];
    for (int offset = 16; offset > 0; offset >>= 1) {
      const uint64_t other = __shfl_xor_sync(kFullMask, value, offset);
      value = kMax ? (other > value ? other : value) : (other < value ? other : value);
    }
    if (lane_id() == 0) sh.reduced_u64 = value;
  }
  __syncthreads();
  const uint64_t result = sh.reduced_u64;
  __syncthreads();
  return result;
}

// sum_of: lane L (index % 8 == L) summed in index order by warp L, the lanes then added in order.
// Each warp stages 32 of its lane's terms and adds them one after another (all 32 threads add
// the same sequence, so every thread holds the lane's sum); chunks of zeros are skipped.
__device__ double sum_of(const float* values, int64_t count, RowShared& sh) {
  const int warp = warp_id(), lane = lane_id();
  if (warp < kSumLanes) {
    const int64_t terms = (count - warp + kSumLanes - 1) / kSumLanes;
    double sum = 0.0;
    float value = lane < terms ? values[warp + int64_t{kSumLanes} * lane] : 0.0f;
    for (int64_t base = 0; base < terms; base += 32) {
      const int64_t ahead = base + 32 + lane;
      const float next = ahead < terms ? values[warp + kSumLanes * ahead] : 0.0f;
      if (__ballot_sync(kFullMask, value != 0.0f) != 0) {
        sh.fbuf[warp][lane] = value;
        __syncwarp();
#pragma unroll
        for (int k = 0; k < 32; ++k) sum = __dadd_rn(sum, static_cast<double>(sh.fbuf[warp][k]));
        __syncwarp();
      }
      value = next;
    }
    if (lane == 0) sh.lanes[warp] = sum;
  }
  __syncthreads();
  double total = 0.0;
  for (int l = 0; l < kSumLanes; ++l) total = __dadd_rn(total, sh.lanes[l]);
  __syncthreads();
  return total;
}

// invert_cdf (weights non-negative, not all 0). `blocks` is scratch for vocab / 8 doubles.
__device__ int32_t invert_cdf(const float* weights, int64_t count, double uniform, double* blocks, RowShared& sh) {
  const double target = __dmul_rn(uniform, sum_of(weights, count, sh));
  const int64_t full = count / kSumLanes;
  for (int64_t j = threadIdx.x; j < full; j += kThreads) {
    double block_mass = 0.0;
#pragma unroll
    for (int l = 0; l < kSumLanes; ++l)
      block_mass = __dadd_rn(block_mass, static_cast<double>(weights[kSumLanes * j + l]));
    blocks[j] = block_mass;
  }
  __syncthreads();
  if (warp_id() == 0) {
    const int lane = lane_id();
    // The running mass over whole blocks (warp-uniform: every thread follows the same sums).
    // A zero block changes nothing: mass + 0 == mass, and mass <= target already held.
    double mass = 0.0;
    int64_t block_start = full * kSumLanes;
    bool stopped = false;
    for (int64_t base = 0; base < full && !stopped; base += 32) {
      const double value = base + lane < full ? blocks[base + lane] : 0.0;
      unsigned nonzero = __ballot_sync(kFullMask, value != 0.0);
      sh.dbuf[lane] = value;
      __syncwarp();
      while (nonzero != 0) {
        const int k = __ffs(nonzero) - 1;
        nonzero &= nonzero - 1;
        const double next = __dadd_rn(mass, sh.dbuf[k]);
        if (next > target) {
          block_start = (base + k) * kSumLanes;
          stopped = true;
          break;
        }
        mass = next;
      }
      __syncwarp();
    }
    int32_t token = -1;
    for (int64_t base = block_start; base < count && token < 0; base += 32) {
      const float value = base + lane < count ? weights[base + lane] : 0.0f;
      unsigned positive = __ballot_sync(kFullMask, value > 0.0f);
      sh.fbuf[0][lane] = value;
      __syncwarp();
      while (positive != 0) {
        const int k = __ffs(positive) - 1;
        positive &= positive - 1;
        mass = __dadd_rn(mass, static_cast<double>(sh.fbuf[0][k]));
        if (mass > target) {
          token = static_cast<int32_t>(base + k);
          break;
        }
      }
      __syncwarp();
    }
    if (lane == 0) sh.token = token;
  }
  __syncthreads();
  const int32_t token = sh.token;
  __syncthreads();
  if (token >= 0) return token;
  // Rounding left the target at the very top of the mass: the last token that has any.
  uint64_t last = 0;
  for (int64_t i = threadIdx.x; i < count; i += kThreads)
    if (weights[i] > 0.0f) last = static_cast<uint64_t>(i) + 1;
  last = block_extreme<true>(last, sh);
  return last > 0 ? static_cast<int32_t>(last - 1) : 0;
}

// ---- exact radix selection over 64-bit rank keys ----
// Over the keys of the candidates (key_of(i, key) returns whether i is one), the boundary of
// "a key stays when the measure ranked before it is < target": the largest key whose measure
// together with the keys above it reaches target. kMass: a key's measure is its weight
// (key >> 32, a positive float), exactly, in units of 2^-149; else every key counts 1. When the
// candidates' whole measure stays below target, every candidate stays: the boundary is the
// least key. Digits: bits 63..55 (sign and exponent), 54..47, 46..39, 38..32, then 4 x 8 bits.
// Within a digit pass every counted key shares its exponent, so a bin's mass is the integer sum
// of the mantissas shifted once; histograms are 64-bit integer atomics, order-independent.

__device__ __forceinline__ int digit_shift(int pass) {
  return pass == 0 ? 55 : pass == 1 ? 47 : pass == 2 ? 39 : pass == 3 ? 32 : 8 * (7 - pass);
}
__device__ __forceinline__ int digit_width(int pass) { return pass == 0 ? 9 : pass == 3 ? 7 : 8; }

template <bool kMass>
__device__ __forceinline__ Wide bin_measure(unsigned long long sum, int pass, unsigned bin, uint64_t prefix) {
  if (!kMass) return {sum, 0, 0};
  const uint32_t exponent = pass == 0 ? (bin & 0xFFu) : static_cast<uint32_t>(prefix >> 55) & 0xFFu;
  return wide_shl(sum, exponent_shift(exponent));
}

template <bool kMass, class KeyOf>
__device__ void histogram(const KeyOf& key_of, int64_t count, uint64_t prefix, uint64_t mask, int shift, int width,
                          RowShared& sh) {
  for (int b = threadIdx.x; b < 512; b += kThreads) sh.bins[b] = 0;
  __syncthreads();
  const int lane = lane_id(), warp = warp_id();
  const unsigned digit_mask = (1u << width) - 1u;
  for (int64_t base = 0; base < count; base += kThreads) {
    const int64_t i = base + threadIdx.x;
    uint64_t key = 0;
    const bool counted = i < count && key_of(i, key) && (key & mask) == prefix;
    if (__ballot_sync(kFullMask, counted) == 0) continue;
    const unsigned bin = counted ? static_cast<unsigned>(key >> shift) & digit_mask : 0xFFFFFFFFu;
    const unsigned value = counted ? (kMass ? mantissa_units(static_cast<uint32_t>(key >> 32)) : 1u) : 0u;
    const unsigned peers = __match_any_sync(kFullMask, bin);
    sh.slots[warp][lane] = value;
    __syncwarp();
    if (counted && lane == __ffs(peers) - 1) {  // one atomic per distinct bin of the warp
      unsigned long long total = 0;
      for (unsigned rest = peers; rest != 0; rest &= rest - 1) total += sh.slots[warp][__ffs(rest) - 1];
      atomicAdd(&sh.bins[bin], total);
    }
    __syncwarp();
  }
  __syncthreads();
}

// Warp 0: the measure of the bins, as 32 chunk sums in sh.chunks; returns bins per chunk.
template <bool kMass>
__device__ int chunk_sums(int pass, uint64_t prefix, RowShared& sh) {
  const int per = (1 << digit_width(pass)) / 32;
  Wide sum = {0, 0, 0};
  for (int k = 0; k < per; ++k) {
    const unsigned bin = static_cast<unsigned>(lane_id() * per + k);
    sum = wide_add(sum, bin_measure<kMass>(sh.bins[bin], pass, bin, prefix));
  }
  sh.chunks[lane_id()] = sum;
  __syncwarp();
  return per;
}

template <bool kMass, class KeyOf>
__device__ uint64_t radix_select(const KeyOf& key_of, int64_t count, Wide target, RowShared& sh) {
  if (threadIdx.x == 0) {
    sh.above = {0, 0, 0};
    sh.prefix = 0;
    sh.mask = 0;
    sh.all_kept = 0;
  }
  __syncthreads();
  for (int pass = 0; pass < 8; ++pass) {
    const uint64_t prefix = sh.prefix, mask = sh.mask;
    const int shift = digit_shift(pass), width = digit_width(pass);
    histogram<kMass>(key_of, count, prefix, mask, shift, width, sh);
    if (warp_id() == 0) {
      const int per = chunk_sums<kMass>(pass, prefix, sh);
      if (lane_id() == 0) {
        Wide cumulative = sh.above;  // < target
        bool all_kept = false;
        if (pass == 0) {
          Wide total = cumulative;
          for (int l = 0; l < 32; ++l) total = wide_add(total, sh.chunks[l]);
          all_kept = wide_less(total, target);
        }
        if (all_kept) {
          sh.all_kept = 1;
        } else {
          int chunk = 31;
          for (; chunk > 0; --chunk) {
            const Wide next = wide_add(cumulative, sh.chunks[chunk]);
            if (!wide_less(next, target)) break;
            cumulative = next;
          }
          unsigned bin = static_cast<unsigned>(chunk * per + per - 1);
          for (; bin > static_cast<unsigned>(chunk * per); --bin) {
            const Wide next = wide_add(cumulative, bin_measure<kMass>(sh.bins[bin], pass, bin, prefix));
            if (!wide_less(next, target)) break;
            cumulative = next;
          }
          sh.above = cumulative;
          sh.prefix = prefix | (static_cast<uint64_t>(bin) << shift);
          sh.mask = mask | (static_cast<uint64_t>((1u << width) - 1u) << shift);
        }
      }
    }
    __syncthreads();
    if (sh.all_kept) break;
  }
  const bool all_kept = sh.all_kept != 0;
  const uint64_t boundary = sh.prefix;
  __syncthreads();
  if (!all_kept) return boundary;
  uint64_t least = ~uint64_t{0};
  for (int64_t i = threadIdx.x; i < count; i += kThreads) {
    uint64_t key = 0;
    if (key_of(i, key) && key < least) least = key;
  }
  return block_extreme<false>(least, sh);
}

// The exact mass of the candidates (weights from the keys), rounded once to double.
template <class KeyOf>
__device__ double exact_mass(const KeyOf& key_of, int64_t count, RowShared& sh) {
  histogram<true>(key_of, count, 0, 0, digit_shift(0), digit_width(0), sh);
  if (warp_id() == 0) {
    chunk_sums<true>(0, 0, sh);
    if (lane_id() == 0) {
      Wide total = {0, 0, 0};
      for (int l = 0; l < 32; ++l) total = wide_add(total, sh.chunks[l]);
      sh.dbuf[0] = wide_to_double(total);
    }
  }
  __syncthreads();
  const double mass = sh.dbuf[0];
  __syncthreads();
  return mass;
}

// ---- draw_token: weights, truncation, inverse CDF ----

__device__ int32_t draw_token(float* weights, int64_t vocab, float max_logit, const SampleRowParams& params,
                              double uniform, double* blocks, RowShared& sh) {
  // Division by T, not multiplication by 1/T, as the CPU.
  for (int64_t i = threadIdx.x; i < vocab; i += kThreads)
    weights[i] = exp_of_shifted(weights[i], max_logit, params.temperature);
  __syncthreads();

  const float floor = params.min_p;
  const bool truncate_k = params.top_k > 0 && static_cast<int64_t>(params.top_k) < vocab;
  const bool truncate_p = params.top_p < 1.0f;
  if (!truncate_k && !truncate_p) {
    if (floor > 0.0f) {
      for (int64_t i = threadIdx.x; i < vocab; i += kThreads) weights[i] = weights[i] >= floor ? weights[i] : 0.0f;
      __syncthreads();
    }
    return invert_cdf(weights, vocab, uniform, blocks, sh);
  }

  uint64_t boundary;
  if (truncate_k) {
    // select_top_k: the top_k largest keys among weight > 0 and >= floor (a unique set, so
    // the CPU's heap and this exact radix select agree).
    const auto eligible = [&](int64_t i, uint64_t& key) {
      const float weight = weights[i];
      key = rank_key(weight, i);
      return weight > 0.0f && weight >= floor;
    };
    boundary = radix_select<false>(eligible, vocab, Wide{static_cast<uint64_t>(params.top_k), 0, 0}, sh);
    if (truncate_p) {
      const uint64_t top_k_boundary = boundary;
      const auto in_top_k = [&](int64_t i, uint64_t& key) { return eligible(i, key) && key >= top_k_boundary; };
      // CPU: weight_sum(keys) in its min-heap's order; here the exact sum rounded once.
      const double target = __dmul_rn(static_cast<double>(params.top_p), exact_mass(in_top_k, vocab, sh));
      boundary = radix_select<true>(in_top_k, vocab, wide_ceil(target), sh);
    }
  } else {
    for (int64_t i = threadIdx.x; i < vocab; i += kThreads) weights[i] = weights[i] >= floor ? weights[i] : 0.0f;
    __syncthreads();
    const double total = sum_of(weights, vocab, sh);
    // 0.5 * (1 - top_p) * total / count, as the CPU: ((0.5 * (1 - p)) * total) / count.
    const float cutoff = __double2float_rn(
        __ddiv_rn(__dmul_rn(__dmul_rn(0.5, __dsub_rn(1.0, static_cast<double>(params.top_p))), total),
                  static_cast<double>(vocab)));
    const auto candidate = [&](int64_t i, uint64_t& key) {
      const float weight = weights[i];
      key = rank_key(weight, i);
      return weight > 0.0f && weight >= cutoff;
    };
    const double target = __dmul_rn(static_cast<double>(params.top_p), total);
    boundary = radix_select<true>(candidate, vocab, wide_ceil(target), sh);
  }
  // Everything ranked at or above the boundary stays (a zero weight ranks below any boundary).
  for (int64_t i = threadIdx.x; i < vocab; i += kThreads) {
    const float weight = weights[i];
    weights[i] = rank_key(weight, i) >= boundary ? weight : 0.0f;
  }
  __syncthreads();
  return invert_cdf(weights, vocab, uniform, blocks, sh);
}

// use(i, load(i)) for this thread's indices of a row, kInFlight loads issued before their uses: a
// row read by one block is bound by its loads' latency (one load then one use at a time, a greedy
// row of 129,280 logits took 118 us).
template <typename Load, typename Use>
__device__ __forceinline__ void sweep_row(int64_t vocab, const Load& load, const Use& use) {
  constexpr int kInFlight = 8;
  for (int64_t first = threadIdx.x; first < vocab; first += int64_t{kThreads} * kInFlight) {
    float value[kInFlight];
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) {
      const int64_t i = first + int64_t{u} * kThreads;
      value[u] = i < vocab ? load(i) : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) {
      const int64_t i = first + int64_t{u} * kThreads;
      if (i < vocab) use(i, value[u]);
    }
  }
}

// sweep_row over an unmasked row whose start is 16-byte aligned: four logits a load (sanitized),
// kInFlight loads issued before their uses, so a greedy row of 129,280 logits is 8 round trips a
// thread instead of 32 (42 us a row at one load a logit).
template <typename Use>
__device__ __forceinline__ void sweep_row_by_fours(const float* raw, int64_t vocab, const Use& use) {
  constexpr int kInFlight = 8;
  const int64_t quads = vocab / 4;
  const auto* row = reinterpret_cast<const float4*>(raw);
  for (int64_t first = threadIdx.x; first < quads; first += int64_t{kThreads} * kInFlight) {
    float4 value[kInFlight];
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) {
      const int64_t q = first + int64_t{u} * kThreads;
      value[u] = q < quads ? row[q] : float4{};
    }
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) {
      const int64_t q = first + int64_t{u} * kThreads;
      if (q < quads) {
        use(4 * q, sanitized(value[u].x));
        use(4 * q + 1, sanitized(value[u].y));
        use(4 * q + 2, sanitized(value[u].z));
        use(4 * q + 3, sanitized(value[u].w));
      }
    }
  }
  for (int64_t i = 4 * quads + threadIdx.x; i < vocab; i += kThreads) use(i, sanitized(raw[i]));
}

// ---- the kernel ----

__global__ void __launch_bounds__(kThreads, 1)
    sample_rows_kernel(const float* logits, int64_t vocab, const SampleRowParams* all_params,
                       const int32_t* prompt_tokens, const GeneratedCount* generated, const LogitBias* bias,
                       const uint64_t* masks, float* weights_scratch, double* blocks_scratch,
                       SampleRowResult* results) {
  await_previous_grid();
  __shared__ RowShared sh;
  const int64_t row = blockIdx.x;
  const SampleRowParams params = all_params[row];
  const float* raw = logits + row * vocab;
  float* weights = weights_scratch + row * vocab;
  double* blocks = blocks_scratch + row * block_count(vocab);
  SampleRowResult* result = results + row;
  const uint64_t* mask = params.mask_row >= 0 ? masks + params.mask_row * ((vocab + 63) / 64) : nullptr;
  // The logits as the CPU's constrained path hands them to sample(): -inf where the mask forbids.
  const auto logit = [&](int64_t i) {
    if (mask != nullptr && ((mask[i >> 6] >> (i & 63)) & 1u) == 0) return kMinusInfinity;
    return sanitized(raw[i]);
  };

  // A mask that leaves no token with a number for a logit ends the answer with its fallback
  // token (engine StepExecutor::sample_for), before any other check.
  if (mask != nullptr) {
    int any = 0;
    for (int64_t i = threadIdx.x; i < vocab; i += kThreads)
      any |= ((mask[i >> 6] >> (i & 63)) & 1u) != 0 && raw[i] == raw[i];
    if (!__syncthreads_or(any)) {
      if (threadIdx.x == 0) {
        result->token = params.mask_fallback_token;
        result->error = kSampleOk;
        result->logprob = 0.0f;
        result->top_count = 0;
      }
      return;
    }
  }

  // Errors in the order the CPU throws them: the position (CounterRng), then history ids
  // (id_bound), then logit_bias ids, then no finite maximum.
  int error = kSampleOk;
  if (params.position < 0 || params.position > int64_t{0xFFFFFFFF}) {
    error = kSamplePositionOutOfRange;
  } else {
    int bad = 0;
    for (int32_t j = params.prompt_begin + static_cast<int32_t>(threadIdx.x); j < params.prompt_end; j += kThreads)
      bad |= prompt_tokens[j] < 0 || prompt_tokens[j] >= vocab;
    for (int32_t j = params.generated_begin + static_cast<int32_t>(threadIdx.x); j < params.generated_end;
         j += kThreads)
      bad |= generated[j].token < 0 || generated[j].token >= vocab;
    for (int32_t j = params.bias_begin + static_cast<int32_t>(threadIdx.x); j < params.bias_end; j += kThreads)
      bad |= bias[j].token < 0 || bias[j].token >= vocab;
    if (__syncthreads_or(bad)) error = kSampleIdOutsideVocabulary;
  }

  int32_t token = -1;
  // A greedy row with nothing to adjust takes its argmax straight from the logits (one pass, no
  // copy into weights).
  const bool adjusted = params.repetition_penalty != 1.0f || params.frequency_penalty != 0.0f ||
                        params.presence_penalty != 0.0f || params.bias_end > params.bias_begin;
  if (error == kSampleOk && params.temperature == 0.0f && !adjusted) {
    uint64_t best_key = 0;
    const auto keep_best = [&](int64_t i, float value) {
      const uint64_t key = value_key(value, i);
      best_key = key > best_key ? key : best_key;
    };
    if (mask == nullptr && reinterpret_cast<uintptr_t>(raw) % sizeof(float4) == 0)
      sweep_row_by_fours(raw, vocab, keep_best);
    else
      sweep_row(vocab, logit, keep_best);
    const int32_t best = token_of(block_extreme<true>(best_key, sh));
    if (!is_finite(logit(best)))
      error = kSampleNoFiniteMaximum;
    else
      token = best;
  } else if (error == kSampleOk) {
    sweep_row(vocab, logit, [&](int64_t i, float value) { weights[i] = value; });
    __syncthreads();
    // apply_penalties: each id is touched by one thread (prompt ids distinct; generated ids
    // distinct and those in the prompt skipped).
    const float repetition = params.repetition_penalty;
    if (repetition != 1.0f) {
      for (int32_t j = params.prompt_begin + static_cast<int32_t>(threadIdx.x); j < params.prompt_end; j += kThreads) {
        float& logit = weights[prompt_tokens[j]];
        logit = logit > 0.0f ? __fdiv_rn(logit, repetition) : __fmul_rn(logit, repetition);
      }
      for (int32_t j = params.generated_begin + static_cast<int32_t>(threadIdx.x); j < params.generated_end;
           j += kThreads) {
        if (generated[j].in_prompt) continue;
        float& logit = weights[generated[j].token];
        logit = logit > 0.0f ? __fdiv_rn(logit, repetition) : __fmul_rn(logit, repetition);
      }
      __syncthreads();
    }
    if (params.frequency_penalty != 0.0f || params.presence_penalty != 0.0f) {
      for (int32_t j = params.generated_begin + static_cast<int32_t>(threadIdx.x); j < params.generated_end;
           j += kThreads) {
        float& logit = weights[generated[j].token];
        // GCC fuses `frequency * count + presence` (vfmadd132ss), then subtracts.
        logit = __fsub_rn(logit, __fmaf_rn(__int2float_rn(generated[j].count), params.frequency_penalty,
                                           params.presence_penalty));
      }
      __syncthreads();
    }
    for (int32_t j = params.bias_begin + static_cast<int32_t>(threadIdx.x); j < params.bias_end; j += kThreads)
      weights[bias[j].token] = __fadd_rn(weights[bias[j].token], bias[j].bias);
    __syncthreads();

    // argmax_lowest_index (no NaN here: the penalties keep -inf at -inf and +inf at +inf).
    uint64_t best_key = 0;
    for (int64_t i = threadIdx.x; i < vocab; i += kThreads) {
      const uint64_t key = value_key(weights[i], i);
      best_key = key > best_key ? key : best_key;
    }
    const int32_t best = token_of(block_extreme<true>(best_key, sh));
    const float max_logit = weights[best];
    __syncthreads();  // every thread has read it before draw_token overwrites the row
    if (!is_finite(max_logit)) {
      error = kSampleNoFiniteMaximum;
    } else if (params.temperature == 0.0f) {
      token = best;
    } else {
      const double uniform =
          philox_uniform0(params.seed, params.request_id, static_cast<uint32_t>(params.position));
      token = draw_token(weights, vocab, max_logit, params, uniform, blocks, sh);
    }
  }

  float logprob = detail::quiet_nan();
  int top_count = 0;
  if (error == kSampleOk && params.logprobs >= 0) {
    // fill_logprobs over the raw logits. max_of's choice between -0 and +0 cannot matter:
    // x - (+-0) is x for x != 0, exp gives 1 for either zero, and +-0 + log(sum) is the same.
    uint64_t best_key = 0;
    for (int64_t i = threadIdx.x; i < vocab; i += kThreads) {
      const uint64_t key = value_key(logit(i), i);
      best_key = key > best_key ? key : best_key;
    }
    const float max_raw = logit(token_of(block_extreme<true>(best_key, sh)));
    for (int64_t i = threadIdx.x; i < vocab; i += kThreads)
      weights[i] = exp_of_shifted(logit(i), max_raw, 1.0f);
    __syncthreads();
    const double log_normalizer = __dadd_rn(static_cast<double>(max_raw), log(sum_of(weights, vocab, sh)));
    const auto logprob_of = [&](int64_t t) {
      return __double2float_rn(__dsub_rn(static_cast<double>(logit(t)), log_normalizer));
    };
    logprob = logprob_of(token);
    const int64_t wanted = params.logprobs < vocab ? params.logprobs : vocab;
    if (wanted > 0) {
      const auto raw_key = [&](int64_t i, uint64_t& key) {
        key = value_key(logit(i), i);
        return true;
      };
      const uint64_t boundary = radix_select<false>(raw_key, vocab, Wide{static_cast<uint64_t>(wanted), 0, 0}, sh);
      if (threadIdx.x == 0) sh.top_count = 0;
      __syncthreads();
      for (int64_t i = threadIdx.x; i < vocab; i += kThreads) {
        uint64_t key = 0;
        raw_key(i, key);
        if (key >= boundary) {
          const int slot = atomicAdd(&sh.top_count, 1);
          if (slot < kSampleMaxLogprobs) sh.top_keys[slot] = key;
        }
      }
      __syncthreads();
      if (threadIdx.x == 0) {
        top_count = sh.top_count < kSampleMaxLogprobs ? sh.top_count : kSampleMaxLogprobs;
        for (int a = 1; a < top_count; ++a)  // best first: descending keys
          for (int b = a; b > 0 && sh.top_keys[b] > sh.top_keys[b - 1]; --b) {
            const unsigned long long swap = sh.top_keys[b];
            sh.top_keys[b] = sh.top_keys[b - 1];
            sh.top_keys[b - 1] = swap;
          }
        for (int a = 0; a < top_count; ++a) {
          const int32_t alternative = token_of(sh.top_keys[a]);
          result->top_tokens[a] = alternative;
          result->top_logprobs[a] = logprob_of(alternative);
        }
      }
    }
  }
  if (threadIdx.x == 0) {
    result->token = error == kSampleOk ? token : -1;
    result->error = error;
    result->logprob = logprob;
    result->top_count = top_count;
  }
}

__global__ void store_drawn_tokens_kernel(const SampleRowResult* results, int64_t count, int32_t* out) {
  await_previous_grid();
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = results[i].token;
}

}  // namespace

void store_drawn_tokens(const SampleRowResult* results, int64_t count, int32_t* out, Stream stream) {
  if (count < 0) fail("cuda::store_drawn_tokens: ", count, " draws");
  if (count == 0) return;
  constexpr int kStoreThreads = 256;
  const auto blocks = static_cast<unsigned>((count + kStoreThreads - 1) / kStoreThreads);
  launch(store_drawn_tokens_kernel, blocks, kStoreThreads, 0, native(stream), results, count, out);
  check_launch("cuda::store_drawn_tokens");
}

std::size_t sample_scratch_bytes(int64_t rows, int64_t vocab) {
  if (rows <= 0 || vocab <= 0) return 0;
  const auto r = static_cast<std::size_t>(rows);
  return align16(r * static_cast<std::size_t>(vocab) * sizeof(float)) +
         r * static_cast<std::size_t>(block_count(vocab)) * sizeof(double);
}

void sample_rows(const float* logits, int64_t rows, int64_t vocab, const SampleRowParams* params,
                 const int32_t* prompt_tokens, const GeneratedCount* generated, const LogitBias* bias,
                 const uint64_t* masks, void* scratch, std::size_t scratch_bytes, SampleRowResult* results,
                 Stream stream) {
  if (rows < 0) fail("cuda::sample_rows: negative row count ", rows);
  if (vocab < 1 || vocab > int64_t{0x7FFFFFFF})
    fail("cuda::sample_rows: vocabulary ", vocab, " is outside [1, 2^31)");
  if (rows == 0) return;
  if (rows > int64_t{0x7FFFFFFF}) fail("cuda::sample_rows: ", rows, " rows exceed the grid");
  const std::size_t needed = sample_scratch_bytes(rows, vocab);
  if (scratch_bytes < needed || scratch == nullptr)
    fail("cuda::sample_rows: scratch of ", scratch_bytes, " bytes, ", needed, " needed");
  if (reinterpret_cast<std::uintptr_t>(scratch) % 16 != 0) fail("cuda::sample_rows: scratch is not 16-byte aligned");
  auto* weights = static_cast<float*>(scratch);
  auto* blocks = reinterpret_cast<double*>(static_cast<char*>(scratch) +
                                           align16(static_cast<std::size_t>(rows) * static_cast<std::size_t>(vocab) *
                                                   sizeof(float)));
  launch(sample_rows_kernel, static_cast<unsigned>(rows), kThreads, 0, native(stream), logits, vocab, params,
         prompt_tokens, generated, bias, masks, weights, blocks, results);
  check_launch("cuda::sample_rows");
}

}  // namespace deepinfer::kernels::cuda
