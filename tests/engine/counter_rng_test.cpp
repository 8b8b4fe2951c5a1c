#include "engine/counter_rng.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.h"

namespace deepinfer::engine {
namespace {

// Random123's kat_vectors, the three philox4x32 10 lines: counter, key, expected output.
TEST(Philox4x32_10, MatchesRandom123KnownAnswers) {
  EXPECT_EQ(philox4x32_10({0, 0, 0, 0}, {0, 0}),
            (PhiloxCounter{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox4x32_10({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
            (PhiloxCounter{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (PhiloxCounter{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

// The documented layout: key = seed (low word first), counter = (draw, position, request low, high).
// Changing it would silently change every seeded request's output.
TEST(CounterRng, PacksSeedRequestPositionAndDrawAsDocumented) {
  const uint64_t seed = 0x0123456789abcdefull, request = 0xfedcba9876543210ull;
  const CounterRng rng(seed, request, 0x11223344);
  EXPECT_EQ(rng.block(5), philox4x32_10({5, 0x11223344, 0x76543210, 0xfedcba98}, {0x89abcdef, 0x01234567}));
}

TEST(CounterRng, EveryKeyComponentChangesTheDraw) {
  const double base = CounterRng(1, 2, 3).uniform(0);
  EXPECT_NE(CounterRng(9, 2, 3).uniform(0), base);
  EXPECT_NE(CounterRng(1, 9, 3).uniform(0), base);
  EXPECT_NE(CounterRng(1, 2, 9).uniform(0), base);
  EXPECT_NE(CounterRng(1, 2, 3).uniform(1), base);
  EXPECT_NE(CounterRng(1ull << 40, 2, 3).uniform(0), CounterRng(0, 2, 3).uniform(0));  // seed high word
  EXPECT_NE(CounterRng(1, 2ull << 40, 3).uniform(0), CounterRng(1, 0, 3).uniform(0));  // request high word
  EXPECT_EQ(CounterRng(1, 2, 3).uniform(0), base);
}

TEST(CounterRng, UniformIsInUnitIntervalWithTheRightMeanAndNoCrossStreamCorrelation) {
  constexpr int kDraws = 20000;
  double sum = 0, sum_a2 = 0, sum_b2 = 0, sum_ab = 0;
  for (int position = 0; position < kDraws; ++position) {
    const double a = CounterRng(7, 0, position).uniform(0), b = CounterRng(7, 1, position).uniform(0);
    ASSERT_GE(a, 0.0);
    ASSERT_LT(a, 1.0);
    sum += a;
    sum_a2 += (a - 0.5) * (a - 0.5);
    sum_b2 += (b - 0.5) * (b - 0.5);
    sum_ab += (a - 0.5) * (b - 0.5);
  }
  EXPECT_NEAR(sum / kDraws, 0.5, 0.01);             // sd of the mean: 0.002
  EXPECT_NEAR(sum_a2 / kDraws, 1.0 / 12.0, 0.003);  // variance of U(0,1)
  EXPECT_LT(std::abs(sum_ab / std::sqrt(sum_a2 * sum_b2)), 0.03);  // sd of r: 0.007
}

TEST(CounterRng, RejectsPositionsThatDoNotFitTheCounterWord) {
  EXPECT_THROW(CounterRng(0, 0, -1), Error);
  EXPECT_THROW(CounterRng(0, 0, int64_t{1} << 32), Error);
  EXPECT_NO_THROW(CounterRng(0, 0, (int64_t{1} << 32) - 1));
}

TEST(DrawEngineSeed, DrawsDifferentSeeds) {
  std::vector<uint64_t> seeds;
  for (int i = 0; i < 4; ++i) seeds.push_back(draw_engine_seed());
  EXPECT_FALSE(seeds[0] == seeds[1] && seeds[1] == seeds[2] && seeds[2] == seeds[3]);
}

}  // namespace
}  // namespace deepinfer::engine
