// The engine end to end on the tiny V4 fixture: concurrent requests give the tokens and
// log-probabilities of solo runs, whatever the batch, the chunking, preemption or the prefix
// cache; cancellation and completion give every block back.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <thread>

#include "core/error.h"
#include "engine/engine.h"
#include "model/model.h"
#include "engine_checks.h"
#include "tiny_model.h"

namespace deepinfer::engine {
namespace {

using Tokens = std::vector<int32_t>;

using testing::expect_everything_returned;
using testing::random_prompt;
using testing::same_bits;
using testing::tiny_v4;

using Output = testing::Answer;
using testing::ids;

// Reads a one-choice stream to its end; an Error ends the test.
Output collect(RequestStream& stream) {
  Output out = testing::read_answer(stream);
  if (out.finish == FinishReason::Error) throw std::runtime_error(out.error);
  return out;
}

GenerationRequest greedy(Tokens prompt, int64_t max_tokens) {
  GenerationRequest request;
  request.prompt = std::move(prompt);
  request.sampling.temperature = 0;
  request.sampling.logprobs = 5;
  request.max_tokens = max_tokens;
  return request;
}

// Greedy decoding straight on the model, one sequence, no engine.
Tokens solo_greedy(const Tokens& prompt, int64_t max_tokens) {
  const model::Model& model = tiny_v4();
  model::SequenceState sequence = model.new_sequence();
  std::vector<float> logits(static_cast<std::size_t>(model.vocab_size()));
  Tokens out;
  model.forward(sequence, prompt, logits, model::LogitRows::Last);
  for (int64_t step = 0; step < max_tokens; ++step) {
    const int32_t next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.push_back(next);
    if (step + 1 < max_tokens) model.forward(sequence, std::span(&next, 1), logits, model::LogitRows::Last);
  }
  return out;
}

using testing::small_options;

TEST(EngineTest, ConcurrentRequestsGiveTheSoloGreedyTokens) {
  std::mt19937 rng(7);
  Engine engine(tiny_v4(), small_options());
  std::vector<Tokens> prompts;
  std::vector<int64_t> lengths;
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int r = 0; r < 12; ++r) {
    prompts.push_back(random_prompt(rng, std::uniform_int_distribution<int64_t>(1, 40)(rng)));
    lengths.push_back(std::uniform_int_distribution<int64_t>(1, 12)(rng));
    GenerationRequest request = greedy(prompts.back(), lengths.back());
    streams.push_back(engine.submit(request));
  }
  for (std::size_t r = 0; r < streams.size(); ++r) {
    const Output output = collect(*streams[r]);
    EXPECT_EQ(output.finish, FinishReason::Length);
    EXPECT_EQ(ids(output), solo_greedy(prompts[r], lengths[r])) << "request " << r;
    EXPECT_TRUE(streams[r]->done());
  }
  expect_everything_returned(engine);
}

// The same request alone and inside 200 random mixes of other requests, arrival times, token
// budgets and block sizes: its tokens and log-probabilities (which depend on every logit
// through the softmax) are bit-identical.
TEST(EngineTest, BatchInvarianceOverRandomMixes) {
  std::mt19937 rng(11);
  std::vector<GenerationRequest> pool;
  for (int r = 0; r < 6; ++r) {
    GenerationRequest request = greedy(random_prompt(rng, std::uniform_int_distribution<int64_t>(1, 20)(rng)),
                                       std::uniform_int_distribution<int64_t>(1, 5)(rng));
    if (r % 2 == 1) {  // seeded sampling is batch invariant too
      request.sampling.temperature = 0.9f;
      request.sampling.top_p = 0.95f;
      request.sampling.seed = 1000 + r;
    }
    pool.push_back(request);
  }
  std::vector<Output> solo;
  {
    Engine engine(tiny_v4(), small_options());
    for (const GenerationRequest& request : pool) solo.push_back(collect(*engine.submit(request)));
  }
  for (int mix = 0; mix < 200; ++mix) {
    EngineOptions options = small_options();
    options.cache_memory_bytes = 4 << 20;  // an engine per mix: keep its arena small
    options.max_batch_tokens = std::uniform_int_distribution<int64_t>(4, 48)(rng);
    options.block_tokens = std::uniform_int_distribution<int64_t>(0, 1)(rng) ? 4 : 8;
    Engine engine(tiny_v4(), options);
    std::vector<std::pair<std::size_t, std::shared_ptr<RequestStream>>> running;
    const int count = std::uniform_int_distribution<int>(2, 5)(rng);
    for (int i = 0; i < count; ++i) {
      const std::size_t pick = std::uniform_int_distribution<std::size_t>(0, pool.size() - 1)(rng);
      running.emplace_back(pick, engine.submit(pool[pick]));
      if (std::bernoulli_distribution(0.3)(rng)) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    for (auto& [pick, stream] : running) {
      const Output output = collect(*stream);
      ASSERT_TRUE(same_bits(output.tokens, solo[pick].tokens)) << "mix " << mix << ", request " << pick;
    }
  }
}

// A budget of a few blocks forces preemption (recompute); results do not change and no block leaks.
TEST(EngineTest, PreemptionUnderATinyBudgetKeepsTheTokens) {
  const model::Model& model = tiny_v4();
  EngineOptions options = small_options();
  options.block_tokens = 4;
  const model::CacheLayout layout = model.cache_layout(options.block_tokens);
  // Room for about two running sequences of 40 tokens.
  options.cache_memory_bytes = layout.block_bytes * 48 + 2 * model.max_snapshot_bytes(4);
  std::mt19937 rng(3);
  Engine engine(model, options);
  std::vector<Tokens> prompts;
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int r = 0; r < 8; ++r) {
    prompts.push_back(random_prompt(rng, 24));
    streams.push_back(engine.submit(greedy(prompts.back(), 12)));
  }
  for (std::size_t r = 0; r < streams.size(); ++r)
    EXPECT_EQ(ids(collect(*streams[r])), solo_greedy(prompts[r], 12)) << "request " << r;
  EXPECT_GT(engine.stats().preemptions, 0);
  expect_everything_returned(engine);
}

// A request whose prompt extends a finished one is served from the prefix cache and gives the
// same tokens and log-probabilities as with the cache off.
TEST(EngineTest, PrefixCacheHitsEqualRecomputation) {
  std::mt19937 rng(5);
  const Tokens first = random_prompt(rng, 30);
  Tokens second = first;
  const Tokens tail = random_prompt(rng, 9);
  second.insert(second.end(), tail.begin(), tail.end());

  EngineOptions off = small_options();
  off.prefix_caching = false;
  Output want;
  {
    Engine engine(tiny_v4(), off);
    want = collect(*engine.submit(greedy(second, 6)));
    EXPECT_EQ(want.cached_tokens, 0);
  }
  Engine engine(tiny_v4(), small_options());
  (void)collect(*engine.submit(greedy(first, 10)));
  const Output got = collect(*engine.submit(greedy(second, 6)));
  EXPECT_GE(got.cached_tokens, 24);  // the first request's full blocks of 8 up to its snapshot
  EXPECT_TRUE(same_bits(got.tokens, want.tokens));
  const EngineStats stats = engine.stats();
  EXPECT_EQ(stats.prefix_hit_tokens, got.cached_tokens);
  EXPECT_EQ(stats.prefix_queried_tokens, static_cast<int64_t>(first.size() + second.size()));
  expect_everything_returned(engine);
}

// A shared system prompt followed by different questions: the second request snapshots where it
// leaves the first (the shared blocks had no snapshot), and the later ones resume there; every
// answer equals the one computed without a cache, bit for bit.
TEST(EngineTest, ASharedSystemPromptIsResumedFromWhereThePromptsDiverge) {
  std::mt19937 rng(8);
  const Tokens system = random_prompt(rng, 43);  // 5 whole blocks of 8, then 3 tokens
  std::vector<Tokens> prompts;
  for (int i = 0; i < 4; ++i) {
    Tokens prompt = system;
    const Tokens question = random_prompt(rng, 12 + i);
    prompt.insert(prompt.end(), question.begin(), question.end());
    prompts.push_back(prompt);
  }
  EngineOptions off = small_options();
  off.prefix_caching = false;
  std::vector<Output> want;
  {
    Engine engine(tiny_v4(), off);
    for (const Tokens& prompt : prompts) want.push_back(collect(*engine.submit(greedy(prompt, 5))));
  }
  Engine engine(tiny_v4(), small_options());
  std::vector<int64_t> cached;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    const Output got = collect(*engine.submit(greedy(prompts[i], 5)));
    EXPECT_TRUE(same_bits(got.tokens, want[i].tokens)) << "prompt " << i;
    cached.push_back(got.cached_tokens);
  }
  EXPECT_EQ(cached, (std::vector<int64_t>{0, 0, 40, 40}));
  expect_everything_returned(engine);
}

