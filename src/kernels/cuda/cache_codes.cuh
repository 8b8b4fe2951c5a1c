#pragma once
// The cache formats on the device (attention_kernels.h RowFormat): model/fake_quant.cpp's
// encoders step for step, so a row stored here holds the same bytes as model::quantize_vector
// writes for the same floats, NaN, clamping and subnormals included; and the decoding of one
// stored value, through cuda_common.cuh's decoders (core/float_formats.h's values).
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/attention_kernels.h"
#include "kernels/cuda/cuda_common.cuh"

namespace deepinfer::kernels::cuda::detail {

// ---- row layout (model::cache_block, quantizes, code_bytes) ----

__host__ __device__ constexpr int32_t cache_block(RowFormat format) {
  switch (format) {
    case RowFormat::F32: return 1;
    case RowFormat::Fp8Ue8m0x32: return 32;
    case RowFormat::Fp4E4m3x16: return 16;
    case RowFormat::Fp4Ue8m0x32: return 32;
  }
  return 1;
}

__host__ __device__ constexpr bool quantizes(RowFormat format, int64_t n) {
  return format != RowFormat::F32 && n > 0 && n % cache_block(format) == 0;
}

__host__ __device__ constexpr int64_t code_bytes(RowFormat format, int64_t n) {
  return format == RowFormat::Fp8Ue8m0x32 ? n : (n + 1) / 2;
}

// ---- the host's NaN rules ----
// Only a NaN's sign reaches a stored code (through signbit), but the device's arithmetic makes
// its own positive NaN where the host's x86-64 SSE arithmetic passes a NaN operand through (the
// first one) or makes the negative "indefinite" NaN (inf / inf, 0 / 0). These give the host's.

__device__ __forceinline__ float host_quotient(float dividend, float divisor) {
  if (isnan(dividend)) return dividend;
  if (isnan(divisor)) return divisor;
  const float quotient = __fdiv_rn(dividend, divisor);
  return isnan(quotient) ? __uint_as_float(0xffc00000u) : quotient;
}

// Dequantising multiplies a finite code value by a finite or NaN scale: never an invalid product.
__device__ __forceinline__ float host_product(float a, float b) {
  if (isnan(a)) return a;
  if (isnan(b)) return b;
  return __fmul_rn(a, b);
}

// std::clamp(v, lo, hi) = min(max(v, lo), hi) with operator<: a NaN comes through unchanged
// (fminf / fmaxf would replace it with a bound).
__device__ __forceinline__ float host_clamp(float v, float lo, float hi) {
  const float at_least_lo = v < lo ? lo : v;
  return hi < at_least_lo ? hi : at_least_lo;
}

// ---- encoders (model::pow2_ceil_exponent, e4m3_encode, e2m1_encode) ----

// 2^ceil(log2(t)) as its exponent k, from t's bits: the ue8m0 scale rounding.
__device__ __forceinline__ int32_t pow2_ceil_exponent(float t) {
  const uint32_t bits = __float_as_uint(t);
  const auto exponent = static_cast<int32_t>((bits >> 23) & 0xffu);
  const uint32_t mantissa = bits & 0x7fffffu;
  return exponent - 127 + (mantissa != 0 ? 1 : 0);
}

// float -> e4m3fn code, round to nearest even; |x| >= 480 (and NaN) -> 0x7f with x's sign.
__device__ __forceinline__ uint32_t e4m3_encode(float x) {
  const uint32_t sign = signbit(x) ? 0x80u : 0x00u;
  const float magnitude = fabsf(x);
  if (isnan(magnitude) || magnitude >= 480.0f) return sign | 0x7fu;
  // Subnormal range: multiples of 2^-9; the scaling is exact, rintf rounds to even.
  if (magnitude < 0x1p-6f) return sign | static_cast<uint32_t>(rintf(__fmul_rn(magnitude, 512.0f)));
  // magnitude is normal: frexp's exponent minus one is the unbiased exponent, and
  // ldexp(magnitude, 3 - unbiased) is its mantissa under the exponent 3, in [8, 16).
  const uint32_t bits = __float_as_uint(magnitude);
  int32_t unbiased = static_cast<int32_t>(bits >> 23) - 127;
  auto steps = static_cast<int32_t>(rintf(__uint_as_float((bits & 0x7fffffu) | (130u << 23))));  // in [8, 16]
  if (steps == 16) {
    steps = 8;
    ++unbiased;
  }
  return sign | static_cast<uint32_t>(((unbiased + 7) << 3) | (steps - 8));
}

// A pre-scaled, pre-clamped value -> e2m1 code (sign in bit 3). The reference's ties: down at
// 0.25, 1.25, 2.5 and 5, up at 0.75, 1.75 and 3.5. A NaN compares false everywhere: code 0.
__device__ __forceinline__ uint32_t e2m1_encode(float x) {
  const float m = fabsf(x);
  const uint32_t code = static_cast<uint32_t>(m > 0.25f) + static_cast<uint32_t>(m >= 0.75f) +
                        static_cast<uint32_t>(m > 1.25f) + static_cast<uint32_t>(m >= 1.75f) +
                        static_cast<uint32_t>(m > 2.5f) + static_cast<uint32_t>(m >= 3.5f) +
                        static_cast<uint32_t>(m > 5.0f);
  return code | (signbit(x) ? 0x8u : 0x0u);
}

// ---- one block's scale and codes (model::quantize_vector's loop body) ----

constexpr float kFp8Max = 448.0f;
constexpr float kFp4Max = 6.0f;

struct BlockScale {
  uint32_t stored = 0;  // the scale byte
  float divisor = 0;    // what the block's values are divided by before encoding
};

// `amax`: the block's largest |x| (never NaN: NaN values do not count, as in std::fmax).
__device__ __forceinline__ BlockScale block_scale(RowFormat format, float amax) {
  BlockScale scale;
  if (format == RowFormat::Fp8Ue8m0x32) {
    const int32_t k = pow2_ceil_exponent(__fmul_rn(fmaxf(amax, 1e-4f), 1.0f / kFp8Max));
    scale.stored = static_cast<uint32_t>(k + 127) & 0xffu;
    scale.divisor = ldexpf(1.0f, k);
  } else if (format == RowFormat::Fp4E4m3x16) {
    scale.stored = e4m3_encode(__fdiv_rn(fmaxf(amax, kFp4Max * 0x1p-9f), kFp4Max));
    scale.divisor = e4m3_value(scale.stored);
  } else {
    const int32_t k = pow2_ceil_exponent(__fmul_rn(fmaxf(amax, kFp4Max * 0x1p-126f), 1.0f / kFp4Max));
    scale.stored = static_cast<uint32_t>(k + 127) & 0xffu;
    scale.divisor = ldexpf(1.0f, k);
  }
  return scale;
}

// One value's code (FP8: a byte; FP4: a nibble) under its block's scale.
__device__ __forceinline__ uint32_t encode_value(RowFormat format, float x, const BlockScale& scale) {
  // The NaN cases are decided on bits: the compiler treats every NaN as interchangeable and folds
  // host_quotient's pass-through away, so a NaN value cannot carry its sign to signbit(). On the
  // host a NaN input passes the division and clamp unchanged, and inf / inf (an infinite value in
  // a block whose scale overflowed to inf) is x86's negative indefinite NaN.
  const uint32_t bits = __float_as_uint(x);
  const bool nan_input = (bits & 0x7fffffffu) > 0x7f800000u;
  const bool indefinite = (bits & 0x7fffffffu) == 0x7f800000u && __float_as_uint(scale.divisor) == 0x7f800000u;
  if (nan_input || indefinite) {
    const uint32_t negative = indefinite ? 1u : bits >> 31;
    return format == RowFormat::Fp8Ue8m0x32 ? (negative << 7) | 0x7fu : negative << 3;
  }
  const float scaled = host_quotient(x, scale.divisor);
  if (format == RowFormat::Fp8Ue8m0x32) return e4m3_encode(host_clamp(scaled, -kFp8Max, kFp8Max));
  return e2m1_encode(host_clamp(scaled, -kFp4Max, kFp4Max));
}

// model::dequantize_vector for one value: its code times its block's decoded scale byte.
__device__ __forceinline__ float decode_value(RowFormat format, uint32_t code, uint32_t scale_byte) {
  // A NaN code or scale gives the host's quiet NaN (its tables decode every NaN code to it, and
  // x86 passes that operand through the product), decided on bits for the reason above.
  const bool nan_scale = format == RowFormat::Fp4E4m3x16 ? (scale_byte & 0x7fu) == 0x7fu : scale_byte == 0xffu;
  const bool nan_code = format == RowFormat::Fp8Ue8m0x32 && (code & 0x7fu) == 0x7fu;
  if (nan_scale || nan_code) return __uint_as_float(0x7fc00000u);
  const float scale = format == RowFormat::Fp4E4m3x16 ? e4m3_value(scale_byte) : e8m0_value(scale_byte);
  const float value = format == RowFormat::Fp8Ue8m0x32 ? e4m3_value(code) : e2m1_value(code);
  return host_product(value, scale);
}

// ---- a warp over one row ----

// The code and scale byte of the value a lane holds, its block being the whole warp (blocks of
// 32) or its half warp (16): the block's amax is a butterfly within it (max is exact, so the
// order is free). Every lane of the warp calls it; a lane past the row's end passes present =
// false and counts as 0.
struct LaneCode {
  uint32_t code = 0;
  BlockScale scale;
};

__device__ __forceinline__ LaneCode quantize_lane(RowFormat format, float value, bool present) {
  float amax = present ? fmaxf(0.0f, fabsf(value)) : 0.0f;  // fmaxf drops a NaN, as std::fmax does
  const int32_t block = cache_block(format);
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset >>= 1)
    if (offset < block) amax = fmaxf(amax, __shfl_xor_sync(kFullMask, amax, offset));
  LaneCode lane_code;
  lane_code.scale = block_scale(format, amax);
  lane_code.code = encode_value(format, value, lane_code.scale);
  return lane_code;
}

