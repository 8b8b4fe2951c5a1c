#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <thread>
#include <vector>

#include "core/error.h"

namespace deepinfer::engine {
namespace {

// Probabilities 0.05, 0.40, 0.10, 0.30, 0.15 over ids 0..4: ranked 1, 3, 4, 2, 0.
const std::vector<double> kProbs = {0.05, 0.40, 0.10, 0.30, 0.15};

std::vector<float> log_of(const std::vector<double>& probs, double shift = 1.5) {
  std::vector<float> logits;
  for (double p : probs) logits.push_back(static_cast<float>(std::log(p) + shift));
  return logits;
}

SamplingParams random_params() {
  SamplingParams params;
  params.temperature = 1.0f;
  return params;
}

std::vector<int> counts_over_positions(const std::vector<float>& logits, const SamplingParams& params,
                                       int draws, uint64_t seed = 1234, uint64_t request = 0) {
  const TokenHistory history;
  std::vector<int> counts(logits.size(), 0);
  for (int position = 0; position < draws; ++position)
    ++counts[static_cast<size_t>(sample(logits, params, history, seed, request, position).token)];
  return counts;
}

// Pearson chi-square of observed counts against expected probabilities (zero-probability
// tokens must not occur at all).
double chi_square(const std::vector<int>& counts, const std::vector<double>& probs, int draws) {
  double statistic = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (probs[i] == 0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " has probability 0";
      continue;
    }
    const double expected = probs[i] * draws;
    statistic += (counts[i] - expected) * (counts[i] - expected) / expected;
  }
  return statistic;
}

std::vector<double> normalized(std::vector<double> weights) {
  double total = 0;
  for (double w : weights) total += w;
  for (double& w : weights) w /= total;
  return weights;
}

std::set<int32_t> support(const std::vector<int>& counts) {
  std::set<int32_t> tokens;
  for (size_t i = 0; i < counts.size(); ++i)
    if (counts[i] > 0) tokens.insert(static_cast<int32_t>(i));
  return tokens;
}

TEST(Sampler, GreedyIsArgmaxWithTiesToTheLowestId) {
  SamplingParams params;
  params.temperature = 0;
  const TokenHistory history;
  const std::vector<float> logits = {1.0f, 3.0f, -2.0f, 3.0f, 2.5f};
  EXPECT_EQ(sample(logits, params, history, 0, 0, 0).token, 1);
  const std::vector<float> last_best = {1.0f, 3.0f, -2.0f, 3.0f, 3.5f};
  EXPECT_EQ(sample(last_best, params, history, 0, 0, 0).token, 4);
  const std::vector<float> with_nan = {std::nanf(""), 0.5f, 0.25f};
  EXPECT_EQ(sample(with_nan, params, history, 0, 0, 0).token, 1);
}

TEST(Sampler, TinyTemperatureConvergesToGreedy) {
  SamplingParams params;
  params.temperature = 1e-4f;
  const std::vector<float> logits = {1.0f, 1.01f, 0.99f, -5.0f, 1.005f};
  const TokenHistory history;
  for (int position = 0; position < 500; ++position)
    ASSERT_EQ(sample(logits, params, history, 99, 3, position).token, 1);
  params.temperature = 1e-30f;  // (l - max) / T overflows to -inf for every other token
  EXPECT_EQ(sample(logits, params, history, 99, 3, 0).token, 1);
}

TEST(Sampler, DrawsMatchTheSoftmaxAtTemperatureOne) {
  constexpr int kDraws = 20000;
  const auto counts = counts_over_positions(log_of(kProbs), random_params(), kDraws);
  EXPECT_LT(chi_square(counts, kProbs, kDraws), 18.47);  // 4 degrees of freedom, p = 0.001
}

TEST(Sampler, DrawsMatchTheTemperedSoftmax) {
  constexpr int kDraws = 20000;
  SamplingParams params = random_params();
  params.temperature = 2.0f;
  std::vector<double> tempered;
  for (double p : kProbs) tempered.push_back(std::sqrt(p));  // p^(1/T)
  const auto counts = counts_over_positions(log_of(kProbs), params, kDraws, 77);
  EXPECT_LT(chi_square(counts, normalized(tempered), kDraws), 18.47);
}

TEST(Sampler, TopKKeepsTheKMostLikelyAndRenormalizes) {
  constexpr int kDraws = 20000;
  SamplingParams params = random_params();
  params.top_k = 2;
  const auto counts = counts_over_positions(log_of(kProbs), params, kDraws);
  EXPECT_EQ(support(counts), (std::set<int32_t>{1, 3}));
  EXPECT_LT(chi_square(counts, {0, 0.4 / 0.7, 0, 0.3 / 0.7, 0}, kDraws), 10.83);  // 1 dof, p = 0.001
  params.top_k = 5;
  EXPECT_EQ(support(counts_over_positions(log_of(kProbs), params, 2000)), (std::set<int32_t>{0, 1, 2, 3, 4}));
}

TEST(Sampler, TopKTiesAtTheBoundaryGoToTheLowerId) {
  SamplingParams params = random_params();
  params.top_k = 2;
  const std::vector<float> logits = {0.0f, 1.0f, 0.5f, 0.5f, 0.5f};
  EXPECT_EQ(support(counts_over_positions(logits, params, 2000)), (std::set<int32_t>{1, 2}));
}

TEST(Sampler, TopPKeepsTheSmallestPrefixReachingP) {
  SamplingParams params = random_params();
  const auto support_at = [&](float top_p) {
    params.top_p = top_p;
    return support(counts_over_positions(log_of(kProbs), params, 3000));
  };
  // Ranked masses 0.40, 0.30, 0.15, 0.10, 0.05; a token stays while the mass before it is < p.
  EXPECT_EQ(support_at(0.35f), (std::set<int32_t>{1}));
  EXPECT_EQ(support_at(0.45f), (std::set<int32_t>{1, 3}));
  EXPECT_EQ(support_at(0.75f), (std::set<int32_t>{1, 3, 4}));
  EXPECT_EQ(support_at(0.90f), (std::set<int32_t>{1, 3, 4, 2}));
  EXPECT_EQ(support_at(0.96f), (std::set<int32_t>{0, 1, 2, 3, 4}));
}

TEST(Sampler, TopPAppliesToTheTopKRenormalizedDistribution) {
  SamplingParams params = random_params();
  params.top_k = 3;  // 0.40, 0.30, 0.15 -> 0.47, 0.35, 0.18
  params.top_p = 0.80f;
  EXPECT_EQ(support(counts_over_positions(log_of(kProbs), params, 3000)), (std::set<int32_t>{1, 3}));
  params.top_p = 0.85f;  // without top-k this would keep 3 tokens too, but 0.82 < 0.85 keeps the third
  EXPECT_EQ(support(counts_over_positions(log_of(kProbs), params, 3000)), (std::set<int32_t>{1, 3, 4}));
}

TEST(Sampler, MinPKeepsTokensAtLeastMinPTimesTheBest) {
  SamplingParams params = random_params();
  params.min_p = 0.30f;  // threshold 0.12: keeps 0.40, 0.30, 0.15
  EXPECT_EQ(support(counts_over_positions(log_of(kProbs), params, 3000)), (std::set<int32_t>{1, 3, 4}));
  params.min_p = 0.40f;  // threshold 0.16
  EXPECT_EQ(support(counts_over_positions(log_of(kProbs), params, 3000)), (std::set<int32_t>{1, 3}));
  params.min_p = 1.0f;
  EXPECT_EQ(support(counts_over_positions(log_of(kProbs), params, 500)), (std::set<int32_t>{1}));
}

TEST(Sampler, TruncationOnALargeVocabularyKeepsTheRightTokens) {
  // 5000 ids, a few carrying most of the mass: exercises the chunked nucleus sort past one chunk.
  std::vector<float> logits(5000, 0.0f);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>((i * 7919) % 1000) / 1000.0f;
  SamplingParams params = random_params();
  params.top_p = 0.5f;
  const auto counts = counts_over_positions(logits, params, 2000);
  // The nucleus is the highest-logit ids; every sampled id must rank above every unsampled one.
  float lowest_sampled = INFINITY;
  for (size_t i = 0; i < counts.size(); ++i)
    if (counts[i] > 0) lowest_sampled = std::min(lowest_sampled, logits[i]);
  double mass_above = 0, total = 0;
  for (float logit : logits) {
    total += std::exp(logit);
    if (logit > lowest_sampled) mass_above += std::exp(logit);
  }
  EXPECT_LT(mass_above / total, 0.5);  // the lowest sampled logit is needed to reach 0.5
  EXPECT_GT(support(counts).size(), 800u);
}

TEST(Sampler, PenaltiesFollowTheHandComputedExample) {
  SamplingParams params;
  params.repetition_penalty = 2.0f;
  params.frequency_penalty = 0.5f;
  params.presence_penalty = 0.25f;
  const std::vector<int32_t> prompt = {0, 1, 0};
  TokenHistory history(prompt);
  for (int32_t token : {2, 2, 3, 1}) history.append(token);
  std::vector<float> logits = {1.0f, -1.0f, 2.0f, 0.5f, 3.0f};
  apply_penalties_and_bias(logits, params, history);
  // repetition over {0,1,2,3}: 0.5, -2, 1, 0.25; then -= 0.5*count + 0.25 for generated {2:2, 3:1, 1:1}.
  EXPECT_FLOAT_EQ(logits[0], 0.5f);
  EXPECT_FLOAT_EQ(logits[1], -2.0f - 0.75f);
  EXPECT_FLOAT_EQ(logits[2], 1.0f - 1.25f);
  EXPECT_FLOAT_EQ(logits[3], 0.25f - 0.75f);
  EXPECT_FLOAT_EQ(logits[4], 3.0f);  // never seen
}

TEST(Sampler, PenaltiesChangeTheGreedyChoice) {
  SamplingParams params;
  params.temperature = 0;
  params.presence_penalty = 1.0f;
  TokenHistory history;
  history.append(0);
  const std::vector<float> logits = {2.0f, 1.5f};
  EXPECT_EQ(sample(logits, params, history, 0, 0, 1).token, 1);
  params.presence_penalty = 0.25f;
  EXPECT_EQ(sample(logits, params, history, 0, 0, 1).token, 0);
}

TEST(Sampler, LogitBiasForcesAndForbidsTokens) {
  SamplingParams params = random_params();
  params.logit_bias = {{0, 100.0f}};
  EXPECT_EQ(support(counts_over_positions(log_of(kProbs), params, 2000)), (std::set<int32_t>{0}));
  params.logit_bias = {{1, -100.0f}, {3, -100.0f}};
  EXPECT_EQ(support(counts_over_positions(log_of(kProbs), params, 2000)), (std::set<int32_t>{0, 2, 4}));
  params.temperature = 0;
  params.logit_bias = {{2, 0.5f}};  // 0.10 * e^0.5 = 0.165 < 0.40: greedy unchanged
  EXPECT_EQ(sample(log_of(kProbs), params, TokenHistory{}, 0, 0, 0).token, 1);
  params.logit_bias = {{2, 1.5f}};  // 0.10 * e^1.5 = 0.448 > 0.40
  EXPECT_EQ(sample(log_of(kProbs), params, TokenHistory{}, 0, 0, 0).token, 2);
}

TEST(Sampler, SameKeyGivesTheSameTokenInAnyOrderAndOnAnyThread) {
  const auto logits = log_of(kProbs);
  const SamplingParams params = random_params();
  const TokenHistory history;
  std::vector<int32_t> forward, backward(200), threaded(200);
  for (int position = 0; position < 200; ++position)
    forward.push_back(sample(logits, params, history, 5, 11, position).token);
  for (int position = 199; position >= 0; --position) {
    sample(logits, params, history, 6, 12, position);  // another request in the "batch"
    backward[static_cast<size_t>(position)] = sample(logits, params, history, 5, 11, position).token;
  }
  std::thread worker([&] {
    for (int position = 0; position < 200; ++position)
      threaded[static_cast<size_t>(position)] = sample(logits, params, history, 5, 11, position).token;
  });
  worker.join();
  EXPECT_EQ(forward, backward);
  EXPECT_EQ(forward, threaded);
  EXPECT_GT(std::set<int32_t>(forward.begin(), forward.end()).size(), 3u);
}

TEST(Sampler, DifferentRequestsAndSeedsGiveDifferentStreams) {
  const auto logits = log_of({0.2, 0.2, 0.2, 0.2, 0.2});
  const SamplingParams params = random_params();
  const TokenHistory history;
  int request_differs = 0, seed_differs = 0;
  for (int position = 0; position < 1000; ++position) {
    const int32_t base = sample(logits, params, history, 5, 0, position).token;
    request_differs += base != sample(logits, params, history, 5, 1, position).token;
    seed_differs += base != sample(logits, params, history, 6, 0, position).token;
  }
  // Independent uniform picks differ 80% of the time; identical streams would give 0.
  EXPECT_NEAR(request_differs, 800, 60);
  EXPECT_NEAR(seed_differs, 800, 60);
}

TEST(Sampler, LogprobsAreOfTheRawDistributionWithSortedAlternatives) {
  // Probabilities 0.1, 0.2, 0.3, 0.4 and a tie at 0.2 for id 4 (then renormalized by 1.2).
  const std::vector<float> logits = {0.0f, std::log(2.0f), std::log(3.0f), std::log(4.0f), std::log(2.0f)};
  const double normalizer = std::log(12.0);
  SamplingParams params;
  params.temperature = 0;
  params.logprobs = 3;
  params.logit_bias = {{0, 100.0f}};  // forces id 0; its reported logprob stays the raw one
  params.repetition_penalty = 1.5f;
  const std::vector<int32_t> prompt = {3};
  const SampleResult result = sample(logits, params, TokenHistory(prompt), 0, 0, 1);
  EXPECT_EQ(result.token, 0);
  EXPECT_NEAR(result.logprob, std::log(1.0) - normalizer, 1e-6);
  ASSERT_EQ(result.top_logprobs.size(), 3u);
  EXPECT_EQ(result.top_logprobs[0].token, 3);
  EXPECT_NEAR(result.top_logprobs[0].logprob, std::log(4.0) - normalizer, 1e-6);
  EXPECT_EQ(result.top_logprobs[1].token, 2);
  EXPECT_NEAR(result.top_logprobs[1].logprob, std::log(3.0) - normalizer, 1e-6);
  EXPECT_EQ(result.top_logprobs[2].token, 1);  // tie with id 4: the lower id
  EXPECT_NEAR(result.top_logprobs[2].logprob, std::log(2.0) - normalizer, 1e-6);
}

TEST(Sampler, LogprobsOnlyWhenAskedAndClampedToTheVocabulary) {
  const std::vector<float> logits = {1.0f, 2.0f};
  SamplingParams params;
  const SampleResult none = sample(logits, params, TokenHistory{}, 0, 0, 0);
  EXPECT_TRUE(std::isnan(none.logprob));
  EXPECT_TRUE(none.top_logprobs.empty());
  params.logprobs = 0;
  const SampleResult only_sampled = sample(logits, params, TokenHistory{}, 0, 0, 0);
  EXPECT_LT(only_sampled.logprob, 0.0f);
  EXPECT_TRUE(only_sampled.top_logprobs.empty());
  params.logprobs = 20;
  EXPECT_EQ(sample(logits, params, TokenHistory{}, 0, 0, 0).top_logprobs.size(), 2u);
}

TEST(Sampler, RejectsUnusableInputs) {
  const SamplingParams params;
  const std::vector<float> logits = {0.0f, 1.0f};
  EXPECT_THROW(sample(std::span<const float>{}, params, TokenHistory{}, 0, 0, 0), Error);
  const std::vector<int32_t> prompt = {2};
  EXPECT_THROW(sample(logits, params, TokenHistory(prompt), 0, 0, 1), Error);
  EXPECT_THROW(sample(logits, params, TokenHistory{}, 0, 0, -1), Error);
  const std::vector<float> hopeless = {-INFINITY, std::nanf("")};
  EXPECT_THROW(sample(hopeless, params, TokenHistory{}, 0, 0, 0), Error);
  SamplingParams bad_bias;
  bad_bias.logit_bias = {{2, 1.0f}};
  EXPECT_THROW(sample(logits, bad_bias, TokenHistory{}, 0, 0, 0), Error);
}

}  // namespace
}  // namespace deepinfer::engine
