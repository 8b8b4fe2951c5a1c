#pragma once
// Training rendering: a Chat Completions conversation whose LAST message is the assistant answer,
// rendered as history, with the index where the answer's ids begin. Shared by `deepinfer render
// --train` (training data, tools/train/) and `deepinfer perplexity` (its evaluation), so both
// score exactly the tokens the server's prompt makes the model generate.
#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/prompt_renderer.h"
#include "api/prompt_tokens.h"

namespace deepinfer::api {

struct TrainingRender {
  std::string text;                // the whole conversation, ending with the answer's end-of-sentence
  std::vector<TokenId> ids;        // its ids; ids[:answer_start] is exactly the served prompt
  OutputStart output_start;        // where the served prompt makes the model's output begin
  std::size_t answer_start = 0;    // index of the answer's first id (the first target)
};

// `body` is a Chat Completions request body (one without "model" is given one). The request
// without its last message must be one the server accepts, and that prompt's ids must be a
// strict prefix of the whole conversation's (otherwise, e.g. a required tool_choice, whose prompt
// ends inside the calls block, the answer cannot be scored after it). Throws deepinfer::Error
// with messages starting with `where` (e.g. "file line 3").
TrainingRender render_training(const PromptEncoder& encoder, PromptFormat format, const nlohmann::ordered_json& body,
                               const std::string& where);

}  // namespace deepinfer::api