// The warp stores row[0, width) (quantizes(format, width)) at `out`: codes, then one scale byte
// per block. Lane l takes value first + l of each 32; FP4's even lane packs its odd neighbour's
// code into the high nibble.
// Values first .. first + 31 of a row (first a multiple of 32) by the warp: each 32 values are a
// scale block of their own (or two), so the chunks of a row are independent and any warp may
// take any of them.
__device__ __forceinline__ void quantize_chunk_warp(RowFormat format, const float* row, int64_t width, int64_t first,
                                                    uint8_t* out) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int32_t block = cache_block(format);
  uint8_t* scales = out + code_bytes(format, width);
  const int64_t index = first + lane;
  const bool present = index < width;  // a width of 16 mod 32 leaves the last half warp out
  const LaneCode lane_code = quantize_lane(format, present ? row[index] : 0.0f, present);
  const uint32_t odd_neighbour = __shfl_down_sync(kFullMask, lane_code.code, 1);
  if (!present) return;
  if (format == RowFormat::Fp8Ue8m0x32) out[index] = static_cast<uint8_t>(lane_code.code);
  else if (lane % 2 == 0) out[index / 2] = static_cast<uint8_t>(lane_code.code | (odd_neighbour << 4));
  if (lane % block == 0) scales[index / block] = static_cast<uint8_t>(lane_code.scale.stored);
}

