#pragma once
// What the engine tests share besides the model: random prompts over the tiny vocabulary, a
// choice's stream read to its end, a bit-for-bit comparison of generated (or scored) tokens, and
// the check that an idle engine holds no block.
#include <chrono>
#include <cstdint>
#include <algorithm>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/engine.h"

namespace deepinfer::engine::testing {

inline std::vector<int32_t> random_prompt(std::mt19937& rng, int64_t length) {
  std::uniform_int_distribution<int32_t> id(2, 511);
  std::vector<int32_t> out;
  for (int64_t i = 0; i < length; ++i) out.push_back(id(rng));
  return out;
}

// A one-choice stream read to its end.
struct Answer {
  std::vector<GeneratedToken> tokens;
  FinishReason finish = FinishReason::Error;
  std::string error;
  int64_t cached_tokens = 0;  // the most any event reported
};

inline Answer read_answer(RequestStream& stream) {
  Answer out;
  while (true) {
    std::optional<StreamEvent> event = stream.next(std::chrono::seconds(120));
    if (!event) throw std::runtime_error("no event within 120 s");
    for (GeneratedToken& token : event->tokens) out.tokens.push_back(std::move(token));
    out.cached_tokens = std::max(out.cached_tokens, event->cached_tokens);
    if (event->finish) {
      out.finish = *event->finish;
      out.error = event->error;
      return out;
    }
  }
}

// Every choice of a stream read to its end: answer c holds choice c's tokens (their events
// interleave with the other choices' in an order that depends on timing).
inline std::vector<Answer> read_choices(RequestStream& stream, int32_t choices) {
  std::vector<Answer> out(static_cast<std::size_t>(choices));
  int32_t open = choices;
  while (open > 0) {
    std::optional<StreamEvent> event = stream.next(std::chrono::seconds(120));
    if (!event) throw std::runtime_error("no event within 120 s");
    Answer& answer = out.at(static_cast<std::size_t>(event->choice));
    for (GeneratedToken& token : event->tokens) answer.tokens.push_back(std::move(token));
    answer.cached_tokens = std::max(answer.cached_tokens, event->cached_tokens);
    if (event->finish) {
      answer.finish = *event->finish;
      answer.error = event->error;
      --open;
    }
  }
  return out;
}

inline std::vector<int32_t> ids(const Answer& answer) {
  std::vector<int32_t> out;
  for (const GeneratedToken& token : answer.tokens) out.push_back(token.token);
  return out;
}

// Same token, and the same bits of its log-probability and of every alternative's.
inline bool same_bits(const GeneratedToken& a, const GeneratedToken& b) {
  if (a.token != b.token || std::memcmp(&a.logprob, &b.logprob, sizeof(float)) != 0) return false;
  if (a.top_logprobs.size() != b.top_logprobs.size()) return false;
  for (std::size_t k = 0; k < a.top_logprobs.size(); ++k)
    if (a.top_logprobs[k].token != b.top_logprobs[k].token ||
        std::memcmp(&a.top_logprobs[k].logprob, &b.top_logprobs[k].logprob, sizeof(float)) != 0)
      return false;
  return true;
}

inline bool same_bits(const std::vector<GeneratedToken>& a, const std::vector<GeneratedToken>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!same_bits(a[i], b[i])) return false;
  return true;
}

// After everything finished and the prefix cache is cleared, every block is free.
inline void expect_everything_returned(Engine& engine) {
  engine.clear_prefix_cache();
  const EngineStats stats = engine.stats();
  EXPECT_EQ(stats.running, 0);
  EXPECT_EQ(stats.waiting, 0);
  EXPECT_EQ(stats.in_use_blocks, 0);
  EXPECT_EQ(stats.snapshots, 0);
  EXPECT_EQ(stats.snapshot_blocks, 0);
  EXPECT_EQ(stats.running_tokens, 0);
  EXPECT_EQ(stats.running_state_blocks, 0);
  EXPECT_EQ(stats.cached_blocks, 0);
  EXPECT_EQ(stats.free_blocks, stats.total_blocks);
  if (stats.steps > 0) {
    EXPECT_GT(stats.compute_seconds, 0);
  }
}

}  // namespace deepinfer::engine::testing
