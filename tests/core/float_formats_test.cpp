#include "core/float_formats.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>

namespace deepinfer {
namespace {

uint32_t bits_of(float value) { return std::bit_cast<uint32_t>(value); }

// Expected values below are written out by hand from the format definitions; the comment on
// each line shows the arithmetic (sign . exponent . mantissa).

TEST(Bf16, DecodesTopHalfOfBinary32) {
  EXPECT_EQ(bf16_to_float(0x3F80), 1.0f);         // 0.01111111.0000000 = 2^0
  EXPECT_EQ(bf16_to_float(0xC040), -3.0f);        // 1.10000000.1000000 = -(1.5 * 2^1)
  EXPECT_EQ(bf16_to_float(0x3F81), 1.0078125f);   // 1 + 2^-7
  EXPECT_EQ(bf16_to_float(0x0001), 0x1p-133f);    // subnormal: 2^-7 * 2^-126
  EXPECT_TRUE(std::isinf(bf16_to_float(0x7F80)));
  EXPECT_TRUE(std::isnan(bf16_to_float(0x7FC0)));
  EXPECT_EQ(bits_of(bf16_to_float(0x8000)), 0x80000000u);  // -0 keeps its sign
}

TEST(F16, NormalsSubnormalsInfNan) {
  EXPECT_EQ(f16_to_float(0x3C00), 1.0f);         // 0.01111.0000000000 = 2^(15-15)
  EXPECT_EQ(f16_to_float(0xC000), -2.0f);        // 1.10000.0 = -2^1
  EXPECT_EQ(f16_to_float(0x3555), 0.333251953125f);  // 2^-2 * (1 + 341/1024)
  EXPECT_EQ(f16_to_float(0x7BFF), 65504.0f);     // max: 2^15 * (1 + 1023/1024)
  EXPECT_EQ(f16_to_float(0x0400), 0x1p-14f);     // smallest normal
  EXPECT_EQ(f16_to_float(0x0001), 0x1p-24f);     // smallest subnormal: 1/1024 * 2^-14
  EXPECT_EQ(f16_to_float(0x03FF), 1023.0f * 0x1p-24f);  // largest subnormal
  EXPECT_EQ(f16_to_float(0x8001), -0x1p-24f);
  EXPECT_EQ(bits_of(f16_to_float(0x8000)), 0x80000000u);
  EXPECT_EQ(f16_to_float(0x7C00), INFINITY);
  EXPECT_EQ(f16_to_float(0xFC00), -INFINITY);
  EXPECT_TRUE(std::isnan(f16_to_float(0x7E00)));
  EXPECT_TRUE(std::isnan(f16_to_float(0x7C01)));  // signalling payload is still NaN
}

TEST(E4m3fn, EveryByteClass) {
  EXPECT_EQ(e4m3fn_to_float(0x38), 1.0f);             // 0.0111.000 = 2^(7-7) * 1.0
  EXPECT_EQ(e4m3fn_to_float(0x00), 0.0f);             // zero
  EXPECT_EQ(bits_of(e4m3fn_to_float(0x80)), 0x80000000u);  // -0
  EXPECT_EQ(e4m3fn_to_float(0x01), 0.001953125f);     // subnormal min: 1/8 * 2^-6 = 2^-9
  EXPECT_EQ(e4m3fn_to_float(0x07), 0.013671875f);     // subnormal max: 7/8 * 2^-6
  EXPECT_EQ(e4m3fn_to_float(0x08), 0.015625f);        // normal min: 0.0001.000 = 2^(1-7) = 2^-6
  EXPECT_EQ(e4m3fn_to_float(0x7E), 448.0f);           // max: 0.1111.110 = 2^8 * 1.75
  EXPECT_EQ(e4m3fn_to_float(0xFE), -448.0f);
  EXPECT_EQ(e4m3fn_to_float(0x77), 240.0f);           // 0x77 = 0.1110.111 = 2^7 * 1.875
  EXPECT_EQ(e4m3fn_to_float(0x3C), 1.5f);             // 0.0111.100 = 1 + 4/8
  EXPECT_EQ(e4m3fn_to_float(0xC4), -3.0f);            // 1.1000.100 = -(2^1 * 1.5)
  EXPECT_EQ(e4m3fn_to_float(0x81), -0.001953125f);    // -2^-9
  EXPECT_TRUE(std::isnan(e4m3fn_to_float(0x7F)));     // S.1111.111 = NaN
  EXPECT_TRUE(std::isnan(e4m3fn_to_float(0xFF)));
  EXPECT_FALSE(std::isinf(e4m3fn_to_float(0x78)));    // 0.1111.000 = 256: the fn variant has no inf
  EXPECT_EQ(e4m3fn_to_float(0x78), 256.0f);
}

TEST(E4m3fn, OnlyTwoNansAndNoInfinities) {
  int nans = 0;
  for (unsigned byte = 0; byte < 256; ++byte) {
    const float value = e4m3fn_to_float(static_cast<uint8_t>(byte));
    EXPECT_FALSE(std::isinf(value)) << byte;
    if (std::isnan(value)) ++nans;
    else EXPECT_LE(std::fabs(value), 448.0f) << byte;
  }
  EXPECT_EQ(nans, 2);
}

TEST(E5m2, InfNanAndValues) {
  EXPECT_EQ(e5m2_to_float(0x3C), 1.0f);          // 0.01111.00 = 2^(15-15)
  EXPECT_EQ(e5m2_to_float(0x7B), 57344.0f);      // max: 0.11110.11 = 2^15 * 1.75
  EXPECT_EQ(e5m2_to_float(0x01), 0x1p-16f);      // subnormal min: 1/4 * 2^-14
  EXPECT_EQ(e5m2_to_float(0x04), 0x1p-14f);      // normal min
  EXPECT_EQ(e5m2_to_float(0xC2), -3.0f);         // 1.10000.10 = -(2 * 1.5)
  EXPECT_EQ(e5m2_to_float(0x7C), INFINITY);      // 0.11111.00
  EXPECT_EQ(e5m2_to_float(0xFC), -INFINITY);
  EXPECT_TRUE(std::isnan(e5m2_to_float(0x7D)));
  EXPECT_TRUE(std::isnan(e5m2_to_float(0x7E)));
  EXPECT_TRUE(std::isnan(e5m2_to_float(0xFF)));
}

TEST(E8m0, PowersOfTwo) {
  EXPECT_EQ(e8m0_to_float(127), 1.0f);   // 2^(127-127)
  EXPECT_EQ(e8m0_to_float(128), 2.0f);   // 2^1
  EXPECT_EQ(e8m0_to_float(126), 0.5f);   // 2^-1
  EXPECT_EQ(e8m0_to_float(1), 0x1p-126f);   // smallest normal float
  EXPECT_EQ(e8m0_to_float(254), 0x1p127f);  // largest power of two in binary32
  // 2^-127 is a float subnormal: mantissa bit 22 set, exponent field 0.
  EXPECT_EQ(bits_of(e8m0_to_float(0)), 0x00400000u);
  EXPECT_EQ(e8m0_to_float(0), 0x1p-127f);
  EXPECT_TRUE(std::isnan(e8m0_to_float(255)));
}

TEST(E2m1, NibbleTable) {
  const float expected[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  for (uint8_t nibble = 0; nibble < 16; ++nibble) EXPECT_EQ(e2m1_to_float(nibble), expected[nibble]) << int{nibble};
  EXPECT_EQ(bits_of(e2m1_to_float(0x8)), 0x80000000u);  // -0
  EXPECT_EQ(e2m1_to_float(0xF3), 1.5f);                 // only the low nibble is read
}

TEST(FloatToBf16, RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3F80);
  // Exactly halfway between 0x3F80 (1.0) and 0x3F81: ties to the even result 0x3F80.
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x3F808000u)), 0x3F80);
  // Halfway between 0x3F81 (odd) and 0x3F82: ties to the even result 0x3F82.
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x3F818000u)), 0x3F82);
  // Just above and below halfway round to nearest.
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x3F808001u)), 0x3F81);
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x3F807FFFu)), 0x3F80);
  EXPECT_EQ(float_to_bf16(-1.0f), 0xBF80);
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0xBF818000u)), 0xBF82);  // ties to even with sign
}

