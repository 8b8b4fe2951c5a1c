// Prompt log-probabilities (SamplingParams::prompt_logprobs) on the tiny V4 fixture: each prompt
// token after the first is scored once, before any generated token; the values equal a log-softmax
// over Model::forward's rows, do not depend on chunking, batching or preemption, skip the prefix
// cache, and equal the sampled token's log-probability when the same token is generated.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "core/error.h"
#include "engine/engine.h"
#include "model/model.h"
#include "engine_checks.h"
#include "tiny_model.h"

namespace deepinfer::engine {
namespace {

using Tokens = std::vector<int32_t>;

using testing::random_prompt;
using testing::same_bits;
using testing::tiny_v4;

struct PromptAndAnswer {
  std::vector<GeneratedToken> prompt;
  std::vector<GeneratedToken> tokens;
  int64_t cached_tokens = 0;
  bool prompt_after_tokens = false;  // a prompt entry arrived after a generated token
};

PromptAndAnswer collect_prompt_and_answer(RequestStream& stream) {
  PromptAndAnswer out;
  int32_t finished = 0;
  while (finished < stream.choices()) {
    std::optional<StreamEvent> event = stream.next(std::chrono::seconds(60));
    if (!event) throw std::runtime_error("no event within 60 s");
    if (!event->prompt_logprobs.empty() && !out.tokens.empty()) out.prompt_after_tokens = true;
    for (GeneratedToken& token : event->prompt_logprobs) out.prompt.push_back(std::move(token));
    if (event->choice == 0)
      for (GeneratedToken& token : event->tokens) out.tokens.push_back(std::move(token));
    out.cached_tokens = std::max(out.cached_tokens, event->cached_tokens);
    if (event->finish) {
      if (*event->finish == FinishReason::Error) throw std::runtime_error(event->error);
      ++finished;
    }
  }
  return out;
}

GenerationRequest scored(Tokens prompt, int64_t max_tokens, int32_t alternatives = 3) {
  GenerationRequest request;
  request.prompt = std::move(prompt);
  request.sampling.temperature = 0;
  request.sampling.logprobs = alternatives;
  request.sampling.prompt_logprobs = alternatives;
  request.max_tokens = max_tokens;
  return request;
}

EngineOptions options_with(int64_t block_tokens, int64_t max_batch_tokens) {
  EngineOptions options;
  options.cache_memory_bytes = 16 << 20;
  options.block_tokens = block_tokens;
  options.max_batch_tokens = max_batch_tokens;
  return options;
}

PromptAndAnswer run_alone(const GenerationRequest& request, EngineOptions options = options_with(8, 32)) {
  Engine engine(tiny_v4(), options);
  return collect_prompt_and_answer(*engine.submit(request));
}

// Independent of the engine and the sampler: one forward over the whole prompt with every row's
// logits, a log-softmax in double per row.
TEST(PromptLogprobsTest, EqualALogSoftmaxOverEveryForwardRow) {
  std::mt19937 rng(21);
  const Tokens prompt = random_prompt(rng, 29);
  const PromptAndAnswer got = run_alone(scored(prompt, 2));
  ASSERT_EQ(got.prompt.size(), prompt.size() - 1);
  EXPECT_FALSE(got.prompt_after_tokens);
  EXPECT_EQ(got.tokens.size(), 2u);

  const model::Model& model = tiny_v4();
  const auto vocab = static_cast<std::size_t>(model.vocab_size());
  model::SequenceState sequence = model.new_sequence();
  std::vector<float> logits(prompt.size() * vocab);
  model.forward(sequence, prompt, logits, model::LogitRows::All);
  for (std::size_t index = 1; index < prompt.size(); ++index) {
    const float* row = logits.data() + (index - 1) * vocab;
    const double max = *std::max_element(row, row + vocab);
    double sum = 0;
    for (std::size_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(row[v]) - max);
    const double normalizer = max + std::log(sum);
    const GeneratedToken& entry = got.prompt[index - 1];
    EXPECT_EQ(entry.token, prompt[index]) << "index " << index;
    EXPECT_NEAR(entry.logprob, row[prompt[index]] - normalizer, 2e-5) << "index " << index;
    ASSERT_EQ(entry.top_logprobs.size(), 3u);
    const auto best = static_cast<int32_t>(std::max_element(row, row + vocab) - row);
    EXPECT_EQ(entry.top_logprobs[0].token, best) << "index " << index;
    EXPECT_NEAR(entry.top_logprobs[0].logprob, max - normalizer, 2e-5);
    EXPECT_GE(entry.top_logprobs[0].logprob, entry.top_logprobs[1].logprob);
    EXPECT_GE(entry.top_logprobs[1].logprob, entry.top_logprobs[2].logprob);
  }
}

TEST(PromptLogprobsTest, ChunkSizesAndBlockSizesGiveIdenticalBits) {
  std::mt19937 rng(22);
  const GenerationRequest request = scored(random_prompt(rng, 27), 3);
  const PromptAndAnswer want = run_alone(request, options_with(8, 64));  // the whole prompt in one chunk
  ASSERT_EQ(want.prompt.size(), 26u);
  for (const auto& [block, budget] : std::vector<std::pair<int64_t, int64_t>>{{8, 1}, {8, 3}, {4, 3}, {4, 5}}) {
    const PromptAndAnswer got = run_alone(request, options_with(block, budget));
    EXPECT_TRUE(same_bits(got.prompt, want.prompt)) << "block " << block << ", budget " << budget;
    EXPECT_TRUE(same_bits(got.tokens, want.tokens)) << "block " << block << ", budget " << budget;
    EXPECT_FALSE(got.prompt_after_tokens);
  }
  // The logits-memory cap cuts the chunks instead (2 rows of the vocabulary a step).
  EngineOptions capped = options_with(8, 64);
  capped.max_prompt_logits_bytes = 2 * tiny_v4().vocab_size() * static_cast<int64_t>(sizeof(float)) + 7;
  Engine engine(tiny_v4(), capped);
  const PromptAndAnswer got = collect_prompt_and_answer(*engine.submit(request));
  EXPECT_TRUE(same_bits(got.prompt, want.prompt));
  EXPECT_TRUE(same_bits(got.tokens, want.tokens));
  EXPECT_GE(engine.stats().steps, 14);  // 27 prompt positions, at most 2 a step, then 2 decodes
}

TEST(PromptLogprobsTest, BatchedWithOthersEqualsAlone) {
  std::mt19937 rng(23);
  std::vector<GenerationRequest> requests;
  for (int r = 0; r < 5; ++r) {
    GenerationRequest request = scored(random_prompt(rng, 5 + 7 * r), 4, r % 3);
    if (r == 2) request.sampling.prompt_logprobs.reset();  // a plain request in the mix
    requests.push_back(request);
  }
  std::vector<PromptAndAnswer> alone;
  for (const GenerationRequest& request : requests) alone.push_back(run_alone(request));
  for (int mix = 0; mix < 6; ++mix) {
    Engine engine(tiny_v4(), options_with(mix % 2 ? 4 : 8, 6 + 7 * mix));
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (const GenerationRequest& request : requests) streams.push_back(engine.submit(request));
    for (std::size_t r = 0; r < streams.size(); ++r) {
      const PromptAndAnswer got = collect_prompt_and_answer(*streams[r]);
      EXPECT_TRUE(same_bits(got.prompt, alone[r].prompt)) << "mix " << mix << ", request " << r;
      EXPECT_TRUE(same_bits(got.tokens, alone[r].tokens)) << "mix " << mix << ", request " << r;
      EXPECT_EQ(got.prompt.size(), r == 2 ? 0u : requests[r].prompt.size() - 1);
    }
  }
}

// The scored prompt extends a cached one: it still computes (and reports) every position.
TEST(PromptLogprobsTest, SkipThePrefixCache) {
  std::mt19937 rng(24);
  const Tokens first = random_prompt(rng, 30);
  Tokens second = first;
  const Tokens tail = random_prompt(rng, 6);
  second.insert(second.end(), tail.begin(), tail.end());
  const PromptAndAnswer want = run_alone(scored(second, 2));

  Engine engine(tiny_v4(), options_with(8, 32));
  GenerationRequest plain = scored(first, 4);
  plain.sampling.prompt_logprobs.reset();
  (void)collect_prompt_and_answer(*engine.submit(plain));
  const PromptAndAnswer got = collect_prompt_and_answer(*engine.submit(scored(second, 2)));
  EXPECT_EQ(got.cached_tokens, 0);
  EXPECT_EQ(engine.stats().prefix_hit_tokens, 0);
  EXPECT_TRUE(same_bits(got.prompt, want.prompt));
  EXPECT_TRUE(same_bits(got.tokens, want.tokens));
  // Its blocks were inserted: the same prompt without prompt logprobs now hits the cache.
  plain.prompt = second;
  EXPECT_GT(collect_prompt_and_answer(*engine.submit(plain)).cached_tokens, 0);
}

// Teacher forcing: the prompt score of a token equals its log-probability when it was generated.
TEST(PromptLogprobsTest, EqualTheGeneratedTokensLogprobs) {
  std::mt19937 rng(25);
  const Tokens prompt = random_prompt(rng, 13);
  const PromptAndAnswer generated = run_alone(scored(prompt, 6));
  ASSERT_EQ(generated.tokens.size(), 6u);
  Tokens extended = prompt;
  for (std::size_t i = 0; i + 1 < generated.tokens.size(); ++i) extended.push_back(generated.tokens[i].token);
  const PromptAndAnswer replay = run_alone(scored(extended, 1));
  ASSERT_EQ(replay.prompt.size(), extended.size() - 1);
  for (std::size_t i = 0; i + 1 < generated.tokens.size(); ++i)
    EXPECT_TRUE(same_bits(replay.prompt[prompt.size() - 1 + i], generated.tokens[i])) << "token " << i;
  EXPECT_TRUE(same_bits(replay.tokens[0], generated.tokens.back()));
}

// Preemption recomputes prompts; each prompt token is still reported exactly once, before the
// generated ones. n = 2 reports the prompt once per request.
TEST(PromptLogprobsTest, PreemptionAndChoicesReportEachPromptTokenOnce) {
  const model::Model& model = tiny_v4();
  EngineOptions options = options_with(4, 32);
  options.cache_memory_bytes = model.cache_layout(4).block_bytes * 48 + 2 * model.max_snapshot_bytes(4);
  std::mt19937 rng(26);
  std::vector<GenerationRequest> requests;
  for (int r = 0; r < 8; ++r) requests.push_back(scored(random_prompt(rng, 24), 12, 2));
  requests[3].sampling.n = 2;
  std::vector<PromptAndAnswer> alone;
  for (const GenerationRequest& request : requests) alone.push_back(run_alone(request));
  Engine engine(model, options);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const GenerationRequest& request : requests) streams.push_back(engine.submit(request));
  for (std::size_t r = 0; r < streams.size(); ++r) {
    const PromptAndAnswer got = collect_prompt_and_answer(*streams[r]);
    EXPECT_EQ(got.prompt.size(), 23u) << "request " << r;
    EXPECT_TRUE(same_bits(got.prompt, alone[r].prompt)) << "request " << r;
    EXPECT_TRUE(same_bits(got.tokens, alone[r].tokens)) << "request " << r;
    EXPECT_FALSE(got.prompt_after_tokens) << "request " << r;
  }
  EXPECT_GT(engine.stats().preemptions, 0);
}

TEST(PromptLogprobsTest, OutOfRangeIsRefused) {
  Engine engine(tiny_v4(), options_with(8, 32));
  GenerationRequest request = scored({5, 6, 7}, 1);
  request.sampling.prompt_logprobs = kMaxLogprobs + 1;
  EXPECT_THROW(engine.submit(request), Error);
  request.sampling.prompt_logprobs = -1;
  EXPECT_THROW(engine.submit(request), Error);
  request.sampling.prompt_logprobs = 0;  // the prompt token alone, no alternatives
  const PromptAndAnswer got = collect_prompt_and_answer(*engine.submit(request));
  ASSERT_EQ(got.prompt.size(), 2u);
  EXPECT_TRUE(got.prompt[1].top_logprobs.empty());
  EXPECT_EQ(got.prompt[1].token, 7);
}

}  // namespace
}  // namespace deepinfer::engine
