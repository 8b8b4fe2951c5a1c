#include "cli/bench_arrivals.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/error.h"

namespace deepinfer::cli::bench {
namespace {

TEST(PoissonArrivals, SeededAndNonDecreasingFromZero) {
  const auto a = poisson_arrival_offsets(500, 4.0, 42);
  EXPECT_EQ(a, poisson_arrival_offsets(500, 4.0, 42));
  EXPECT_NE(a, poisson_arrival_offsets(500, 4.0, 43));
  ASSERT_EQ(a.size(), 500u);
  EXPECT_EQ(a[0], 0.0);
  for (std::size_t i = 1; i < a.size(); ++i) EXPECT_GE(a[i], a[i - 1]);
}

TEST(PoissonArrivals, GapsAreExponentialWithTheRequestedMean) {
  const double rate = 8.0;
  const std::size_t count = 20001;
  const auto offsets = poisson_arrival_offsets(count, rate, 7);
  std::vector<double> gaps;
  for (std::size_t i = 1; i < count; ++i) gaps.push_back(offsets[i] - offsets[i - 1]);
  double mean = 0;
  for (double g : gaps) mean += g;
  mean /= static_cast<double>(gaps.size());
  double variance = 0;
  for (double g : gaps) variance += (g - mean) * (g - mean);
  variance /= static_cast<double>(gaps.size() - 1);
  // The standard error of the mean is 1/sqrt(20000) = 0.7% of it: 3% is over 4 standard errors.
  EXPECT_NEAR(mean, 1.0 / rate, 0.03 / rate);
  // An exponential's standard deviation equals its mean (a uniform or fixed gap would fail this).
  EXPECT_NEAR(std::sqrt(variance) / mean, 1.0, 0.05);
  // And P(gap > mean) = e^-1.
  std::size_t above = 0;
  for (double g : gaps) above += g > 1.0 / rate;
  EXPECT_NEAR(static_cast<double>(above) / static_cast<double>(gaps.size()), std::exp(-1.0), 0.015);
}

TEST(PoissonArrivals, InfiniteRateSendsAllAtOnce) {
  const auto offsets = poisson_arrival_offsets(5, std::numeric_limits<double>::infinity(), 1);
  EXPECT_EQ(offsets, std::vector<double>(5, 0.0));
}

TEST(PoissonArrivals, RefusesRatesThatAreNotPositive) {
  EXPECT_THROW(poisson_arrival_offsets(3, 0.0, 1), Error);
  EXPECT_THROW(poisson_arrival_offsets(3, -1.0, 1), Error);
  EXPECT_THROW(poisson_arrival_offsets(3, std::nan(""), 1), Error);
}

}  // namespace
}  // namespace deepinfer::cli::bench
