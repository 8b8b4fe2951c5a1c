#pragma once
// Scalar conversions between the checkpoint number formats and float. These sit on the
// dequantization hot path, so they are inline and table-driven where a table is fastest.
//
// Formats (OCP / IEEE conventions):
//   bf16      1.8.7,  the top half of an IEEE binary32
//   f16       1.5.10, IEEE binary16 (subnormals, inf, NaN)
//   e4m3fn    1.4.3, bias 7, no infinities, S.1111.111 = NaN, max 448, subnormals (OCP "fn")
//   e5m2      1.5.2, bias 15, the top byte of an f16 (inf and NaN as in IEEE)
//   e8m0      8-bit exponent only: 2^(b-127), b = 255 = NaN (MX scale format)
//   e2m1      4-bit float (MX FP4): 1.2.1, bias 1, no inf/NaN; the low 4 bits of a byte
#include <array>
#include <bit>
#include <cstdint>
#include <limits>

namespace deepinfer {

constexpr float bf16_to_float(uint16_t bits) { return std::bit_cast<float>(uint32_t{bits} << 16); }

constexpr float f16_to_float(uint16_t bits) {
  const uint32_t sign = uint32_t{bits & 0x8000u} << 16;
  const uint32_t exponent = (bits >> 10) & 0x1Fu;
  const uint32_t mantissa = bits & 0x3FFu;
  if (exponent == 0x1F)  // inf (mantissa 0) or NaN (payload kept)
    return std::bit_cast<float>(sign | 0x7F800000u | (mantissa << 13));
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24, exact in binary32
    const float magnitude = static_cast<float>(mantissa) * (1.0f / 16777216.0f);
    return sign ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(sign | ((exponent - 15 + 127) << 23) | (mantissa << 13));
}

namespace float_formats_detail {

constexpr float e4m3fn_value(uint8_t byte) {
  const bool negative = (byte & 0x80u) != 0;
  const uint32_t exponent = (byte >> 3) & 0xFu;
  const uint32_t mantissa = byte & 0x7u;
  if (exponent == 0xF && mantissa == 0x7) return std::numeric_limits<float>::quiet_NaN();
  float magnitude = 0.0f;
  if (exponent == 0) {  // subnormal: mantissa/8 * 2^-6 = mantissa * 2^-9
    magnitude = static_cast<float>(mantissa) * (1.0f / 512.0f);
  } else {
    magnitude = std::bit_cast<float>(((exponent - 7 + 127) << 23) | (mantissa << 20));
  }
  return negative ? -magnitude : magnitude;
}

constexpr std::array<float, 256> make_e4m3fn_table() {
  std::array<float, 256> table{};
  for (unsigned byte = 0; byte < 256; ++byte) table[byte] = e4m3fn_value(static_cast<uint8_t>(byte));
  return table;
}

inline constexpr std::array<float, 256> kE4m3fnTable = make_e4m3fn_table();

inline constexpr std::array<float, 16> kE2m1Table = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                                     -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

}  // namespace float_formats_detail

constexpr float e4m3fn_to_float(uint8_t byte) { return float_formats_detail::kE4m3fnTable[byte]; }

constexpr float e5m2_to_float(uint8_t byte) { return f16_to_float(static_cast<uint16_t>(uint16_t{byte} << 8)); }

constexpr float e8m0_to_float(uint8_t byte) {
  if (byte == 255) return std::numeric_limits<float>::quiet_NaN();
  // 2^-127 is below the smallest normal float (2^-126): it is the subnormal with mantissa bit 22.
  if (byte == 0) return std::bit_cast<float>(uint32_t{1} << 22);
  return std::bit_cast<float>(uint32_t{byte} << 23);
}

// Only the low nibble of `nibble` is read.
constexpr float e2m1_to_float(uint8_t nibble) { return float_formats_detail::kE2m1Table[nibble & 0xFu]; }

// Round to nearest, ties to even. NaN stays NaN (quieted, sign kept); overflow rounds to inf.
constexpr uint16_t float_to_bf16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  const uint32_t lsb_of_result = (bits >> 16) & 1u;
  return static_cast<uint16_t>((bits + 0x7FFFu + lsb_of_result) >> 16);
}

}  // namespace deepinfer
