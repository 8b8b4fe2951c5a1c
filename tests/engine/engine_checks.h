#pragma once
// What the engine tests share besides the model: random prompts over the tiny vocabulary and a
// bit-for-bit comparison of generated (or scored) tokens.
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "engine/engine.h"

namespace deepinfer::engine::testing {

inline std::vector<int32_t> random_prompt(std::mt19937& rng, int64_t length) {
  std::uniform_int_distribution<int32_t> id(2, 511);
  std::vector<int32_t> out;
  for (int64_t i = 0; i < length; ++i) out.push_back(id(rng));
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

}  // namespace deepinfer::engine::testing