TEST(FloatToBf16, OverflowInfAndNan) {
  // Largest float rounds up past the largest bf16 (0x7F7F) to inf.
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x7F7FFFFFu)), 0x7F80);
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0xFF7FFFFFu)), 0xFF80);
  // Halfway between 0x7F7F and inf: 0x7F7F is odd, so the tie goes to 0x7F80 = inf.
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x7F7F8000u)), 0x7F80);
  EXPECT_EQ(float_to_bf16(INFINITY), 0x7F80);
  EXPECT_EQ(float_to_bf16(-INFINITY), 0xFF80);
  // A NaN whose payload lives only in the low 16 bits must not truncate to inf.
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x7F800001u)), 0x7FC0);
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0xFFC00000u)), 0xFFC0);
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x7FFFFFFFu)), 0x7FFF);  // all-ones NaN stays NaN
  EXPECT_EQ(float_to_bf16(0x1p-133f), 0x0001);                          // subnormal exact
}

TEST(FloatFormats, UsableInConstantExpressions) {
  static_assert(bf16_to_float(0x3F80) == 1.0f);
  static_assert(f16_to_float(0x3C00) == 1.0f);
  static_assert(e4m3fn_to_float(0x7E) == 448.0f);
  static_assert(e8m0_to_float(128) == 2.0f);
  static_assert(e2m1_to_float(7) == 6.0f);
  static_assert(float_to_bf16(1.0f) == 0x3F80);
  SUCCEED();
}

}  // namespace
}  // namespace deepinfer
