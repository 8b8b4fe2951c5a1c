// Overlap scheduling (EngineOptions::overlap_schedule): on a backend that chains passes, a step
// that continues the computing step's sequences is issued before that step's tokens reach the
// host. Run on ChainingCpuBackend (chaining_backend.h) here, and on the GPU by scripts/test-gpu.sh
// through the whole engine suite: the tokens, log-probabilities and finish reasons must be those
// of the plain CPU engine, whatever finishes, stops, is cancelled or preempted while a chained
// step is in flight.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "chaining_backend.h"
#include "engine/engine.h"
#include "grammar/compile.h"
#include "grammar/matcher.h"
#include "letters_grammar.h"
#include "engine_checks.h"
#include "tiny_model.h"

namespace deepinfer::engine {
namespace {

using testing::Answer;
using testing::ChainingCpuBackend;
using testing::random_prompt;
using testing::read_answer;
using testing::same_bits;
using testing::small_options;

// A mix of greedy and seeded sampled requests, some with logprobs.
std::vector<GenerationRequest> mixed_requests(int count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<GenerationRequest> requests;
  for (int r = 0; r < count; ++r) {
    GenerationRequest request;
    request.prompt = random_prompt(rng, 3 + r % 11);
    request.max_tokens = 6 + (r * 7) % 19;
    request.sampling.temperature = r % 3 == 0 ? 0.0f : 0.9f;
    request.sampling.seed = 1000 + r;
    if (r % 4 == 1) request.sampling.top_p = 0.8f;
    if (r % 5 == 2) request.sampling.logprobs = 3;
    requests.push_back(std::move(request));
  }
  return requests;
}

std::vector<Answer> run_all(const model::Model& model, const EngineOptions& options,
                            const std::vector<GenerationRequest>& requests, EngineStats* stats = nullptr) {
  Engine engine(model, options);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const GenerationRequest& request : requests) streams.push_back(engine.submit(request));
  std::vector<Answer> answers;  // every choice of every request, in order
  for (std::size_t r = 0; r < streams.size(); ++r)
    for (Answer& choice : testing::read_choices(*streams[r], requests[r].sampling.n))
      answers.push_back(std::move(choice));
  if (stats) *stats = engine.stats();
  testing::expect_everything_returned(engine);
  return answers;
}

void expect_same_answers(const std::vector<Answer>& got, const std::vector<Answer>& expected) {
  ASSERT_EQ(got.size(), expected.size());
  for (std::size_t r = 0; r < got.size(); ++r) {
    EXPECT_TRUE(same_bits(got[r].tokens, expected[r].tokens)) << "answer " << r;
    EXPECT_EQ(got[r].finish, expected[r].finish) << "answer " << r << ": " << got[r].error;
  }
}

TEST(OverlapScheduleTest, ChainedStepsGiveThePlainEnginesTokens) {
  std::vector<GenerationRequest> requests = mixed_requests(16, 7);
  const model::Model reference = testing::load_tiny_v4();  // the plain CPU backend
  // Every other request stops early: at a token its free answer draws halfway through.
  const std::vector<Answer> unstopped = run_all(reference, small_options(), requests);
  for (std::size_t r = 1; r < requests.size(); r += 2)
    requests[r].sampling.stop_token_ids = {unstopped[r].tokens[unstopped[r].tokens.size() / 2].token};
  const std::vector<Answer> expected = run_all(reference, small_options(), requests);

  model::Model model = testing::load_tiny_v4();
  auto chaining = std::make_shared<ChainingCpuBackend>();
  model.set_backend(chaining);
  ASSERT_TRUE(model.chains_draws());
  EngineStats stats;
  expect_same_answers(run_all(model, small_options(), requests, &stats), expected);
  // Most steps continue the previous one; their rows took their tokens from the draws.
  EXPECT_GT(stats.chained_steps, stats.steps / 3) << stats.chained_steps << " of " << stats.steps;
  EXPECT_GT(chaining->chained_rows(), 0);
  // Some chained steps carried prompt chunks of requests admitted while others decoded.
  EXPECT_GT(chaining->mixed_passes(), 0);
  int stopped = 0;
  for (const Answer& answer : expected) stopped += answer.finish == FinishReason::Stop;
  EXPECT_GT(stopped, 0) << "no request met a stop token: the test covers no early end";

  // Turned off, nothing is chained and the answers are the same.
  EngineOptions off = small_options();
  off.overlap_schedule = false;
  expect_same_answers(run_all(model, off, requests, &stats), expected);
  EXPECT_EQ(stats.chained_steps, 0);
}

// Constrained rows chain too: a chained step's masks are computed once the computing step's
// draws are read (StepExecutor::start_masks), and the tokens are the plain engine's. With
// jump-forward off the two draw the same tokens, position for position; every answer is inside
// the grammar ("a" "b"* "c", over the tiny model's ids as letters).
TEST(OverlapScheduleTest, ConstrainedRowsChainWithTheirMasks) {
  const auto vocabulary = testing::letters();
  const auto grammar = grammar::prepare(testing::abc());
  std::vector<GenerationRequest> requests = mixed_requests(8, 13);
  for (GenerationRequest& request : requests) {
    request.sampling.temperature = 1.0f;
    request.sampling.top_p = 1.0f;
    request.sampling.constraint = OutputConstraint{grammar, vocabulary, -1};
    request.eos_token_ids = {testing::kEos};
    request.max_tokens = 20;
  }
  EngineOptions options = small_options();
  options.jump_forward = false;
  const std::vector<Answer> expected = run_all(testing::load_tiny_v4(), options, requests);
  model::Model model = testing::load_tiny_v4();
  auto chaining = std::make_shared<ChainingCpuBackend>();
  model.set_backend(chaining);
  EngineStats stats;
  const std::vector<Answer> got = run_all(model, options, requests, &stats);
  expect_same_answers(got, expected);
  EXPECT_GT(stats.chained_steps, stats.steps / 3) << stats.chained_steps << " of " << stats.steps;
  for (const Answer& answer : got) {
    grammar::Matcher matcher(grammar, vocabulary);
    for (const GeneratedToken& token : answer.tokens) EXPECT_TRUE(matcher.accept_token(token.token));
  }
  // Jump-forward on: chained rows draw the bytes the grammar forces (one id each here, so the
  // same tokens), unchained steps force them.
  options.jump_forward = true;
  expect_same_answers(run_all(model, options, requests, &stats), expected);
  EXPECT_GT(stats.chained_steps, 0);
}

TEST(OverlapScheduleTest, PreemptionAndChoicesKeepTheTokens) {
  std::vector<GenerationRequest> requests = mixed_requests(8, 11);
  for (GenerationRequest& request : requests) {
    request.prompt.resize(20, 9);
    request.max_tokens = 14;
  }
  requests[3].sampling.n = 3;  // forks: its first steps are not chained
  EngineOptions options = small_options();
  options.block_tokens = 4;
  const model::CacheLayout layout = testing::tiny_v4().cache_layout(options.block_tokens);
  options.cache_memory_bytes = layout.block_bytes * 48 + 2 * testing::tiny_v4().max_snapshot_bytes(4);
  ASSERT_EQ(layout.block_bytes, testing::load_tiny_v4().cache_layout(options.block_tokens).block_bytes);
  const model::Model reference = testing::load_tiny_v4();
  const std::vector<Answer> expected = run_all(reference, options, requests);

  model::Model model = testing::load_tiny_v4();
  model.set_backend(std::make_shared<ChainingCpuBackend>());
  EngineStats stats;
  expect_same_answers(run_all(model, options, requests, &stats), expected);
  EXPECT_GT(stats.preemptions, 0);
  EXPECT_GT(stats.chained_steps, 0);
}

TEST(OverlapScheduleTest, CancellingWhileAChainedStepComputesLeavesTheOthersIntact) {
  std::vector<GenerationRequest> requests = mixed_requests(6, 5);
  for (GenerationRequest& request : requests) {
    request.max_tokens = 40;
    request.sampling.stop_token_ids.clear();
  }
  const model::Model reference = testing::load_tiny_v4();
  const std::vector<Answer> expected = run_all(reference, small_options(), requests);

  model::Model model = testing::load_tiny_v4();
  model.set_backend(std::make_shared<ChainingCpuBackend>());
  Engine engine(model, small_options());
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const GenerationRequest& request : requests) streams.push_back(engine.submit(request));
  // Cancel request 2 once it has produced a few tokens, with the others still decoding.
  int64_t seen = 0;
  while (seen < 5) {
    std::optional<StreamEvent> event = streams[2]->next(std::chrono::seconds(120));
    ASSERT_TRUE(event.has_value());
    seen += static_cast<int64_t>(event->tokens.size());
    ASSERT_FALSE(event->finish.has_value());
  }
  engine.cancel(streams[2]->id());
  const Answer cancelled = read_answer(*streams[2]);
  EXPECT_EQ(cancelled.finish, FinishReason::Cancelled);
  for (std::size_t r = 0; r < requests.size(); ++r) {
    if (r == 2) continue;
    const Answer answer = read_answer(*streams[r]);
    EXPECT_TRUE(same_bits(answer.tokens, expected[r].tokens)) << "request " << r;
    EXPECT_EQ(answer.finish, expected[r].finish) << "request " << r;
  }
  EXPECT_GT(engine.stats().chained_steps, 0);
  testing::expect_everything_returned(engine);
}

// On the test device (the CPU, or the GPU under DEEPINFER_TEST_DEVICE=cuda, whose backend chains
// passes for real): overlap on and off give the same answers.
TEST(OverlapScheduleTest, OnTheTestDeviceOverlapOnAndOffAgree) {
  const model::Model& model = testing::tiny_v4();
  std::vector<GenerationRequest> requests = mixed_requests(24, 13);
  requests[5].sampling.n = 2;
  requests[9].sampling.presence_penalty = 0.5f;  // never chained: the penalty counts the token being drawn
  EngineOptions off = small_options();
  off.overlap_schedule = false;
  EngineStats stats;
  const std::vector<Answer> expected = run_all(model, off, requests, &stats);
  EXPECT_EQ(stats.chained_steps, 0);
  expect_same_answers(run_all(model, small_options(), requests, &stats), expected);
  if (model.chains_draws()) {
    EXPECT_GT(stats.chained_steps, stats.steps / 3) << stats.chained_steps << " of " << stats.steps;
  } else {
    EXPECT_EQ(stats.chained_steps, 0);
  }
}

}  // namespace
}  // namespace deepinfer::engine
