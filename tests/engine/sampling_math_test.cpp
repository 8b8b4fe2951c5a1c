#include "engine/sampling_math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace deepinfer::engine {
namespace {

TEST(SamplingMath, ExpMatchesStdExpOnNonPositiveArguments) {
  std::vector<float> arguments;
  for (float x = 0.0f; x > -87.0f; x -= 0.0137f) arguments.push_back(x);
  std::vector<float> values = arguments;
  exp_of_shifted_in_place(values, 0.0f, 1.0f);
  for (size_t i = 0; i < values.size(); ++i) {
    const double expected = std::exp(static_cast<double>(arguments[i]));
    ASSERT_NEAR(values[i] / expected, 1.0, 3e-7) << "exp(" << arguments[i] << ")";
  }
}

TEST(SamplingMath, ExpIsExactlyOneAtZeroAndZeroFarBelow) {
  std::vector<float> values = {3.0f, 3.0f - 88.0f, -INFINITY, 3.0f - 1e30f, -1.0f};
  exp_of_shifted_in_place(values, 3.0f, 2.0f);  // exp((v - 3) / 2)
  EXPECT_EQ(values[0], 1.0f);
  EXPECT_NEAR(values[1], std::exp(-44.0), 1e-25);
  EXPECT_EQ(values[2], 0.0f);
  EXPECT_EQ(values[3], 0.0f);
  EXPECT_NEAR(values[4], std::exp(-2.0), 1e-7);
}

TEST(SamplingMath, MaxArgmaxAndSumOverAllLanes) {
  std::vector<float> values(37);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 10) - 20.0f;
  values[35] = 4.0f;  // in the tail after the last full block of 8
  EXPECT_EQ(max_of(values), 4.0f);
  EXPECT_EQ(argmax_lowest_index(values), 35);
  values[12] = 4.0f;
  EXPECT_EQ(argmax_lowest_index(values), 12);
  double expected = 0;
  for (float v : values) expected += v;
  EXPECT_DOUBLE_EQ(sum_of(values), expected);
}

TEST(SamplingMath, InverseCdfPicksTheTokenWhoseIntervalHoldsTheUniform) {
  // Masses 0.1, 0, 0.2, 0.3, 0, 0.4 (total 1): intervals [0,.1) [.1,.3) [.3,.6) [.6,1).
  std::vector<float> weights(20, 0.0f);
  weights[0] = 0.1f, weights[2] = 0.2f, weights[9] = 0.3f, weights[17] = 0.4f;  // spans 3 blocks
  EXPECT_EQ(invert_cdf(weights, 0.0), 0);
  EXPECT_EQ(invert_cdf(weights, 0.05), 0);
  EXPECT_EQ(invert_cdf(weights, 0.15), 2);
  EXPECT_EQ(invert_cdf(weights, 0.45), 9);
  EXPECT_EQ(invert_cdf(weights, 0.65), 17);
  EXPECT_EQ(invert_cdf(weights, 0.9999999), 17);
}

}  // namespace
}  // namespace deepinfer::engine
