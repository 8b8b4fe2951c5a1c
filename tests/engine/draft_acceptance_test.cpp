// Verification of draft tokens (engine/draft_acceptance.h): greedy acceptance keeps exactly the
// target's greedy tokens; sampled acceptance gives tokens distributed as the target's, checked by
// a chi-square test over many seeded rounds that two lossy acceptors fail.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <vector>

#include "core/error.h"
#include "engine/counter_rng.h"
#include "engine/draft_acceptance.h"
#include "engine/sampling_math.h"

namespace deepinfer::engine {
namespace {

using Rows = std::vector<std::vector<float>>;

std::vector<std::span<const float>> spans(const Rows& rows) {
  return {rows.begin(), rows.end()};
}

TEST(AcceptGreedy, KeepsDraftsWhileTheyAreTheTargetsArgmax) {
  const Rows target = {{0, 3, 1}, {5, 1, 1}, {0, 0, 2}, {1, 4, 0}};
  // Row 0's argmax is 1, row 1's 0, row 2's 2: the third draft (0) is not row 2's argmax.
  DraftVerdict v = accept_greedy(spans(target), std::vector<int32_t>{1, 0, 0}, {});
  EXPECT_EQ(v.accepted, 2);
  EXPECT_EQ(v.bonus, 2);
  v = accept_greedy(spans(target), std::vector<int32_t>{1, 0, 2}, {});
  EXPECT_EQ(v.accepted, 3);
  EXPECT_EQ(v.bonus, 1);  // after the last draft, row 3's argmax
  v = accept_greedy(spans(target), std::vector<int32_t>{2, 0, 2}, {});
  EXPECT_EQ(v.accepted, 0);
  EXPECT_EQ(v.bonus, 1);  // the target's own choice at the first position
}

TEST(AcceptGreedy, TiesGoToTheLowestIdAndAStopTokenEndsTheVerdict) {
  const Rows tied = {{2, 2, 1}, {0, 1, 1}};
  EXPECT_EQ(accept_greedy(spans(tied), std::vector<int32_t>{1}, {}).accepted, 0);
  DraftVerdict v = accept_greedy(spans(tied), std::vector<int32_t>{0}, {});
  EXPECT_EQ(v.accepted, 1);
  EXPECT_EQ(v.bonus, 1);
  v = accept_greedy(spans(tied), std::vector<int32_t>{0}, std::vector<int32_t>{0});
  EXPECT_EQ(v.accepted, 1);
  EXPECT_EQ(v.bonus, -1);  // nothing follows a stop token
}

TEST(AcceptGreedy, RefusesRowsThatDoNotFitTheDrafts) {
  const Rows target = {{1, 2}, {2, 1}};
  EXPECT_THROW(accept_greedy(spans(target), std::vector<int32_t>{0, 1}, {}), Error);  // 2 rows, 2 drafts
  EXPECT_THROW(accept_greedy(spans(target), std::vector<int32_t>{2}, {}), Error);     // outside the vocabulary
  const Rows ragged = {{1, 2}, {1}};
  EXPECT_THROW(accept_greedy(spans(ragged), std::vector<int32_t>{0}, {}), Error);
}

// ---- sampled acceptance: the target's distribution, exactly -----------------------------------

constexpr int kVocab = 4;
constexpr int kDrafts = 3;
using Table = std::array<std::array<float, kVocab>, kVocab>;  // [previous token][next token]

// An order-1 target and a drafter that differs from it, zeros included where the other is not:
// the residual max(0, p - q) carries the target's mass the drafter misses.
const Table kTarget = {{{0.10f, 0.40f, 0.30f, 0.20f},
                        {0.50f, 0.00f, 0.25f, 0.25f},
                        {0.05f, 0.15f, 0.60f, 0.20f},
                        {0.30f, 0.30f, 0.00f, 0.40f}}};
const Table kDraft = {{{0.40f, 0.40f, 0.00f, 0.20f},
                       {0.20f, 0.30f, 0.25f, 0.25f},
                       {0.25f, 0.25f, 0.25f, 0.25f},
                       {0.00f, 0.70f, 0.10f, 0.20f}}};

using Acceptor = std::function<DraftVerdict(std::span<const std::span<const float>>,
                                            std::span<const std::span<const float>>, std::span<const int32_t>,
                                            const VerifyStream&)>;

// The joint distribution of the first two tokens a speculative round commits from anchor 0 (a
// round that commits one token is followed by a plain draw from the target), over `rounds` seeds,
// against the target's, as Pearson's chi-square (15 degrees of freedom).
double chi_square_of_first_two_tokens(const Acceptor& accept, int rounds) {
  std::map<std::pair<int, int>, int> counts;
  for (int round = 0; round < rounds; ++round) {
    const VerifyStream stream{static_cast<uint64_t>(round) + 1, 0, 1};
    std::vector<int32_t> drafts;
    Rows draft_rows, target_rows;
    int previous = 0;
    target_rows.emplace_back(kTarget[0].begin(), kTarget[0].end());
    for (int i = 0; i < kDrafts; ++i) {
      draft_rows.emplace_back(kDraft[static_cast<std::size_t>(previous)].begin(), kDraft[static_cast<std::size_t>(previous)].end());
      const double u = CounterRng(stream.seed, stream.request_id, stream.first_position + i).uniform(kDraftDraw);
      previous = invert_cdf(draft_rows.back(), u);
      drafts.push_back(previous);
      target_rows.emplace_back(kTarget[static_cast<std::size_t>(previous)].begin(), kTarget[static_cast<std::size_t>(previous)].end());
    }
    const DraftVerdict v = accept(spans(target_rows), spans(draft_rows), drafts, stream);
    std::vector<int> committed(drafts.begin(), drafts.begin() + v.accepted);
    committed.push_back(v.bonus);
    if (committed.size() < 2) {
      const double u = CounterRng(stream.seed, stream.request_id, stream.first_position + 1).uniform(7);
      committed.push_back(invert_cdf(kTarget[static_cast<std::size_t>(committed[0])], u));
    }
    ++counts[{committed[0], committed[1]}];
  }
  double chi = 0.0;
  for (int a = 0; a < kVocab; ++a)
    for (int b = 0; b < kVocab; ++b) {
      const double expected = rounds * static_cast<double>(kTarget[0][static_cast<std::size_t>(a)]) *
                              kTarget[static_cast<std::size_t>(a)][static_cast<std::size_t>(b)];
      const double seen = counts[{a, b}];
      if (expected == 0.0) {
        if (seen > 0) return INFINITY;  // a pair the target never produces
        continue;
      }
      chi += (seen - expected) * (seen - expected) / expected;
    }
  return chi;
}

// Chi-square above this for 15 degrees of freedom has probability about 1e-5 under the target's
// distribution; the seeds are fixed, so the test's outcome is too.
constexpr double kChiSquareBound = 44.0;
constexpr int kRounds = 100000;

TEST(AcceptSampled, CommittedTokensFollowTheTargetDistribution) {
  const Acceptor exact = [](auto target, auto draft, auto drafts, const VerifyStream& stream) {
    return accept_sampled(target, draft, drafts, {}, stream);
  };
  const double chi = chi_square_of_first_two_tokens(exact, kRounds);
  std::printf("chi-square over %d rounds: %.2f (bound %.0f)\n", kRounds, chi, kChiSquareBound);
  EXPECT_LT(chi, kChiSquareBound);
}

// The same harness fails acceptors that are not lossless: one that replaces a rejected draft by a
// draw from the target (not the residual), and one that keeps a draft with probability p (not
// p / q).
TEST(AcceptSampled, TheDistributionTestFailsLossyAcceptors) {
  const Acceptor target_instead_of_residual = [](auto target, auto draft, auto drafts, const VerifyStream& stream) {
    DraftVerdict v;
    for (std::size_t i = 0; i < drafts.size(); ++i) {
      const CounterRng rng(stream.seed, stream.request_id, stream.first_position + static_cast<int64_t>(i));
      if (rng.uniform(kAcceptDraw) * draft[i][static_cast<std::size_t>(drafts[i])] <
          target[i][static_cast<std::size_t>(drafts[i])]) {
        ++v.accepted;
        continue;
      }
      v.bonus = invert_cdf(target[i], rng.uniform(kTokenDraw));
      return v;
    }
    v.bonus = invert_cdf(target[drafts.size()],
                         CounterRng(stream.seed, stream.request_id, stream.first_position + kDrafts).uniform(kTokenDraw));
    return v;
  };
  const double residual_chi = chi_square_of_first_two_tokens(target_instead_of_residual, kRounds);
  std::printf("bonus from the target, not the residual: chi-square %.1f\n", residual_chi);
  EXPECT_GT(residual_chi, 10 * kChiSquareBound);

  const Acceptor ratio_ignored = [](auto target, auto draft, auto drafts, const VerifyStream& stream) {
    // Keep a draft with probability p(x): scale the draft row to 1 at x, so accept_sampled's
    // test u * q(x) < p(x) becomes u < p(x).
    Rows scaled;
    for (std::size_t i = 0; i < draft.size(); ++i) {
      scaled.emplace_back(draft[i].begin(), draft[i].end());
      scaled.back()[static_cast<std::size_t>(drafts[i])] = 1.0f;
    }
    return accept_sampled(target, spans(scaled), drafts, {}, stream);
  };
  const double ratio_chi = chi_square_of_first_two_tokens(ratio_ignored, kRounds);
  std::printf("kept with probability p, not p / q: chi-square %.1f\n", ratio_chi);
  EXPECT_GT(ratio_chi, 10 * kChiSquareBound);
}

TEST(AcceptSampled, SeededVerdictsRepeatAndStopTokensEndThem) {
  const Rows target = {{0.5f, 0.5f}, {0.5f, 0.5f}, {0.5f, 0.5f}};
  const Rows draft = {{0.9f, 0.1f}, {0.9f, 0.1f}};
  const std::vector<int32_t> drafts = {0, 0};
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    const VerifyStream stream{seed, 3, 40};
    const DraftVerdict a = accept_sampled(spans(target), spans(draft), drafts, {}, stream);
    const DraftVerdict b = accept_sampled(spans(target), spans(draft), drafts, {}, stream);
    EXPECT_EQ(a.accepted, b.accepted);
    EXPECT_EQ(a.bonus, b.bonus);
    const DraftVerdict stopped = accept_sampled(spans(target), spans(draft), drafts, std::vector<int32_t>{0}, stream);
    if (a.accepted > 0) {
      EXPECT_EQ(stopped.accepted, 1);
      EXPECT_EQ(stopped.bonus, -1);
    } else {
      EXPECT_EQ(stopped.accepted, 0);
      EXPECT_EQ(stopped.bonus, a.bonus);
    }
  }
  // A target that gives the draft all its mass: every draft kept.
  const Rows sure = {{1, 0}, {1, 0}, {0, 1}};
  const DraftVerdict v = accept_sampled(spans(sure), spans(draft), drafts, {}, VerifyStream{9, 0, 5});
  EXPECT_EQ(v.accepted, 2);
  EXPECT_EQ(v.bonus, 1);
}

TEST(AcceptSampled, RefusesADraftItsDistributionCouldNotHaveDrawn) {
  const Rows target = {{0.5f, 0.5f}, {0.5f, 0.5f}};
  const Rows draft = {{1.0f, 0.0f}};
  EXPECT_THROW(accept_sampled(spans(target), spans(draft), std::vector<int32_t>{1}, {}, VerifyStream{}), Error);
  EXPECT_THROW(accept_sampled(spans(target), spans(Rows{}), std::vector<int32_t>{0}, {}, VerifyStream{}), Error);
}

}  // namespace
}  // namespace deepinfer::engine
