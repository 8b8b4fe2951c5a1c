#pragma once
// What the mask tests share: the DeepSeek-V4.1 vocabulary as the matcher sees it (built once),
// and a random token a mask allows.
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "grammar/matcher.h"
#include "grammar/tokenizer_vocabulary.h"
#include "io/tokenizer/tokenizer.h"

namespace deepinfer::grammar::testing {

inline const std::shared_ptr<const Vocabulary>& deepseek_vocabulary() {
  static const std::shared_ptr<const Vocabulary> vocabulary = vocabulary_for(
      Tokenizer::from_file(std::string(DEEPINFER_ASSET_DIR) + "/tokenizer/deepseek_v41_tokenizer.json"));
  return vocabulary;
}

// A token the mask allows, drawn uniformly (-1 when none is).
inline int32_t draw(const std::vector<uint64_t>& mask, std::mt19937& rng) {
  std::vector<int32_t> allowed;
  for (std::size_t w = 0; w < mask.size(); ++w)
    for (uint64_t bits = mask[w]; bits; bits &= bits - 1)
      allowed.push_back(static_cast<int32_t>(w * 64 + static_cast<std::size_t>(__builtin_ctzll(bits))));
  if (allowed.empty()) return -1;
  return allowed[std::uniform_int_distribution<std::size_t>(0, allowed.size() - 1)(rng)];
}

}  // namespace deepinfer::grammar::testing
