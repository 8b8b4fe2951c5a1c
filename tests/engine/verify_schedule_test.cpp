// Confidence-scheduled verification (engine/verify_schedule.h): the budget is the global argmax of
// expected tokens times step rate, and the allocation admits the budget's best survivals, each
// request's a prefix, never on the strength of a position's own token.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <random>
#include <vector>

#include "core/error.h"
#include "engine/verify_schedule.h"

namespace deepinfer::engine {
namespace {

using Lagged = std::vector<std::optional<std::vector<float>>>;

TEST(StepRateTable, IsAStepFunctionOverItsProbes) {
  const StepRateTable table({1, 4, 16}, {100, 80, 50});
  EXPECT_EQ(table.steps_per_second(0), 100);  // below the first probe: the first
  EXPECT_EQ(table.steps_per_second(1), 100);
  EXPECT_EQ(table.steps_per_second(3), 100);
  EXPECT_EQ(table.steps_per_second(4), 80);
  EXPECT_EQ(table.steps_per_second(15), 80);
  EXPECT_EQ(table.steps_per_second(1000), 50);
  EXPECT_THROW(StepRateTable({4, 4}, {1, 1}), Error);
  EXPECT_THROW(StepRateTable({1, 2}, {1, 0}), Error);
  EXPECT_THROW(StepRateTable({1}, {1, 2}), Error);
}

TEST(StepRateTable, AddsTheDraftersTimeBySequences) {
  const StepRateTable table({1, 4}, {100, 50}, {1, 2}, {0.01, 0.02});
  EXPECT_EQ(table.draft_seconds(1), 0.01);
  EXPECT_EQ(table.draft_seconds(3), 0.02);
  EXPECT_DOUBLE_EQ(table.speculative_steps_per_second(1, 1), 1.0 / (0.01 + 0.01));
  EXPECT_DOUBLE_EQ(table.speculative_steps_per_second(6, 2), 1.0 / (0.02 + 0.02));
  EXPECT_EQ(StepRateTable({1}, {100}).draft_seconds(5), 0.0);
  EXPECT_THROW(StepRateTable({1}, {100}, {1, 1}, {0.1, 0.1}), Error);
  EXPECT_THROW(StepRateTable({1}, {100}, {1}, {-0.1}), Error);
  EXPECT_THROW(StepRateTable({1}, {100}, {1, 2}, {0.1}), Error);
}

TEST(VerifyBudget, WithoutATableEveryDraftIsVerified) {
  const Lagged lagged = {std::vector<float>{0.9f, 0.5f, 0.0f}, std::nullopt};
  // 0.9 and 0.45 of the first row (0 is below the floor), and the new request's 3 at 1.0.
  EXPECT_EQ(verify_budget(lagged, 3, StepRateTable()), 5);
}

TEST(VerifyBudget, IsTheGlobalArgmaxNotTheFirstLocalOne) {
  const Lagged lagged = {std::vector<float>{0.9f, 0.9f, 0.9f}, std::vector<float>{0.5f, 0.5f, 0.5f}};
  // Survivals, best first: 0.9 0.81 0.729 0.5 0.25 0.125. Steps at 3-4 tokens run at 100 a
  // second, a 5-token step at 60 (a graph tier boundary), 6 and up at 100 again.
  const StepRateTable dip({1, 5, 6}, {100, 60, 100});
  // n = 2: 3.71 * 100 = 371; n = 3: 4.439 * 60 = 266 (an early stop would end here);
  // n = 4: 4.939 * 100 = 494; n = 5: 5.189 * 100; n = 6: 5.314 * 100 = 531, the maximum.
  EXPECT_EQ(verify_budget(lagged, 3, dip), 6);
  // Past 4 tokens a step costs twice as much: n = 2 is best.
  const StepRateTable steep({1, 5}, {100, 50});
  EXPECT_EQ(verify_budget(lagged, 3, steep), 2);
  // A flat table: every draft adds expected tokens at no cost.
  EXPECT_EQ(verify_budget(lagged, 3, StepRateTable({1}, {100})), 6);
}

// The drafter's time is the same whatever a step verifies, so it makes each verified row a smaller
// share of the step: the steep table that stops at n = 2 alone verifies everything with it.
TEST(VerifyBudget, TheDraftersTimeMakesAVerifiedRowCheaper) {
  const Lagged lagged = {std::vector<float>{0.9f, 0.9f, 0.9f}, std::vector<float>{0.5f, 0.5f, 0.5f}};
  EXPECT_EQ(verify_budget(lagged, 3, StepRateTable({1, 5}, {100, 50})), 2);
  // Steps of 2 sequences cost 0.01 + 0.02 s up to 4 tokens, 0.02 + 0.02 s from 5: n = 2 gives
  // 3.71 / 0.03 = 123.7, n = 6 gives 5.314 / 0.04 = 132.9, the maximum.
  EXPECT_EQ(verify_budget(lagged, 3, StepRateTable({1, 5}, {100, 50}, {1}, {0.02})), 6);
}

TEST(VerifyBudget, TheFirstMaximumWinsATie) {
  // One request, one draft of survival 1: 1 * rate(1) = 2 * rate(2) when rate halves.
  const Lagged lagged = {std::vector<float>{1.0f}};
  EXPECT_EQ(verify_budget(lagged, 1, StepRateTable({1, 2}, {100, 50})), 0);
}

TEST(AllocateVerifyLengths, TakesTheBestSurvivalsTiesToLowerPositionsThenRequests) {
  const std::vector<std::vector<float>> c = {{0.9f, 0.5f, 0.5f}, {0.9f, 1.0f, 0.2f}, {0.1f, 1.0f, 1.0f}};
  // Survivals: r0 0.9 0.45 0.225; r1 0.9 0.9 0.18; r2 0.1 0.1 0.1.
  EXPECT_EQ(allocate_verify_lengths(c, 3, 0), (std::vector<int32_t>{1, 1, 1}));
  EXPECT_EQ(allocate_verify_lengths(c, 3, 1), (std::vector<int32_t>{2, 1, 1}));  // r0 and r1 tie at 0.9: r0
  EXPECT_EQ(allocate_verify_lengths(c, 3, 2), (std::vector<int32_t>{2, 2, 1}));
  EXPECT_EQ(allocate_verify_lengths(c, 3, 3), (std::vector<int32_t>{2, 3, 1}));  // r1's 0.9 at position 1
  EXPECT_EQ(allocate_verify_lengths(c, 3, 5), (std::vector<int32_t>{4, 3, 1}));  // r0 0.45 and 0.225 before r1 0.18
  EXPECT_EQ(allocate_verify_lengths(c, 3, 6), (std::vector<int32_t>{4, 4, 1}));
  // r2's three 0.1s tie: lower positions first.
  EXPECT_EQ(allocate_verify_lengths(c, 3, 7), (std::vector<int32_t>{4, 4, 2}));
  EXPECT_EQ(allocate_verify_lengths(c, 3, 100), (std::vector<int32_t>{4, 4, 4}));
  // A survival under the floor is never verified, nor is anything after it.
  const std::vector<std::vector<float>> dead = {{0.5f, 0.0f, 1.0f}};
  EXPECT_EQ(allocate_verify_lengths(dead, 3, 100), (std::vector<int32_t>{2}));
}

TEST(AllocateVerifyLengths, RefusesMalformedConfidences) {
  EXPECT_THROW(allocate_verify_lengths(std::vector<std::vector<float>>{{0.5f}}, 2, 1), Error);
  EXPECT_THROW(allocate_verify_lengths(std::vector<std::vector<float>>{{1.5f}}, 1, 1), Error);
  EXPECT_THROW(allocate_verify_lengths(std::vector<std::vector<float>>{{NAN}}, 1, 1), Error);
  EXPECT_THROW(allocate_verify_lengths(std::vector<std::vector<float>>{{0.5f}}, 1, -1), Error);
  EXPECT_THROW(verify_budget(Lagged{std::vector<float>{0.5f, -0.1f}}, 2, StepRateTable()), Error);
}

// Losslessness needs a position's admission to be independent of its own token, and the drafter's
// confidence for position k + 1 is computed from token k: so whether position k is admitted must
// not change when any later confidence of its request does. Also every request's admitted
// positions are a prefix (the verify length counts them from the first).
TEST(AllocateVerifyLengths, APositionsAdmissionIgnoresItsRequestsLaterConfidences) {
  std::mt19937 random(7);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  constexpr int kRequests = 5, kDraft = 5;
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<std::vector<float>> c(kRequests, std::vector<float>(kDraft));
    for (auto& row : c)
      for (float& v : row) v = trial % 3 == 0 ? std::round(unit(random) * 4) / 4 : unit(random);  // ties too
    const int64_t budget = static_cast<int64_t>(random() % (kRequests * kDraft + 2));
    const std::vector<int32_t> lengths = allocate_verify_lengths(c, kDraft, budget);
    for (int r = 0; r < kRequests; ++r)
      for (int k = 0; k < kDraft; ++k) {
        const bool admitted = lengths[static_cast<std::size_t>(r)] > k + 1;
        std::vector<std::vector<float>> changed = c;
        for (int j = k + 1; j < kDraft; ++j) changed[static_cast<std::size_t>(r)][static_cast<std::size_t>(j)] = unit(random);
        const bool still = allocate_verify_lengths(changed, kDraft, budget)[static_cast<std::size_t>(r)] > k + 1;
        ASSERT_EQ(admitted, still) << "trial " << trial << " request " << r << " position " << k;
      }
  }
}

}  // namespace
}  // namespace deepinfer::engine