TEST(EngineTest, CancellationAtAnyPointReturnsEveryBlock) {
  std::mt19937 rng(9);
  Engine engine(tiny_v4(), small_options());
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int r = 0; r < 10; ++r) {
    GenerationRequest request = greedy(random_prompt(rng, 40), 200);
    request.sampling.n = 1 + r % 3;
    streams.push_back(engine.submit(request));
  }
  // Cancel some at once (waiting), some after their first tokens (decoding), one never.
  engine.cancel(streams[0]->id());
  (void)streams[1]->next();
  engine.cancel(streams[1]->id());
  for (std::size_t r = 2; r < streams.size(); ++r) engine.cancel(streams[r]->id());
  for (auto& stream : streams) {
    int32_t finished = 0;
    while (finished < stream->choices()) {
      const std::optional<StreamEvent> event = stream->next(std::chrono::seconds(60));
      ASSERT_TRUE(event.has_value());
      if (event->finish) {
        EXPECT_NE(*event->finish, FinishReason::Error) << event->error;
        ++finished;
      }
    }
  }
  expect_everything_returned(engine);
}

TEST(EngineTest, NChoicesShareThePromptAndSeededSamplingRepeats) {
  std::mt19937 rng(13);
  GenerationRequest request = greedy(random_prompt(rng, 19), 8);
  request.sampling.temperature = 1.0f;
  request.sampling.n = 3;
  request.sampling.seed = 77;
  auto run = [&] {
    Engine engine(tiny_v4(), small_options());
    std::shared_ptr<RequestStream> stream = engine.submit(request);
    EXPECT_EQ(stream->seed(), 77u);
    std::vector<std::vector<GeneratedToken>> choices(3);
    for (int32_t finished = 0; finished < 3;) {
      std::optional<StreamEvent> event = stream->next(std::chrono::seconds(60));
      if (!event) throw std::runtime_error("timeout");
      for (GeneratedToken& token : event->tokens) choices[event->choice].push_back(token);
      if (event->finish) ++finished;
    }
    expect_everything_returned(engine);
    return choices;
  };
  const auto first = run();
  const auto second = run();
  for (int c = 0; c < 3; ++c) {
    EXPECT_EQ(first[c].size(), 8u);
    EXPECT_TRUE(same_bits(first[c], second[c])) << "choice " << c;
  }
  // Independent streams: the choices are not all the same sequence.
  EXPECT_FALSE(same_bits(first[0], first[1]) && same_bits(first[1], first[2]));
}

