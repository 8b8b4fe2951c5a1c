// Jump-forward in the engine (EngineOptions::jump_forward): where the grammar forces the next
// bytes, their tokens are appended without a draw and computed in the next step with the drawn
// one. Over a vocabulary with one token per byte the sampler has no choice at a forced byte, so
// the output must be the same tokens with and without it, bit for bit (the forced tokens are
// computed as a chunk, which gives the same logits), in fewer steps: alone, at temperature 1 with
// n > 1, under preemption, beside free requests, from the prefix cache, cut by max_tokens, with a
// stop token inside a forced run, and after a trigger token. Requests with logprobs never jump.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <string>
#include <thread>

#include "engine/engine.h"
#include "engine_checks.h"
#include "grammar/compile.h"
#include "grammar/matcher.h"
#include "sanitizer_scale.h"
#include "tiny_model.h"

namespace deepinfer::engine {
namespace {

using testing::random_prompt;
using testing::tiny_v4;

using testing::kEos;
using testing::kTrigger;
constexpr int32_t kFirstByte = 3;  // ids 3 .. 97: the printable ASCII bytes 0x20 .. 0x7e

// The tiny model's 512 ids: one token per printable ASCII byte; the others have no bytes (never
// allowed by a grammar).
std::shared_ptr<const grammar::Vocabulary> ascii() {
  std::vector<std::string> bytes(512);
  for (int c = 0x20; c < 0x7f; ++c) bytes[static_cast<std::size_t>(kFirstByte + c - 0x20)] = std::string(1, static_cast<char>(c));
  return std::make_shared<const grammar::Vocabulary>(bytes, std::vector<int32_t>{kTrigger}, kEos);
}

int32_t id_of(char c) { return kFirstByte + (static_cast<unsigned char>(c) - 0x20); }

std::vector<int32_t> encode_ascii(std::string_view text) {
  std::vector<int32_t> out;
  for (char c : text) out.push_back(id_of(c));
  return out;
}

// Long fixed keys between short choices.
const std::shared_ptr<const grammar::CompiledGrammar>& record_grammar() {
  static const auto grammar = grammar::prepare(grammar::compile_regex(
      R"re(\{"customer_name":"(ann|bob)","shipping_address":(true|false),"quantity":[0-9]{1,2}\})re"));
  return grammar;
}

GenerationRequest record_request(std::vector<int32_t> prompt, uint64_t seed, int32_t after_token = -1) {
  GenerationRequest request;
  request.prompt = std::move(prompt);
  request.sampling.temperature = 1.0f;
  request.sampling.seed = seed;
  request.sampling.constraint = OutputConstraint{record_grammar(), ascii(), after_token, encode_ascii};
  request.max_tokens = 80;
  request.eos_token_ids = {kEos};
  return request;
}

EngineOptions options(bool jump_forward, int64_t cache_memory = 64 << 20) {
  EngineOptions out;
  out.cache_memory_bytes = cache_memory;
  out.block_tokens = 8;
  out.max_batch_tokens = 32;
  out.jump_forward = jump_forward;
  return out;
}

struct Choice {
  std::vector<GeneratedToken> tokens;
  FinishReason finish = FinishReason::Error;
  std::vector<int32_t> ids() const {
    std::vector<int32_t> out;
    for (const GeneratedToken& token : tokens) out.push_back(token.token);
    return out;
  }
  int64_t forced() const {
    int64_t count = 0;
    for (const GeneratedToken& token : tokens) count += token.forced ? 1 : 0;
    return count;
  }
};

std::vector<Choice> collect_choices(RequestStream& stream) {
  std::vector<Choice> out(static_cast<std::size_t>(stream.choices()));
  int32_t open = stream.choices();
  while (open > 0) {
    std::optional<StreamEvent> event = stream.next(std::chrono::seconds(60));
    if (!event) throw std::runtime_error("no event within 60 s");
    Choice& choice = out[static_cast<std::size_t>(event->choice)];
    choice.tokens.insert(choice.tokens.end(), event->tokens.begin(), event->tokens.end());
    if (event->finish) {
      if (*event->finish == FinishReason::Error) throw std::runtime_error(event->error);
      choice.finish = *event->finish;
      --open;
    }
  }
  return out;
}

// Runs the requests together on a fresh engine; each request's choices, and the engine's stats.
std::pair<std::vector<std::vector<Choice>>, EngineStats> run(const std::vector<GenerationRequest>& requests,
                                                             const EngineOptions& engine_options) {
  Engine engine(tiny_v4(), engine_options);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const GenerationRequest& request : requests) streams.push_back(engine.submit(request));
  std::vector<std::vector<Choice>> out;
  for (auto& stream : streams) out.push_back(collect_choices(*stream));
  // The counters once the engine is idle: it publishes them after a step's events, and the step
  // planned while the last one computed (its items gone stale when their sequences ended) may
  // still be finishing when the last event arrives.
  EngineStats stats = engine.stats();
  for (int i = 0; i < 400; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const EngineStats now = engine.stats();
    const bool settled = now.running == 0 && now.waiting == 0 && now.steps == stats.steps;
    stats = now;
    if (settled) break;
  }
  testing::expect_everything_returned(engine);
  return {out, stats};
}

std::string text_of(const Choice& choice) {
  std::string text;
  const auto vocabulary = ascii();
  for (const GeneratedToken& token : choice.tokens) text += vocabulary->bytes(token.token);
  return text;
}

void expect_same_choices(const std::vector<std::vector<Choice>>& with, const std::vector<std::vector<Choice>>& without) {
  ASSERT_EQ(with.size(), without.size());
  for (std::size_t r = 0; r < with.size(); ++r) {
    ASSERT_EQ(with[r].size(), without[r].size());
    for (std::size_t c = 0; c < with[r].size(); ++c) {
      EXPECT_EQ(with[r][c].ids(), without[r][c].ids()) << "request " << r << " choice " << c << ": '"
                                                       << text_of(with[r][c]) << "' against '"
                                                       << text_of(without[r][c]) << "'";
      EXPECT_EQ(with[r][c].finish, without[r][c].finish) << "request " << r << " choice " << c;
      EXPECT_EQ(without[r][c].forced(), 0);
    }
  }
}

TEST(JumpForward, SameTokensInFewerStepsAlone) {
  std::mt19937 rng(1);
  const std::vector<GenerationRequest> requests{record_request(random_prompt(rng, 11), 5)};
  const auto [with, with_stats] = run(requests, options(true));
  const auto [without, without_stats] = run(requests, options(false));
  expect_same_choices(with, without);
  const Choice& answer = with[0][0];
  EXPECT_EQ(answer.finish, FinishReason::Stop);
  // {"customer_name":" ... ","shipping_address": ... ,"quantity": ... }: most bytes are forced.
  EXPECT_GE(answer.forced(), 40) << text_of(answer);
  EXPECT_EQ(with_stats.forced_tokens, answer.forced());
  EXPECT_EQ(without_stats.forced_tokens, 0);
  // Without it, each token but the last costs a step; with it, only the drawn ones do (a forced
  // run is computed with the draw before it, the first one with the prompt, which can take one
  // more chunk).
  EXPECT_LE(with_stats.steps + answer.forced(), without_stats.steps + 1)
      << with_stats.steps << " steps with jump-forward, " << without_stats.steps << " without";
  EXPECT_EQ(with_stats.generated_tokens, without_stats.generated_tokens);
  std::printf("jump-forward, tiny model: %lld tokens (%lld forced) in %lld steps (%.1f ms computing); "
              "without: %lld steps (%.1f ms)\n",
              static_cast<long long>(with_stats.generated_tokens), static_cast<long long>(answer.forced()),
              static_cast<long long>(with_stats.steps), with_stats.compute_seconds * 1e3,
              static_cast<long long>(without_stats.steps), without_stats.compute_seconds * 1e3);
  grammar::Matcher matcher(record_grammar(), nullptr);
  const std::string text = text_of(answer);
  ASSERT_EQ(answer.ids().back(), kEos);
  EXPECT_TRUE(matcher.accept_bytes(text) && matcher.accepting()) << text;
}

// Batched with free requests, n = 3 (each choice forks from the prompt), at temperature 1.
TEST(JumpForward, SameTokensWithChoicesAndNeighbours) {
  std::mt19937 rng(2);
  std::vector<GenerationRequest> requests;
  for (int r = 0; r < 4; ++r) {
    GenerationRequest request = record_request(random_prompt(rng, 6 + 5 * r), 40 + static_cast<uint64_t>(r));
    request.sampling.n = r % 2 == 0 ? 3 : 1;
    requests.push_back(request);
    GenerationRequest free_request;
    free_request.prompt = random_prompt(rng, 9);
    free_request.sampling.seed = 7;
    free_request.max_tokens = 12;
    requests.push_back(free_request);
  }
  const auto [with, with_stats] = run(requests, options(true));
  const auto [without, without_stats] = run(requests, options(false));
  expect_same_choices(with, without);
  EXPECT_GT(with_stats.forced_tokens, 0);
  EXPECT_LT(with_stats.steps, without_stats.steps);
}

// A cache too small for every sequence at once: sequences are preempted and recomputed, forced
// tokens included, and the prefix cache serves the same prompt again. Steps unchained (the
// overlap schedule off): which sequences are preempted, and whether a recompute finds the
// prompt still cached, follows the order the scheduler plans in, and on a backend that chains
// draws (CUDA) chained constrained steps plan it otherwise (this order has no prefix hit there).
TEST(JumpForward, SameTokensUnderPreemptionAndFromThePrefixCache) {
  std::mt19937 rng(3);
  std::vector<GenerationRequest> requests;
  const std::vector<int32_t> shared = random_prompt(rng, 20);
  for (int r = 0; r < 4; ++r) {
    GenerationRequest request = record_request(shared, 90 + static_cast<uint64_t>(r));
    request.sampling.n = 2;
    requests.push_back(request);
  }
  EngineOptions with_options = options(true, 160 << 10), without_options = options(false, 160 << 10);
  with_options.overlap_schedule = without_options.overlap_schedule = false;
  const auto [with, with_stats] = run(requests, with_options);
  const auto [without, without_stats] = run(requests, without_options);
  expect_same_choices(with, without);
  EXPECT_GT(with_stats.preemptions, 0) << "the cache was meant to be too small for every sequence at once: " << with_stats.total_blocks << " blocks of " << with_stats.block_bytes;
  EXPECT_GT(with_stats.prefix_hit_tokens, 0);
}

// max_tokens cuts a forced run (at the start, and after a draw): the output is the first
// max_tokens tokens of the uncut one, ending with length.
TEST(JumpForward, MaxTokensCutsAForcedRun) {
  std::mt19937 rng(4);
  const std::vector<int32_t> prompt = random_prompt(rng, 9);
  const auto [full, full_stats] = run({record_request(prompt, 3)}, options(true));
  const std::vector<int32_t> whole = full[0][0].ids();
  const std::vector<int64_t> cuts = deepinfer::testing::release_or_sanitized(1, 0) ? std::vector<int64_t>{1, 2, 5, 24, 35}
                                                                                  : std::vector<int64_t>{2, 24};
  for (const int64_t max_tokens : cuts) {
    GenerationRequest request = record_request(prompt, 3);
    request.max_tokens = max_tokens;
    const auto [cut, cut_stats] = run({request}, options(true));
    const Choice& answer = cut[0][0];
    ASSERT_EQ(static_cast<int64_t>(answer.tokens.size()), max_tokens) << text_of(answer);
    EXPECT_EQ(answer.finish, FinishReason::Length);
    EXPECT_EQ(answer.ids(), std::vector<int32_t>(whole.begin(), whole.begin() + max_tokens));
  }
}

// A stop token inside a forced run is left to the sampler, which stops there as it would have.
TEST(JumpForward, AStopTokenInsideAForcedRunStopsAsWithout) {
  std::mt19937 rng(5);
  GenerationRequest request = record_request(random_prompt(rng, 9), 8);
  request.sampling.stop_token_ids = {id_of('p')};  // the first 'p', in "shipping_address"
  const auto [with, with_stats] = run({request}, options(true));
  const auto [without, without_stats] = run({request}, options(false));
  expect_same_choices(with, without);
  EXPECT_EQ(with[0][0].finish, FinishReason::Stop);
  EXPECT_EQ(with[0][0].tokens.back().token, id_of('p'));
  EXPECT_FALSE(with[0][0].tokens.back().forced);
}

// With a trigger, the grammar (and jump-forward) starts after it.
TEST(JumpForward, StartsAfterTheTrigger) {
  std::mt19937 rng(6);
  GenerationRequest request = record_request(random_prompt(rng, 9), 12, kTrigger);
  request.sampling.logit_bias = {{kTrigger, 8.0f}};
  const auto [with, with_stats] = run({request}, options(true));
  const auto [without, without_stats] = run({request}, options(false));
  expect_same_choices(with, without);
  const std::vector<int32_t> ids = with[0][0].ids();
  const auto trigger = std::find(ids.begin(), ids.end(), kTrigger);
  ASSERT_NE(trigger, ids.end()) << "the biased trigger never came";
  for (auto it = ids.begin(); it <= trigger; ++it) EXPECT_FALSE(with[0][0].tokens[static_cast<std::size_t>(it - ids.begin())].forced);
  EXPECT_GT(with[0][0].forced(), 0);
}

// Logprobs: every token is drawn and has its own log-probability.
TEST(JumpForward, RequestsWithLogprobsDrawEveryToken) {
  std::mt19937 rng(7);
  GenerationRequest request = record_request(random_prompt(rng, 9), 21);
  request.sampling.logprobs = 2;
  const auto [with, with_stats] = run({request}, options(true));
  const auto [without, without_stats] = run({request}, options(false));
  EXPECT_EQ(with[0][0].forced(), 0);
  EXPECT_TRUE(testing::same_bits(with[0][0].tokens, without[0][0].tokens));
  EXPECT_EQ(with_stats.steps, without_stats.steps);
}

}  // namespace
}  // namespace deepinfer::engine
