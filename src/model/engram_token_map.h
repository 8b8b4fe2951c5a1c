#pragma once
// Engram's compressed token map (transformers deepseek_v41 build_compressed_token_map): token ids
// that decode to the same normalised text share one compressed id, so " The", "the" and "THE"
// hash alike. Built from the tokenizer at load; every hash multiplier depends on its size.
#include <cstdint>
#include <vector>

#include "io/tokenizer/tokenizer.h"

namespace deepinfer::model {

// A token id with no token (a hole in a tokenizer's added-token ids): hashed as DEAD, like a pad.
inline constexpr int32_t kNoCompressedId = -1;

struct CompressedTokenMap {
  std::vector<int32_t> compressed_ids;  // indexed by token id, [0, tokenizer.vocab_size()); kNoCompressedId for holes
  int64_t compressed_vocab_size = 0;    // distinct keys
};

// For every token id in order: decode it alone (special tokens kept); a text holding U+FFFD (a
// partial UTF-8 byte token) is keyed by the raw token string, any other by
// normalize_engram_key(text), or by the text itself when that normalises to nothing. New keys get
// consecutive compressed ids; ids the tokenizer has no token for take none.
CompressedTokenMap build_compressed_token_map(const Tokenizer& tokenizer);

}  // namespace deepinfer::model