TEST(EngineTest, StopTokensAndBadRequests) {
  Engine engine(tiny_v4(), small_options());
  std::mt19937 rng(17);
  const Tokens prompt = random_prompt(rng, 12);
  const Tokens reference = solo_greedy(prompt, 6);
  GenerationRequest request = greedy(prompt, 6);
  request.eos_token_ids = {reference[2]};
  const Output output = collect(*engine.submit(request));
  EXPECT_EQ(output.finish, FinishReason::Stop);
  // Stops at the first occurrence of the stop id, which is delivered.
  const auto first_stop = std::find(reference.begin(), reference.end(), reference[2]) - reference.begin();
  EXPECT_EQ(ids(output), Tokens(reference.begin(), reference.begin() + first_stop + 1));

  EXPECT_THROW(engine.submit(greedy({}, 4)), Error);
  EXPECT_THROW(engine.submit(greedy({1, 600}, 4)), Error);
  EXPECT_THROW(engine.submit(greedy({1, 2}, 0)), Error);
  GenerationRequest bad = greedy({1, 2}, 4);
  bad.sampling.top_p = 2;
  EXPECT_THROW(engine.submit(bad), Error);
  // A request that can never fit the cache ends with an error event, the engine carries on.
  GenerationRequest huge = greedy(Tokens(1 << 20, 3), 1);
  const std::shared_ptr<RequestStream> stream = engine.submit(huge);
  const std::optional<StreamEvent> event = stream->next(std::chrono::seconds(60));
  ASSERT_TRUE(event && event->finish);
  EXPECT_EQ(*event->finish, FinishReason::Error);
  EXPECT_NE(event->error.find("cache"), std::string::npos) << event->error;
  EXPECT_EQ(ids(collect(*engine.submit(greedy(prompt, 6)))), reference);
}

}  // namespace
}  // namespace deepinfer::engine
