#pragma once
// The cache quantisers V4.1 was trained with (quantisation-aware), bit for bit as the reference
// applies them: window KV to FP8 e4m3 in blocks of 32 with power-of-two (ue8m0) scales,
// compressed KV to FP4 e2m1 in blocks of 16 with e4m3 scales, indexer queries and keys to FP4
// e2m1 in blocks of 32 with ue8m0 scales. A vector whose length is not a multiple of the block
// is left unquantised (the reference cannot block it either).
//
// Encoders return the stored codes; the matching decoders give back the dequantised floats, so
// a cache can keep the small formats and still reproduce the reference's fake-quantised values.
#include <cstdint>
#include <span>

namespace deepinfer::model {

// 2^ceil(log2(t)) for a positive normal float, from its bits: the unbiased exponent, plus one
// when any mantissa bit is set (the ue8m0 scale rounding). Returned as the exponent k.
int32_t pow2_ceil_exponent(float t);

// float -> float8_e4m3fn code, round to nearest even; |x| at or above 480 becomes NaN (0x7f),
// as torch's cast does. Subnormals (below 2^-6) have quantum 2^-9.
uint8_t e4m3_encode(float x);
float e4m3_decode(uint8_t code);

// (the reference decodes code 8 to +0, core to -0: the same value in every sum.)
// A pre-scaled, pre-clamped value ([-6, 6]) -> e2m1 code (sign in bit 3). Round to nearest with
// the reference's tie rule: ties at 0.25, 1.25, 2.5, 5 go down, at 0.75, 1.75, 3.5 go up.
uint8_t e2m1_encode(float x);
float e2m1_decode(uint8_t code);

enum class CacheFormat {
  F32,           // unquantised
  Fp8Ue8m0x32,   // window KV
  Fp4E4m3x16,    // compressed KV
  Fp4Ue8m0x32,   // indexer keys and queries
};

int64_t cache_block(CacheFormat format);
// True when `format` quantises a vector of n values (n a multiple of its block).
bool quantizes(CacheFormat format, int64_t n);

// One vector's stored form: `codes` (FP8: one byte per value; FP4: two e2m1 codes per byte, the
// even element in the low nibble) and one scale byte per block (ue8m0: the biased exponent;
// e4m3: the scale's code). Sizes: code_bytes(format, n) and n / block. F32 is not stored here.
int64_t code_bytes(CacheFormat format, int64_t n);
void quantize_vector(CacheFormat format, const float* x, int64_t n, uint8_t* codes, uint8_t* scales);
void dequantize_vector(CacheFormat format, const uint8_t* codes, const uint8_t* scales, int64_t n, float* out);

// x <- dequantize(quantize(x)) in place: the reference's fake quantisation. No-op when the
// length does not block.
void fake_quantize(CacheFormat format, std::span<float> x);

}  // namespace deepinfer::model
