// A server on a model with a DSpark drafter speculates by default (scheduled verification),
// answers exactly what it answers with --speculative off (greedy, and sampled with a seed), and
// publishes the
// deepinfer:spec_decode_* counters that `deepinfer bench` reads back.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli/bench_metrics.h"
#include "server_fixture.h"

namespace deepinfer::server {
namespace {

ServerOptions dspark_options(std::optional<engine::SpeculativeMode> mode) {
  ServerOptions options = testing::test_options(std::string(DEEPINFER_TEST_DATA_DIR) + "/golden/v41/tiny_dspark");
  options.speculative = mode;
  return options;
}

std::string greedy_completion(testing::RunningServer& server) {
  const nlohmann::json body = {{"model", "tiny"}, {"prompt", {7, 99, 3, 250, 41, 8, 300, 12}},
                               {"max_tokens", 24}, {"temperature", 0}, {"ignore_eos", true}};
  const auto result = server.client().Post("/v1/completions", body.dump(), "application/json");
  EXPECT_TRUE(result);
  if (!result) return "";
  EXPECT_EQ(result->status, 200) << result->body;
  return nlohmann::json::parse(result->body)["choices"][0]["text"].get<std::string>();
}

// A hot seeded completion's choice: its text and its tokens' log-probabilities.
nlohmann::json seeded_choice(testing::RunningServer& server) {
  const nlohmann::json body = {{"model", "tiny"}, {"prompt", {5, 17, 230, 9, 88, 402, 61}}, {"max_tokens", 24},
                               {"temperature", 1.8}, {"seed", 4242}, {"logprobs", 2}, {"ignore_eos", true}};
  const auto result = server.client().Post("/v1/completions", body.dump(), "application/json");
  EXPECT_TRUE(result);
  if (!result) return nullptr;
  EXPECT_EQ(result->status, 200) << result->body;
  return nlohmann::json::parse(result->body)["choices"][0];
}

TEST(SpeculativeServer, SpeculatesByDefaultAndAnswersAsWithout) {
  std::string plain;
  nlohmann::json plain_seeded;
  {
    testing::RunningServer off(dspark_options(engine::SpeculativeMode::off));
    EXPECT_EQ(off.server().model().engine_options().speculative, engine::SpeculativeMode::off);
    plain = greedy_completion(off);
    plain_seeded = seeded_choice(off);
    const std::string metrics = off.client().Get("/metrics")->body;
    EXPECT_EQ(metrics.find("spec_decode"), std::string::npos);
    EXPECT_FALSE(cli::bench::parse_speculation_metrics(metrics));
  }
  testing::RunningServer server(dspark_options(std::nullopt));
  EXPECT_EQ(server.server().model().engine_options().speculative, engine::SpeculativeMode::scheduled);
  EXPECT_EQ(greedy_completion(server), plain);
  EXPECT_EQ(seeded_choice(server), plain_seeded);
  {
    // Static blocks: every step verifies drafts (the schedule above may verify none at this load).
    testing::RunningServer static_blocks(dspark_options(engine::SpeculativeMode::static_blocks));
    EXPECT_EQ(seeded_choice(static_blocks), plain_seeded);
  }
  // The engine publishes its counters after the step that finished the request.
  std::optional<cli::bench::SpeculationScrape> scraped;
  for (int i = 0; i < 200 && !(scraped && scraped->drafts > 0); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    scraped = cli::bench::parse_speculation_metrics(server.client().Get("/metrics")->body);
  }
  ASSERT_TRUE(scraped);
  EXPECT_GT(scraped->drafts, 0);
  EXPECT_GT(scraped->proposed_tokens, 0);
  EXPECT_GE(scraped->draft_tokens, scraped->drafts);
  EXPECT_EQ(scraped->verified_by_position.size(), 4u);
  EXPECT_EQ(scraped->accepted_by_position.size(), 4u);
  EXPECT_GT(scraped->steps, 0);
}

TEST(SpeculativeServer, RefusesAModeTheModelCannotRun) {
  // The tiny V4 model has no drafter: asking for speculation fails at start, with the reason.
  ServerOptions options = testing::test_options();
  options.speculative = engine::SpeculativeMode::static_blocks;
  try {
    Server server(options);
    FAIL() << "a server without a drafter started with --speculative static";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("drafter"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace deepinfer::server
