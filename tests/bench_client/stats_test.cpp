#include "cli/bench_stats.h"

#include <gtest/gtest.h>

namespace deepinfer::cli::bench {
namespace {

TEST(Percentile, InterpolatesBetweenClosestRanksLikeNumpy) {
  // numpy.percentile([4, 1, 3, 2], [0, 50, 90, 99, 100]) = [1, 2.5, 3.7, 3.97, 4]
  const std::vector<double> values = {4, 1, 3, 2};
  EXPECT_DOUBLE_EQ(*percentile(values, 0), 1.0);
  EXPECT_DOUBLE_EQ(*percentile(values, 50), 2.5);
  EXPECT_NEAR(*percentile(values, 90), 3.7, 1e-12);
  EXPECT_NEAR(*percentile(values, 99), 3.97, 1e-12);
  EXPECT_DOUBLE_EQ(*percentile(values, 100), 4.0);
  // numpy.percentile(range(1, 101), 99) = 99.01
  std::vector<double> hundred;
  for (int i = 1; i <= 100; ++i) hundred.push_back(i);
  EXPECT_NEAR(*percentile(hundred, 99), 99.01, 1e-9);
  EXPECT_NEAR(*percentile(hundred, 90), 90.1, 1e-9);
}

TEST(Percentile, SingleAndNoValues) {
  EXPECT_DOUBLE_EQ(*percentile({7.5}, 99), 7.5);
  EXPECT_FALSE(percentile({}, 50).has_value());
}

TEST(Describe, MeanPercentilesAndMax) {
  const std::vector<double> values = {10, 20, 30, 40, 100};
  const Distribution d = describe(values);
  EXPECT_EQ(d.count, 5u);
  EXPECT_DOUBLE_EQ(d.mean, 40.0);
  EXPECT_DOUBLE_EQ(d.p50, 30.0);
  EXPECT_NEAR(d.p90, 76.0, 1e-12);
  EXPECT_NEAR(d.p99, 97.6, 1e-12);
  EXPECT_DOUBLE_EQ(d.max, 100.0);
  EXPECT_EQ(describe({}).count, 0u);
}

RequestResult ok_request(double ttft, double latency, int64_t prompt, int64_t output, int64_t cached,
                         std::vector<double> itl) {
  RequestResult r;
  r.ok = true;
  r.usage_reported = true;
  r.ttft_s = ttft;
  r.latency_s = latency;
  r.prompt_tokens = prompt;
  r.output_tokens = output;
  r.cached_prompt_tokens = cached;
  r.itl_s = std::move(itl);
  r.token_chunks = static_cast<int64_t>(r.itl_s.size()) + 1;
  return r;
}

TEST(Tpot, ExcludesTheFirstToken) {
  EXPECT_NEAR(*tpot_seconds(ok_request(0.1, 1.0, 5, 10, 0, {})), 0.1, 1e-12);
  EXPECT_FALSE(tpot_seconds(ok_request(0.1, 1.0, 5, 1, 0, {})).has_value());
  RequestResult failed = ok_request(0.1, 1.0, 5, 10, 0, {});
  failed.ok = false;
  EXPECT_FALSE(tpot_seconds(failed).has_value());
}

TEST(Summarize, ThroughputHitRateLatenciesAndFailures) {
  std::vector<RequestResult> results;
  results.push_back(ok_request(0.2, 1.2, 100, 11, 0, {0.1, 0.1}));
  results.push_back(ok_request(0.4, 2.4, 300, 21, 200, {0.3}));
  RequestResult failed;
  failed.error = "HTTP 503: overloaded";
  failed.prompt_tokens = 1000;  // a failure's counts do not enter the totals
  results.push_back(failed);
  results.push_back(failed);

  const RunSummary s = summarize(results, 4.0);
  EXPECT_EQ(s.completed, 2);
  EXPECT_EQ(s.failed, 2);
  ASSERT_EQ(s.errors.size(), 1u);
  EXPECT_EQ(s.errors.at("HTTP 503: overloaded"), 2);
  EXPECT_EQ(s.prompt_tokens, 400);
  EXPECT_EQ(s.output_tokens, 32);
  EXPECT_EQ(s.cached_prompt_tokens, 200);
  EXPECT_DOUBLE_EQ(*s.prefix_cache_hit_rate, 0.5);
  EXPECT_DOUBLE_EQ(s.request_throughput, 0.5);
  EXPECT_DOUBLE_EQ(s.output_throughput, 8.0);
  EXPECT_DOUBLE_EQ(s.total_token_throughput, 108.0);
  EXPECT_DOUBLE_EQ(s.ttft_ms.mean, 300.0);
  EXPECT_DOUBLE_EQ(s.e2el_ms.max, 2400.0);
  EXPECT_EQ(s.itl_ms.count, 3u);  // every gap of every request
  EXPECT_NEAR(s.itl_ms.mean, (100.0 + 100.0 + 300.0) / 3, 1e-9);
  // TPOT: (1.2 - 0.2) / 10 = 100 ms and (2.4 - 0.4) / 20 = 100 ms.
  EXPECT_NEAR(s.tpot_ms.mean, 100.0, 1e-9);
  EXPECT_EQ(s.without_usage, 0);
}

TEST(Summarize, NoPromptTokensMeansNoHitRate) {
  std::vector<RequestResult> results = {RequestResult{}};
  const RunSummary s = summarize(results, 1.0);
  EXPECT_EQ(s.completed, 0);
  EXPECT_FALSE(s.prefix_cache_hit_rate.has_value());
  EXPECT_EQ(s.ttft_ms.count, 0u);
}

}  // namespace
}  // namespace deepinfer::cli::bench
