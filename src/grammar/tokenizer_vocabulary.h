#pragma once
// The matcher's view of a tokenizer: every id's bytes, its control tokens (never grammar text)
// and its end of sequence.
#include <memory>

#include "grammar/matcher.h"
#include "io/tokenizer/tokenizer.h"

namespace deepinfer::grammar {

// Built once per tokenizer (the trie over 129,280 tokens takes tens of milliseconds) and shared by
// every matcher. `eos`: the id that ends the output (the tokenizer's own when absent).
std::shared_ptr<const Vocabulary> vocabulary_for(const Tokenizer& tokenizer, std::optional<int32_t> eos = {});

}  // namespace deepinfer::grammar
