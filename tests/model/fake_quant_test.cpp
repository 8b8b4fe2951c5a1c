// The V4.1 cache quantisers against hand-computed values: ue8m0 scale rounding, e4m3 round to
// nearest even (normal and subnormal, saturation to NaN), the e2m1 tie rule, and whole blocks.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "model/fake_quant.h"
#include "model/quantized_rows.h"

namespace deepinfer::model {
namespace {

TEST(FakeQuantTest, Pow2CeilExponentFromTheBits) {
  EXPECT_EQ(pow2_ceil_exponent(1.0f), 0);
  EXPECT_EQ(pow2_ceil_exponent(1.5f), 1);
  EXPECT_EQ(pow2_ceil_exponent(0.25f), -2);
  EXPECT_EQ(pow2_ceil_exponent(0.2500001f), -1);
  EXPECT_EQ(pow2_ceil_exponent(448.0f), 9);
}

TEST(FakeQuantTest, E4m3RoundsToNearestEven) {
  EXPECT_EQ(e4m3_encode(1.0f), 0x38);
  EXPECT_EQ(e4m3_encode(-2.0f), 0xC0);
  EXPECT_EQ(e4m3_encode(1.0625f), 0x38);  // tie between 1.0 (even) and 1.125
  EXPECT_EQ(e4m3_encode(1.1875f), 0x3A);  // tie between 1.125 and 1.25 (even)
  EXPECT_EQ(e4m3_encode(448.0f), 0x7E);
  EXPECT_EQ(e4m3_encode(464.0f), 0x7E);  // tie between 448 (even) and the NaN pattern
  EXPECT_EQ(e4m3_encode(470.0f), 0x7F);  // rounds onto the NaN pattern, as torch's cast
  EXPECT_EQ(e4m3_encode(500.0f), 0x7F);
  EXPECT_EQ(e4m3_encode(0x1p-9f), 0x01);   // smallest subnormal
  EXPECT_EQ(e4m3_encode(0x1p-10f), 0x00);  // tie between 0 (even) and 2^-9
  EXPECT_EQ(e4m3_encode(3 * 0x1p-10f), 0x02);
  EXPECT_EQ(e4m3_encode(0.015f), 0x08);  // 7.68 quanta of 2^-9 round up to 2^-6, the first normal
  EXPECT_EQ(e4m3_decode(0x7E), 448.0f);
  EXPECT_EQ(e4m3_decode(0x01), 0x1p-9f);
  EXPECT_EQ(e4m3_decode(0xC0), -2.0f);
  EXPECT_TRUE(std::isnan(e4m3_decode(0x7F)));
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7F) == 0x7F) continue;
    EXPECT_EQ(e4m3_encode(e4m3_decode(static_cast<uint8_t>(code))), code) << code;
  }
}

TEST(FakeQuantTest, E2m1TieRule) {
  EXPECT_EQ(e2m1_encode(0.25f), 0);  // down
  EXPECT_EQ(e2m1_encode(0.26f), 1);
  EXPECT_EQ(e2m1_encode(0.75f), 2);  // up
  EXPECT_EQ(e2m1_encode(0.74f), 1);
  EXPECT_EQ(e2m1_encode(1.25f), 2);  // down
  EXPECT_EQ(e2m1_encode(1.75f), 4);  // up
  EXPECT_EQ(e2m1_encode(2.5f), 4);   // down
  EXPECT_EQ(e2m1_encode(3.5f), 6);   // up
  EXPECT_EQ(e2m1_encode(5.0f), 6);   // down
  EXPECT_EQ(e2m1_encode(5.01f), 7);
  EXPECT_EQ(e2m1_encode(-0.75f), 0xA);
  EXPECT_EQ(e2m1_decode(0xA), -1.0f);
  EXPECT_EQ(e2m1_decode(7), 6.0f);
}

std::vector<float> block_of(int64_t n, float first, float second) {
  std::vector<float> x(static_cast<std::size_t>(n), 0.0f);
  x[0] = first;
  x[1] = second;
  return x;
}

TEST(FakeQuantTest, Fp8BlockWithPowerOfTwoScale) {
  // amax 100: 100/448 -> scale 2^-2; 100/0.25 = 400 ties between 384 (even) and 416.
  auto x = block_of(32, 1.0f, 100.0f);
  fake_quantize(CacheFormat::Fp8Ue8m0x32, x);
  EXPECT_EQ(x[0], 1.0f);
  EXPECT_EQ(x[1], 96.0f);
  EXPECT_EQ(x[2], 0.0f);
}

TEST(FakeQuantTest, Fp4BlockWithUe8m0Scale) {
  // amax 7: 7/6 -> scale 2; 7/2 = 3.5 ties up to 4 -> 8. 0.75/2 = 0.375 -> 0.5 -> 1.
  auto x = block_of(32, 0.75f, 7.0f);
  fake_quantize(CacheFormat::Fp4Ue8m0x32, x);
  EXPECT_EQ(x[0], 1.0f);
  EXPECT_EQ(x[1], 8.0f);
  // amax 3: 3 * (1/6) rounds to 0.5 exactly -> scale 0.5; 0.3 / 0.5 = 0.6 -> 0.5 -> 0.25.
  x = block_of(32, 0.3f, 3.0f);
  fake_quantize(CacheFormat::Fp4Ue8m0x32, x);
  EXPECT_EQ(x[0], 0.25f);
  EXPECT_EQ(x[1], 3.0f);
}

TEST(FakeQuantTest, Fp4BlockWithE4m3Scale) {
  // amax 7: 7/6 = 1.1667 -> e4m3 1.125; 7/1.125 clamps to 6 -> 6.75; 0.28125/1.125 = 0.25 ties down.
  auto x = block_of(16, 0.28125f, 7.0f);
  x[2] = 1.0f;  // 0.889 -> 1.0 -> 1.125
  fake_quantize(CacheFormat::Fp4E4m3x16, x);
  EXPECT_EQ(x[0], 0.0f);
  EXPECT_EQ(x[1], 6.75f);
  EXPECT_EQ(x[2], 1.125f);
}

TEST(FakeQuantTest, LengthsThatDoNotBlockStayUnquantised) {
  std::vector<float> x(20, 0.123f);
  fake_quantize(CacheFormat::Fp8Ue8m0x32, x);
  EXPECT_EQ(x[0], 0.123f);
  QuantizedRows rows(CacheFormat::Fp4E4m3x16, 20);
  EXPECT_FALSE(rows.quantized());
}

TEST(QuantizedRowsTest, StoresTheSmallFormatAndReadsTheFakeQuantisedValues) {
  QuantizedRows rows(CacheFormat::Fp4E4m3x16, 32);
  EXPECT_EQ(rows.row_bytes(), 16 + 2);  // packed nibbles + two e4m3 scales
  std::vector<std::vector<float>> written;
  for (int r = 0; r < 3; ++r) {
    std::vector<float> row(32);
    for (int i = 0; i < 32; ++i) row[i] = std::sin(static_cast<float>(r * 32 + i)) * static_cast<float>(r + 1);
    rows.append(row.data());
    fake_quantize(CacheFormat::Fp4E4m3x16, row);
    written.push_back(row);
  }
  rows.erase_front(1);
  ASSERT_EQ(rows.size(), 2);
  std::vector<float> out(32);
  for (int r = 0; r < 2; ++r) {
    rows.read(r, out.data());
    EXPECT_EQ(out, written[r + 1]);
  }
}

}  // namespace
}  // namespace deepinfer::model
