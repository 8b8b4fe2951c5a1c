#include "io/dequant.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/float_formats.h"

namespace deepinfer {
namespace {

// Owns the bytes a TensorView points at.
struct OwnedTensor {
  std::vector<std::byte> bytes;
  TensorView view;
};

template <typename T>
OwnedTensor make_tensor(DType dtype, std::vector<int64_t> shape, const std::vector<T>& values) {
  OwnedTensor tensor;
  tensor.bytes.resize(values.size() * sizeof(T));
  if (!values.empty()) std::memcpy(tensor.bytes.data(), values.data(), tensor.bytes.size());
  tensor.view.dtype = dtype;
  tensor.view.shape = std::move(shape);
  tensor.view.bytes = tensor.bytes;
  return tensor;
}

OwnedTensor bytes_tensor(DType dtype, std::vector<int64_t> shape, std::vector<uint8_t> values) {
  return make_tensor<uint8_t>(dtype, std::move(shape), values);
}

// Runs `action`, expects a deepinfer::Error whose message contains every fragment.
template <typename Action>
void expect_error(Action action, std::vector<std::string> fragments) {
  try {
    action();
    ADD_FAILURE() << "no deepinfer::Error thrown";
  } catch (const Error& error) {
    const std::string message = error.what();
    for (const auto& fragment : fragments)
      EXPECT_NE(message.find(fragment), std::string::npos) << "'" << fragment << "' not in: " << message;
  }
}

// 5x7 FP8 weight in 4x4 blocks -> 2x2 scales; the last block row and column are partial.
// All weights are 0x38 (= 2^(7-7) * 1.0 = 1.0) except four, so every output is
// weight * tile scale with scales S = [[127, 128], [126, 130]] = [[1, 2], [0.5, 8]].
struct Fp8Small {
  OwnedTensor weight;
  OwnedTensor scale;
  Fp8Small() {
    std::vector<uint8_t> w(5 * 7, 0x38);
    w[3 * 7 + 3] = 0x3C;  // 0.0111.100 = 1.5
    w[3 * 7 + 4] = 0x3C;  // 1.5
    w[4 * 7 + 3] = 0xC4;  // 1.1000.100 = -(2^1 * 1.5) = -3
    w[4 * 7 + 6] = 0x7E;  // 0.1111.110 = 2^8 * 1.75 = 448
    weight = bytes_tensor(DType::F8_E4M3, {5, 7}, w);
    scale = bytes_tensor(DType::F8_E8M0, {2, 2}, {127, 128, 126, 130});
  }
};

TEST(Fp8BlockScaled, PartialTilesUseTheirOwnScale) {
  Fp8Small data;
  auto matrix = QuantizedMatrix::fp8_block_scaled(data.weight.view, data.scale.view, {4, 4}, "w");
  EXPECT_EQ(matrix.rows(), 5);
  EXPECT_EQ(matrix.cols(), 7);
  std::vector<float> out(35, -99.0f);
  matrix.dequantize(out);
  const std::vector<float> expected = {
      1, 1, 1, 1,    2, 2, 2,     // rows 0-2: tile (0,0) scale 2^0, tile (0,1) scale 2^1
      1, 1, 1, 1,    2, 2, 2,     //
      1, 1, 1, 1,    2, 2, 2,     //
      1, 1, 1, 1.5,  3, 2, 2,     // row 3: 1.5 * 1 and 1.5 * 2
      0.5, 0.5, 0.5, -1.5, 8, 8, 3584,  // row 4: tile (1,0) 2^-1 (-3 * 0.5), tile (1,1) 2^3 (448 * 8)
  };
  EXPECT_EQ(out, expected);
}

TEST(Fp8BlockScaled, F32ScalesMultiply) {
  Fp8Small data;
  auto scale = make_tensor<float>(DType::F32, {2, 2}, {0.75f, -2.0f, 1e-3f, 10.0f});
  auto matrix = QuantizedMatrix::fp8_block_scaled(data.weight.view, scale.view, {4, 4}, "w");
  std::vector<float> out(35);
  matrix.dequantize(out);
  EXPECT_EQ(out[0], 0.75f);              // 1.0 * 0.75
  EXPECT_EQ(out[3 * 7 + 3], 1.125f);     // 1.5 * 0.75
  EXPECT_EQ(out[3 * 7 + 4], -3.0f);      // 1.5 * -2
  EXPECT_EQ(out[4 * 7 + 0], 1e-3f);      // 1.0 * 1e-3
  EXPECT_EQ(out[4 * 7 + 6], 4480.0f);    // 448 * 10
}

// 130x200 in 128x128 blocks: scale [2, 2], tiles are 128 / 2 rows and 128 / 72 columns.
// Weights all 0x40 (= 0.1000.000 = 2^1 = 2); scales 127, 129, 125, 131 = 1, 4, 0.25, 16.
struct Fp8Large {
  OwnedTensor weight = bytes_tensor(DType::F8_E4M3, {130, 200}, std::vector<uint8_t>(130 * 200, 0x40));
  OwnedTensor scale = bytes_tensor(DType::F8_E8M0, {2, 2}, {127, 129, 125, 131});
};

TEST(Fp8BlockScaled, TileBoundariesAt128) {
  Fp8Large data;
  auto matrix = QuantizedMatrix::fp8_block_scaled(data.weight.view, data.scale.view, {128, 128}, "layers.0.attn.wq_a");
  std::vector<float> out(130 * 200);
  matrix.dequantize(out);
  auto at = [&](int r, int c) { return out[r * 200 + c]; };
  EXPECT_EQ(at(0, 0), 2.0f);      // 2 * 2^0
  EXPECT_EQ(at(127, 127), 2.0f);  // last element of tile (0,0)
  EXPECT_EQ(at(127, 128), 8.0f);  // first column of tile (0,1): 2 * 2^2
  EXPECT_EQ(at(0, 199), 8.0f);
  EXPECT_EQ(at(128, 127), 0.5f);  // first row of tile (1,0): 2 * 2^-2
  EXPECT_EQ(at(128, 128), 32.0f); // tile (1,1): 2 * 2^4
  EXPECT_EQ(at(129, 199), 32.0f);
  EXPECT_EQ(at(129, 0), 0.5f);
  const float tile_value[2][2] = {{2.0f, 8.0f}, {0.5f, 32.0f}};
  for (int r = 0; r < 130; ++r)
    for (int c = 0; c < 200; ++c) ASSERT_EQ(at(r, c), tile_value[r >= 128][c >= 128]) << r << "," << c;
}

TEST(Fp8BlockScaled, RowRangeMatchesWholeTensor) {
  Fp8Large data;
  auto matrix = QuantizedMatrix::fp8_block_scaled(data.weight.view, data.scale.view, {128, 128}, "w");
  std::vector<float> whole(130 * 200);
  matrix.dequantize(whole);
  for (auto [begin, end] : {std::pair{0, 1}, std::pair{100, 130}, std::pair{127, 129}, std::pair{129, 130}}) {
    std::vector<float> part((end - begin) * 200);
    matrix.dequantize_rows(begin, end, part);
    EXPECT_TRUE(std::equal(part.begin(), part.end(), whole.begin() + begin * 200)) << begin << ".." << end;
  }
  std::vector<float> nothing;
  matrix.dequantize_rows(5, 5, nothing);  // an empty range needs no output room
}

TEST(Fp8BlockScaled, RectangularBlocksPerRowScale) {
  // Engram-style layout: 2 x 64 weight, one scale per 32 columns of each row (block 1 x 32).
  auto weight = bytes_tensor(DType::F8_E4M3, {2, 64}, std::vector<uint8_t>(128, 0x38));  // all 1.0
  auto scale = bytes_tensor(DType::F8_E8M0, {2, 2}, {127, 128, 129, 130});               // 1, 2, 4, 8
  auto matrix = QuantizedMatrix::fp8_block_scaled(weight.view, scale.view, {1, 32}, "engram.embed");
  std::vector<float> out(128);
  matrix.dequantize(out);
  EXPECT_EQ(out[31], 1.0f);
  EXPECT_EQ(out[32], 2.0f);
  EXPECT_EQ(out[64 + 31], 4.0f);
  EXPECT_EQ(out[64 + 32], 8.0f);
}

TEST(Fp8BlockScaled, Bf16OutputIsRoundedF32Output) {
  Fp8Small data;
  // Scale 2^0 with a non-power-of-two F32 scale makes values that need rounding in bf16.
  auto scale = make_tensor<float>(DType::F32, {2, 2}, {1.0f / 3.0f, 3.1f, -7.7f, 1e30f});
  auto matrix = QuantizedMatrix::fp8_block_scaled(data.weight.view, scale.view, {4, 4}, "w");
  std::vector<float> f32(35);
  std::vector<uint16_t> bf16(35);
  matrix.dequantize(f32);
  matrix.dequantize(bf16);
  for (std::size_t i = 0; i < f32.size(); ++i) EXPECT_EQ(bf16[i], float_to_bf16(f32[i])) << i;
  EXPECT_EQ(bf16[0], 0x3EAB);  // 1/3 = 0x3EAAAAAB -> rounds up to 0x3EAB
  std::vector<uint16_t> rows_bf16(7);
  matrix.dequantize_rows(4, 5, rows_bf16);
  EXPECT_TRUE(std::equal(rows_bf16.begin(), rows_bf16.end(), bf16.begin() + 28));
}

// FP4: 2 x 32 packed bytes = logical 2 x 64, groups of 32 -> scale [2, 2].
struct Fp4Data {
  OwnedTensor weight;
  OwnedTensor scale;
  explicit Fp4Data(DType weight_dtype = DType::U8) {
    std::vector<uint8_t> w(2 * 32, 0x00);
    w[0] = 0x71;       // row 0: col 0 = low nibble 1 (0.5), col 1 = high nibble 7 (6)
    w[15] = 0xC2;      // row 0: col 30 = nibble 2 (1.0), col 31 = nibble 0xC (-2)
    w[16] = 0xA3;      // row 0: col 32 = nibble 3 (1.5), col 33 = nibble 0xA (-1); group 1 scale is NaN
    w[32 + 0] = 0x0F;  // row 1: col 0 = nibble 0xF (-6), col 1 = 0
    w[32 + 1] = 0x01;  // row 1: col 2 = nibble 1 (0.5), col 3 = 0
    w[32 + 16] = 0x27; // row 1: col 32 = nibble 7 (6), col 33 = nibble 2 (1)
    weight = bytes_tensor(weight_dtype, {2, 32}, w);
    // Row 0: 2^(128-127) = 2 and NaN; row 1: extremes 2^-127 (b = 0) and 2^127 (b = 254).
    scale = bytes_tensor(DType::F8_E8M0, {2, 2}, {128, 255, 0, 254});
  }
};

TEST(Fp4GroupScaled, NibblesAndPerGroupScales) {
  Fp4Data data;
  auto matrix = QuantizedMatrix::fp4_group_scaled(data.weight.view, data.scale.view, "layers.3.ffn.experts.0.w1");
  EXPECT_EQ(matrix.rows(), 2);
  EXPECT_EQ(matrix.cols(), 64);
  std::vector<float> out(128);
  matrix.dequantize(out);
  EXPECT_EQ(out[0], 1.0f);    // 0.5 * 2
  EXPECT_EQ(out[1], 12.0f);   // 6 * 2
  EXPECT_EQ(out[2], 0.0f);    // nibble 0 * 2
  EXPECT_EQ(out[30], 2.0f);   // 1 * 2
  EXPECT_EQ(out[31], -4.0f);  // -2 * 2
  for (int c = 32; c < 64; ++c) EXPECT_TRUE(std::isnan(out[c])) << c;  // scale byte 255 = NaN
  EXPECT_EQ(out[64 + 0], -0x1.8p-125f);  // -6 * 2^-127 = -1.5 * 2^-125
  EXPECT_EQ(out[64 + 1], 0.0f);
  EXPECT_EQ(out[64 + 2], 0x1p-128f);     // 0.5 * 2^-127, a float subnormal
  EXPECT_EQ(out[64 + 32], INFINITY);     // 6 * 2^127 = 1.5 * 2^129 overflows binary32
  EXPECT_EQ(out[64 + 33], 0x1p127f);     // 1 * 2^127
  EXPECT_EQ(out[64 + 34], 0.0f);         // 0 * 2^127
}

TEST(Fp4GroupScaled, I8AndU8AreTheSameBits) {
  Fp4Data unsigned_data(DType::U8);
  Fp4Data signed_data(DType::I8);
  std::vector<float> from_u8(128), from_i8(128);
  QuantizedMatrix::fp4_group_scaled(unsigned_data.weight.view, unsigned_data.scale.view, "u").dequantize(from_u8);
  QuantizedMatrix::fp4_group_scaled(signed_data.weight.view, signed_data.scale.view, "i").dequantize(from_i8);
  for (int i = 0; i < 128; ++i)
    EXPECT_EQ(std::bit_cast<uint32_t>(from_u8[i]), std::bit_cast<uint32_t>(from_i8[i])) << i;
}

TEST(Fp4GroupScaled, RowRangeAndBf16) {
  Fp4Data data;
  auto matrix = QuantizedMatrix::fp4_group_scaled(data.weight.view, data.scale.view, "w");
  std::vector<float> whole(128), row1(64);
  matrix.dequantize(whole);
  matrix.dequantize_rows(1, 2, row1);
  for (int c = 0; c < 64; ++c) EXPECT_EQ(std::bit_cast<uint32_t>(row1[c]), std::bit_cast<uint32_t>(whole[64 + c]));
  std::vector<uint16_t> bf16(128);
  matrix.dequantize(bf16);
  for (int i = 0; i < 128; ++i) EXPECT_EQ(bf16[i], float_to_bf16(whole[i])) << i;
  EXPECT_EQ(bf16[1], 0x4140);   // 12.0
  EXPECT_EQ(bf16[32], 0x7FC0);  // NaN stays NaN
  EXPECT_EQ(bf16[96], 0x7F80);  // inf
}

TEST(Fp4GroupScaled, SmallerGroupSize) {
  Fp4Data data;  // 64 logical columns in groups of 16 -> scale [2, 4]
  auto scale = bytes_tensor(DType::F8_E8M0, {2, 4}, {127, 128, 129, 130, 127, 127, 127, 127});
  auto matrix = QuantizedMatrix::fp4_group_scaled(data.weight.view, scale.view, "w", 16);
  std::vector<float> out(128);
  matrix.dequantize(out);
  EXPECT_EQ(out[1], 6.0f);     // group 0: 6 * 2^0
  EXPECT_EQ(out[31], -4.0f);   // group 1: -2 * 2^1
  EXPECT_EQ(out[32], 6.0f);    // group 2: 1.5 * 2^2
  EXPECT_EQ(out[33], -4.0f);   // group 2: -1 * 2^2
}

TEST(DequantErrors, WrongDtypes) {
  Fp8Small data;
  auto bf16_weight = make_tensor<uint16_t>(DType::BF16, {5, 7}, std::vector<uint16_t>(35));
  expect_error([&] { QuantizedMatrix::fp8_block_scaled(bf16_weight.view, data.scale.view, {4, 4}, "layers.1.attn.wkv"); },
               {"layers.1.attn.wkv", "F8_E4M3", "BF16"});
  auto bf16_scale = make_tensor<uint16_t>(DType::BF16, {2, 2}, std::vector<uint16_t>(4));
  expect_error([&] { QuantizedMatrix::fp8_block_scaled(data.weight.view, bf16_scale.view, {4, 4}, "s"); },
               {"'s'", "scale", "BF16"});
  expect_error([&] { QuantizedMatrix::fp4_group_scaled(data.weight.view, data.scale.view, "e"); },
               {"'e'", "I8 or U8", "F8_E4M3"});
}

TEST(DequantErrors, ScaleShapeMustMatchCeilDividedWeight) {
  Fp8Small data;
  auto short_scale = bytes_tensor(DType::F8_E8M0, {1, 2}, {127, 127});  // floor(5/4) instead of ceil
  expect_error([&] { QuantizedMatrix::fp8_block_scaled(data.weight.view, short_scale.view, {4, 4}, "wq_b"); },
               {"wq_b", "scale shape [1, 2]", "[2, 2]"});
  expect_error([&] { QuantizedMatrix::fp8_block_scaled(data.weight.view, data.scale.view, {4, 3}, "wq_b"); },
               {"wq_b", "[2, 3]"});
  Fp4Data fp4;
  auto wrong = bytes_tensor(DType::F8_E8M0, {2, 1}, {127, 127});
  expect_error([&] { QuantizedMatrix::fp4_group_scaled(fp4.weight.view, wrong.view, "w2"); }, {"w2", "[2, 2]"});
}

TEST(DequantErrors, Fp4InputDimNotDivisibleByGroup) {
  auto weight = bytes_tensor(DType::U8, {2, 24}, std::vector<uint8_t>(48));  // 48 logical columns
  auto scale = bytes_tensor(DType::F8_E8M0, {2, 2}, {127, 127, 127, 127});
  expect_error([&] { QuantizedMatrix::fp4_group_scaled(weight.view, scale.view, "experts.5.w3"); },
               {"experts.5.w3", "48", "not divisible", "32"});
  expect_error([&] { QuantizedMatrix::fp4_group_scaled(weight.view, scale.view, "g", 3); }, {"'g'", "even"});
}

TEST(DequantErrors, OutputTooSmallAndBadRowRange) {
  Fp8Small data;
  auto matrix = QuantizedMatrix::fp8_block_scaled(data.weight.view, data.scale.view, {4, 4}, "out_check");
  std::vector<float> small(34);
  expect_error([&] { matrix.dequantize(small); }, {"out_check", "34", "35"});
  std::vector<uint16_t> small_bf16(6);
  expect_error([&] { matrix.dequantize_rows(1, 2, small_bf16); }, {"out_check", "6", "7"});
  std::vector<float> big(100);
  expect_error([&] { matrix.dequantize_rows(4, 6, big); }, {"out_check", "[4, 6)"});
  expect_error([&] { matrix.dequantize_rows(-1, 2, big); }, {"out_check"});
  expect_error([&] { matrix.dequantize_rows(3, 2, big); }, {"out_check"});
}

TEST(DequantErrors, ByteSizeAndRankMismatch) {
  auto truncated = bytes_tensor(DType::F8_E4M3, {5, 7}, std::vector<uint8_t>(34));
  auto scale = bytes_tensor(DType::F8_E8M0, {2, 2}, {127, 127, 127, 127});
  expect_error([&] { QuantizedMatrix::fp8_block_scaled(truncated.view, scale.view, {4, 4}, "cut"); },
               {"cut", "35 bytes", "34"});
  auto flat = bytes_tensor(DType::F8_E4M3, {35}, std::vector<uint8_t>(35));
  expect_error([&] { QuantizedMatrix::fp8_block_scaled(flat.view, scale.view, {4, 4}, "flat"); }, {"flat", "2-D"});
  auto weight = bytes_tensor(DType::F8_E4M3, {5, 7}, std::vector<uint8_t>(35));
  expect_error([&] { QuantizedMatrix::fp8_block_scaled(weight.view, scale.view, {0, 4}, "zero"); },
               {"zero", "block"});
  auto negative = bytes_tensor(DType::F8_E4M3, {-5, 7}, {});
  expect_error([&] { QuantizedMatrix::fp8_block_scaled(negative.view, scale.view, {4, 4}, "neg"); },
               {"neg", "invalid shape"});
}

TEST(ConvertToF32, EveryFloatDtype) {
  std::vector<float> out(3);
  // F32 stored at an odd address: checkpoint data need not be aligned.
  std::vector<std::byte> storage(1 + 3 * sizeof(float));
  const float values[3] = {1.5f, -0.0f, 3e38f};
  std::memcpy(storage.data() + 1, values, sizeof(values));
  TensorView f32{DType::F32, {3}, std::span<const std::byte>(storage).subspan(1)};
  convert_to_f32(f32, out, "f32");
  EXPECT_EQ(out, (std::vector<float>{1.5f, -0.0f, 3e38f}));

  auto f16 = make_tensor<uint16_t>(DType::F16, {3}, {0x3C00, 0x0001, 0xFC00});  // 1, 2^-24, -inf
  convert_to_f32(f16.view, out, "f16");
  EXPECT_EQ(out, (std::vector<float>{1.0f, 0x1p-24f, -INFINITY}));

  auto bf16 = make_tensor<uint16_t>(DType::BF16, {1, 3}, {0x3F80, 0xC040, 0x4120});  // 1, -3, 10
  convert_to_f32(bf16.view, out, "bf16");
  EXPECT_EQ(out, (std::vector<float>{1.0f, -3.0f, 10.0f}));

  auto e4m3 = bytes_tensor(DType::F8_E4M3, {3}, {0x38, 0x01, 0xFE});  // 1, 2^-9, -448
  convert_to_f32(e4m3.view, out, "e4m3");
  EXPECT_EQ(out, (std::vector<float>{1.0f, 0x1p-9f, -448.0f}));

  auto e5m2 = bytes_tensor(DType::F8_E5M2, {3}, {0x3C, 0x7B, 0x7C});  // 1, 57344, inf
  convert_to_f32(e5m2.view, out, "e5m2");
  EXPECT_EQ(out, (std::vector<float>{1.0f, 57344.0f, INFINITY}));
}

TEST(ConvertToF32, Errors) {
  std::vector<float> out(4);
  auto ints = make_tensor<int32_t>(DType::I32, {2}, {1, 2});
  expect_error([&] { convert_to_f32(ints.view, out, "layers.0.ffn.gate.tid2eid"); }, {"tid2eid", "I32"});
  auto big = make_tensor<float>(DType::F32, {5}, std::vector<float>(5));
  expect_error([&] { convert_to_f32(big.view, out, "norm.weight"); }, {"norm.weight", "4", "5"});
  auto short_bytes = make_tensor<uint16_t>(DType::BF16, {3}, {1, 2});
  expect_error([&] { convert_to_f32(short_bytes.view, out, "embed"); }, {"embed", "6 bytes", "4"});
}

}  // namespace
}  // namespace deepinfer
