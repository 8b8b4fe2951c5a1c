#pragma once
// Engram's compressed token map (transformers deepseek_v41 build_compressed_token_map): token ids
// that decode to the same normalised text share one compressed id, so " The", "the" and "THE"
// hash alike. Built from the tokenizer at load; every hash multiplier depends on its size.
#include <cstdint>
#include <vector>

#include "io/tokenizer/tokenizer.h"

namespace deepinfer::model {

struct CompressedTokenMap {
  std::vector<int32_t> compressed_ids;  // indexed by token id, [0, tokenizer.vocab_size())
  int64_t compressed_vocab_size = 0;    // distinct keys
};

// For every token id in order: decode it alone (special tokens kept); a text holding U+FFFD (a
// partial UTF-8 byte token) is keyed by the raw token string, any other by
// normalize_engram_key(text), or by the text itself when that normalises to nothing. An id the
// tokenizer has no token for (a hole in the added-token ids) decodes to "" as in the Hugging Face
// library. New keys get consecutive compressed ids.
CompressedTokenMap build_compressed_token_map(const Tokenizer& tokenizer);

}  // namespace deepinfer::model
