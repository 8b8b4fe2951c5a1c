#include "model/fake_quant.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/float_formats.h"

namespace deepinfer::model {
namespace {

constexpr float kFp8Max = 448.0f;
constexpr float kFp4Max = 6.0f;
float block_amax(const float* x, int64_t n) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) amax = std::fmax(amax, std::fabs(x[i]));
  return amax;
}

}  // namespace

int32_t pow2_ceil_exponent(float t) {
  const uint32_t bits = std::bit_cast<uint32_t>(t);
  const int32_t exponent = static_cast<int32_t>((bits >> 23) & 0xFF);
  const uint32_t mantissa = bits & 0x7FFFFF;
  return exponent - 127 + (mantissa != 0 ? 1 : 0);
}

uint8_t e4m3_encode(float x) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const float magnitude = std::fabs(x);
  if (std::isnan(magnitude) || magnitude >= 480.0f) return sign | 0x7F;
  if (magnitude < 0x1p-6f) {
    // Subnormal range: multiples of 2^-9; the scaling is exact, nearbyint rounds to even.
    return sign | static_cast<uint8_t>(std::nearbyint(magnitude * 512.0f));
  }
  int exponent = 0;
  (void)std::frexp(magnitude, &exponent);
  int unbiased = exponent - 1;
  auto steps = static_cast<int>(std::nearbyint(std::ldexp(magnitude, 3 - unbiased)));  // in [8, 16]
  if (steps == 16) {
    steps = 8;
    ++unbiased;
  }
  return sign | static_cast<uint8_t>(((unbiased + 7) << 3) | (steps - 8));
}

// Decoding is core/float_formats.h's (one table per format in the code base).
float e4m3_decode(uint8_t code) { return e4m3fn_to_float(code); }

uint8_t e2m1_encode(float x) {
  // Midpoints between grid values; at the "up" ones a tie rounds up (odd code below), at the
  // others a value must exceed the midpoint.
  constexpr float kMidpoints[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  constexpr bool kTieUp[7] = {false, true, false, true, false, true, false};
  const float magnitude = std::fabs(x);
  uint8_t code = 0;
  for (int i = 0; i < 7; ++i)
    if (kTieUp[i] ? magnitude >= kMidpoints[i] : magnitude > kMidpoints[i]) ++code;
  return code | (std::signbit(x) ? 0x8 : 0x0);
}

float e2m1_decode(uint8_t code) { return e2m1_to_float(code); }

int64_t cache_block(CacheFormat format) {
  switch (format) {
    case CacheFormat::F32: return 1;
    case CacheFormat::Fp8Ue8m0x32: return 32;
    case CacheFormat::Fp4E4m3x16: return 16;
    case CacheFormat::Fp4Ue8m0x32: return 32;
  }
  return 1;
}

bool quantizes(CacheFormat format, int64_t n) {
  return format != CacheFormat::F32 && n > 0 && n % cache_block(format) == 0;
}

int64_t code_bytes(CacheFormat format, int64_t n) {
  return format == CacheFormat::Fp8Ue8m0x32 ? n : (n + 1) / 2;
}

void quantize_vector(CacheFormat format, const float* x, int64_t n, uint8_t* codes, uint8_t* scales) {
  if (!quantizes(format, n)) fail("quantize_vector: ", n, " values do not split into blocks of ", cache_block(format));
  const int64_t block = cache_block(format);
  for (int64_t b = 0; b < n / block; ++b) {
    const float* values = x + b * block;
    const float amax = block_amax(values, block);
    if (format == CacheFormat::Fp8Ue8m0x32) {
      const int32_t k = pow2_ceil_exponent(std::fmax(amax, 1e-4f) * (1.0f / kFp8Max));
      scales[b] = static_cast<uint8_t>(k + 127);
      const float scale = std::ldexp(1.0f, k);
      for (int64_t i = 0; i < block; ++i)
        codes[b * block + i] = e4m3_encode(std::clamp(values[i] / scale, -kFp8Max, kFp8Max));
      continue;
    }
    float scale;
    if (format == CacheFormat::Fp4E4m3x16) {
      scales[b] = e4m3_encode(std::fmax(amax, kFp4Max * 0x1p-9f) / kFp4Max);
      scale = e4m3_decode(scales[b]);
    } else {
      const int32_t k = pow2_ceil_exponent(std::fmax(amax, kFp4Max * 0x1p-126f) * (1.0f / kFp4Max));
      scales[b] = static_cast<uint8_t>(k + 127);
      scale = std::ldexp(1.0f, k);
    }
    for (int64_t i = 0; i < block; ++i) {
      const int64_t index = b * block + i;
      const uint8_t code = e2m1_encode(std::clamp(values[i] / scale, -kFp4Max, kFp4Max));
      uint8_t& byte = codes[index / 2];
      byte = index % 2 == 0 ? code : static_cast<uint8_t>(byte | (code << 4));
    }
  }
}

void dequantize_vector(CacheFormat format, const uint8_t* codes, const uint8_t* scales, int64_t n, float* out) {
  if (n <= 0) return;
  if (format == CacheFormat::F32) fail("dequantize_vector: F32 is not a stored code format");
  // One scale per block, decoded from its bits (a ue8m0 byte is a float exponent): this runs for
  // every cached entry an attention step reads.
  const int64_t block = cache_block(format);
  for (int64_t b = 0; b * block < n; ++b) {
    const float scale = format == CacheFormat::Fp4E4m3x16 ? e4m3_decode(scales[b]) : e8m0_to_float(scales[b]);
    const int64_t end = std::min(n, (b + 1) * block);
    if (format == CacheFormat::Fp8Ue8m0x32) {
      for (int64_t i = b * block; i < end; ++i) out[i] = e4m3_decode(codes[i]) * scale;
    } else {
      for (int64_t i = b * block; i < end; ++i)
        out[i] = e2m1_decode(i % 2 == 0 ? (codes[i / 2] & 0xF) : (codes[i / 2] >> 4)) * scale;
    }
  }
}

void fake_quantize(CacheFormat format, std::span<float> x) {
  const auto n = static_cast<int64_t>(x.size());
  if (!quantizes(format, n)) return;
  std::vector<uint8_t> codes(static_cast<std::size_t>(code_bytes(format, n)));
  std::vector<uint8_t> scales(static_cast<std::size_t>(n / cache_block(format)));
  quantize_vector(format, x.data(), n, codes.data(), scales.data());
  dequantize_vector(format, codes.data(), scales.data(), n, x.data());
}

}  // namespace deepinfer::model
