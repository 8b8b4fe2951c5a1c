// Structured output in the engine: every sampled token keeps the output inside the request's
// grammar, under sampling, batching with free requests, n > 1 and preemption; the grammar can
// start after a trigger token (thinking); EOS comes only where the grammar is complete.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "core/error.h"
#include "engine/engine.h"
#include "engine_checks.h"
#include "letters_grammar.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "tiny_model.h"

namespace deepinfer::engine {
namespace {

using testing::random_prompt;
using testing::tiny_v4;

using testing::abc;
using testing::kEos;
using testing::kTrigger;
using testing::letters;

struct Result {
  std::vector<int32_t> tokens;
  FinishReason finish = FinishReason::Error;
};

std::vector<Result> collect_results(RequestStream& stream, int32_t choices) {
  std::vector<Result> out(static_cast<std::size_t>(choices));
  int32_t open = choices;
  while (open > 0) {
    std::optional<StreamEvent> event = stream.next(std::chrono::seconds(60));
    if (!event) throw std::runtime_error("no event within 60 s");
    Result& result = out[static_cast<std::size_t>(event->choice)];
    for (const GeneratedToken& token : event->tokens) result.tokens.push_back(token.token);
    if (event->finish) {
      if (*event->finish == FinishReason::Error) throw std::runtime_error(event->error);
      result.finish = *event->finish;
      --open;
    }
  }
  return out;
}

std::string text_of(const std::vector<int32_t>& tokens, const grammar::Vocabulary& vocabulary) {
  std::string text;
  for (int32_t id : tokens) text += vocabulary.bytes(id);
  return text;
}

using testing::small_options;

GenerationRequest constrained(std::vector<int32_t> prompt, int32_t after_token, uint64_t seed) {
  GenerationRequest request;
  request.prompt = std::move(prompt);
  request.sampling.temperature = 1.0f;
  request.sampling.seed = seed;
  request.sampling.constraint = OutputConstraint{grammar::prepare(abc()), letters(), after_token};
  request.max_tokens = 24;
  request.eos_token_ids = {kEos};
  return request;
}

void expect_inside_the_grammar(const Result& result, const grammar::Vocabulary& vocabulary, std::size_t skip = 0) {
  std::vector<int32_t> answer(result.tokens.begin() + static_cast<std::ptrdiff_t>(std::min(skip, result.tokens.size())),
                              result.tokens.end());
  const bool stopped = result.finish == FinishReason::Stop;
  if (stopped) {
    ASSERT_FALSE(answer.empty());
    EXPECT_EQ(answer.back(), kEos);
    answer.pop_back();
  }
  const std::string text = text_of(answer, vocabulary);
  grammar::Matcher matcher(grammar::prepare(abc()), nullptr);
  EXPECT_TRUE(matcher.accept_bytes(text)) << "'" << text << "' leaves the grammar";
  if (stopped) EXPECT_TRUE(matcher.accepting()) << "'" << text << "' stopped before the grammar was complete";
  else EXPECT_EQ(result.finish, FinishReason::Length);
}

TEST(ConstrainedGeneration, EveryTokenStaysInsideTheGrammar) {
  std::mt19937 rng(11);
  Engine engine(tiny_v4(), small_options());
  const auto vocabulary = letters();
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int r = 0; r < 8; ++r) {
    streams.push_back(engine.submit(constrained(random_prompt(rng, 5 + r), -1, 100 + static_cast<uint64_t>(r))));
    GenerationRequest free_request;  // unconstrained neighbours in the same batches
    free_request.prompt = random_prompt(rng, 7);
    free_request.max_tokens = 6;
    streams.push_back(engine.submit(free_request));
  }
  int stopped = 0;
  for (std::size_t i = 0; i < streams.size(); i += 2) {
    const Result result = collect_results(*streams[i], 1).front();
    expect_inside_the_grammar(result, *vocabulary);
    stopped += result.finish == FinishReason::Stop;
    collect_results(*streams[i + 1], 1);
  }
  EXPECT_GT(stopped, 0) << "no constrained request reached the end of its grammar";
}

TEST(ConstrainedGeneration, ChoicesAndPreemptionStayInside) {
  std::mt19937 rng(5);
  EngineOptions options = small_options();
  options.cache_memory_bytes = 2 << 20;  // tight: sequences get preempted and recomputed
  Engine engine(tiny_v4(), options);
  const auto vocabulary = letters();
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int r = 0; r < 6; ++r) {
    GenerationRequest request = constrained(random_prompt(rng, 20), -1, 7 + static_cast<uint64_t>(r));
    request.sampling.n = 3;
    streams.push_back(engine.submit(request));
  }
  for (auto& stream : streams)
    for (const Result& result : collect_results(*stream, 3)) expect_inside_the_grammar(result, *vocabulary);
}

// With a trigger, tokens up to and including it are free; the grammar governs what follows.
TEST(ConstrainedGeneration, TheGrammarStartsAfterItsTrigger) {
  std::mt19937 rng(2);
  Engine engine(tiny_v4(), small_options());
  const auto vocabulary = letters();
  GenerationRequest request = constrained(random_prompt(rng, 9), kTrigger, 3);
  // Make the trigger likely but not certain: bias it up.
  request.sampling.logit_bias = {{kTrigger, 8.0f}};
  const Result result = collect_results(*engine.submit(request), 1).front();
  const auto trigger = std::find(result.tokens.begin(), result.tokens.end(), kTrigger);
  ASSERT_NE(trigger, result.tokens.end()) << "the biased trigger never came";
  expect_inside_the_grammar(result, *vocabulary, static_cast<std::size_t>(trigger - result.tokens.begin()) + 1);
}

}  // namespace
}  // namespace deepinfer::engine