// row[first .. first + 31] <- dequantize(quantize(them)) by the warp (model::fake_quantize;
// quantizes(format, width)).
__device__ __forceinline__ void fake_quantize_chunk_warp(RowFormat format, float* row, int64_t width, int64_t first) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int64_t index = first + lane;
  const bool present = index < width;
  const LaneCode lane_code = quantize_lane(format, present ? row[index] : 0.0f, present);
  if (present) row[index] = decode_value(format, lane_code.code, lane_code.scale.stored);
}

// ---- reading a stored row ----

// Value `index` of a stored row of `width` values: codes and scales when the format blocks the
// width, else little-endian f32 (at any alignment).
__device__ __forceinline__ float stored_value(RowFormat format, int64_t width, const uint8_t* row, int64_t index) {
  if (!quantizes(format, width)) {
    const uint8_t* at = row + index * 4;
    if ((reinterpret_cast<uintptr_t>(at) & 3u) == 0) return *reinterpret_cast<const float*>(at);
    return __uint_as_float(load_u32_bytes(at));
  }
  const uint8_t* scales = row + code_bytes(format, width);
  const uint32_t scale_byte = scales[index / cache_block(format)];
  if (format == RowFormat::Fp8Ue8m0x32) return decode_value(format, row[index], scale_byte);
  const uint32_t pair = row[index / 2];
  return decode_value(format, index % 2 == 0 ? (pair & 0xfu) : (pair >> 4), scale_byte);
}

}  // namespace deepinfer::kernels::cuda::detail
