#include "core/dtype.h"

#include <gtest/gtest.h>

namespace deepinfer {
namespace {

TEST(DType, NamesRoundTrip) {
  for (auto dtype : {DType::F64, DType::F32, DType::F16, DType::BF16, DType::F8_E4M3, DType::F8_E5M2,
                     DType::F8_E8M0, DType::I64, DType::I32, DType::I16, DType::I8, DType::U8, DType::BOOL}) {
    auto parsed = dtype_from_name(dtype_name(dtype));
    ASSERT_TRUE(parsed.has_value()) << dtype_name(dtype);
    EXPECT_EQ(*parsed, dtype);
  }
}

TEST(DType, Sizes) {
  EXPECT_EQ(dtype_size(DType::F32), 4u);
  EXPECT_EQ(dtype_size(DType::BF16), 2u);
  EXPECT_EQ(dtype_size(DType::F8_E4M3), 1u);
  EXPECT_EQ(dtype_size(DType::I64), 8u);
}

TEST(DType, UnknownNameIsRejected) {
  EXPECT_FALSE(dtype_from_name("F4").has_value());
  EXPECT_FALSE(dtype_from_name("f32").has_value());
  EXPECT_FALSE(dtype_from_name("").has_value());
}

}  // namespace
}  // namespace deepinfer
