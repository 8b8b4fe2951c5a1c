#pragma once
// Jump-forward: the tokens of the bytes a grammar forces next, to append to the output without
// sampling them (the engine computes them in its next forward pass, as a short prefill).
//
// The tokens are the tokenizer's own encoding of the forced bytes taken alone, cut to the prefix
// the grammar accepts, and without a last token the model could have written differently: the
// bytes after a forced run are not known yet, so where the grammar allows, at the run's last
// token, a longer token that starts with that token's bytes (`":` where `": "` is allowed too),
// the last token is left to the sampler, which sees the whole choice. The token sampled before
// the run is never re-tokenized with it: it is the model's draw (with its log-probability and its
// place in the random stream), and the model continues from its own choice anyway.
// docs/STRUCTURED.md ("Jump-forward") has the reasons and what other engines do.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "grammar/matcher.h"

namespace deepinfer::grammar {

// The model tokenizer's encoding of a UTF-8 text (added tokens recognised, as the prompt
// encoder does, so markup comes out as the ids the model read it in).
using TextEncoder = std::function<std::vector<int32_t>(std::string_view)>;

// At most `max_tokens` tokens the grammar forces after the matcher's output, none of them in
// `stop_tokens` (a token that ends the request is left to the sampler). The matcher accepts the
// returned tokens (it stands after them); with none, it is unchanged. Forced bytes that end
// inside a UTF-8 character are cut before it (the tokenizer encodes text).
std::vector<int32_t> jump_forward(Matcher& matcher, const Vocabulary& vocabulary, const TextEncoder& encode,
                                  std::size_t max_tokens, std::span<const int32_t> stop_tokens = {});

// True when `vocabulary` has a token longer than `id`'s bytes that starts with them and `mask`
// allows (bit t of word t / 64).
bool allows_longer_token(const Vocabulary& vocabulary, int32_t id, std::span<const uint64_t> mask);

}  // namespace deepinfer::grammar
