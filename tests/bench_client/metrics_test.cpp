// `deepinfer bench` reads speculative decoding's counters from a Prometheus exposition.
#include <gtest/gtest.h>

#include "cli/bench_metrics.h"

namespace deepinfer::cli::bench {
namespace {

TEST(BenchMetrics, ReadsTheSpeculativeCountersAndTheirDifference) {
  const std::string before =
      "# HELP deepinfer:engine_steps_total Engine steps computed.\n"
      "# TYPE deepinfer:engine_steps_total counter\n"
      "deepinfer:engine_steps_total{model_name=\"m\"} 10\n"
      "deepinfer:spec_decode_num_drafts_total{model_name=\"m\"} 4\n"
      "deepinfer:spec_decode_num_draft_tokens_total{model_name=\"m\"} 12\n"
      "deepinfer:spec_decode_num_accepted_tokens_total{model_name=\"m\"} 6\n"
      "deepinfer:spec_decode_num_proposed_tokens_total{model_name=\"m\"} 16\n"
      "deepinfer:spec_decode_num_draft_tokens_per_pos_total{model_name=\"m\",position=\"0\"} 4\n"
      "deepinfer:spec_decode_num_draft_tokens_per_pos_total{model_name=\"m\",position=\"1\"} 8\n"
      "deepinfer:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"m\",position=\"0\"} 4\n"
      "deepinfer:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"m\",position=\"1\"} 2\n";
  const std::optional<SpeculationScrape> first = parse_speculation_metrics(before);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->steps, 10);
  EXPECT_EQ(first->drafts, 4);
  EXPECT_EQ(first->draft_tokens, 12);
  EXPECT_EQ(first->accepted_tokens, 6);
  EXPECT_EQ(first->proposed_tokens, 16);
  EXPECT_EQ(first->verified_by_position, (std::vector<int64_t>{4, 8}));
  EXPECT_EQ(first->accepted_by_position, (std::vector<int64_t>{4, 2}));

  SpeculationScrape later = *first;
  later.steps = 30;
  later.drafts = 10;
  later.accepted_by_position = {7, 5};
  const SpeculationScrape delta = speculation_delta(*first, later);
  EXPECT_EQ(delta.steps, 20);
  EXPECT_EQ(delta.drafts, 6);
  EXPECT_EQ(delta.draft_tokens, 0);
  EXPECT_EQ(delta.accepted_by_position, (std::vector<int64_t>{3, 3}));
}

TEST(BenchMetrics, AServerWithoutSpeculationHasNoneAndBadLinesAreSkipped) {
  EXPECT_FALSE(parse_speculation_metrics("deepinfer:engine_steps_total{model_name=\"m\"} 3\n"));
  EXPECT_FALSE(parse_speculation_metrics(""));
  const std::optional<SpeculationScrape> odd = parse_speculation_metrics(
      "deepinfer:spec_decode_num_drafts_total{model_name=\"m\"} 2\n"
      "deepinfer:spec_decode_num_draft_tokens_total{model_name=\"m\"} x\n"
      "deepinfer:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"m\",position=\"99999\"} 1\n"
      "deepinfer:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"m\",position=\"q\"} 1\n"
      "garbage\n");
  ASSERT_TRUE(odd);
  EXPECT_EQ(odd->drafts, 2);
  EXPECT_EQ(odd->draft_tokens, 0);
  EXPECT_TRUE(odd->accepted_by_position.empty());
}

}  // namespace
}  // namespace deepinfer::cli::bench
