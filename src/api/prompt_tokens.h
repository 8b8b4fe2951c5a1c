#pragma once
// Rendered prompt -> token ids (recipe §1.8), and the raw prompt of the Completions API.
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/conversation.h"
#include "api/prompt_renderer.h"
#include "io/tokenizer/tokenizer.h"

namespace deepinfer::api {

class PromptEncoder {
 public:
  // Checks that the tokenizer holds every marker `format` uses as one added token with the id of
  // recipe §1.1 (V4 has no <｜System｜>); throws deepinfer::Error naming the marker otherwise.
  PromptEncoder(Tokenizer tokenizer, PromptFormat format);

  // Markers become their ids; the text between them is plain BPE (added tokens not recognised).
  std::vector<TokenId> encode(const RenderedPrompt& prompt) const;

  const Tokenizer& tokenizer() const { return tokenizer_; }

 private:
  Tokenizer tokenizer_;
  std::unordered_map<std::string, TokenId> marker_ids_;
};

// The Completions API's `prompt`: a string is BOS + its tokens with added tokens recognised (the
// client writes the template itself), with no second BOS when it already starts with one; an array
// of token ids is taken as is, after a range check. Anything else is a 400 ApiError.
std::vector<TokenId> encode_completion_prompt(const nlohmann::ordered_json& prompt,
                                              const Tokenizer& tokenizer);

}  // namespace deepinfer::api
