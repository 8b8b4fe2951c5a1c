#pragma once
// POST /v1/completions bodies (OpenAI's legacy Completions, with vLLM's extra sampling fields).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/request.h"
#include "io/tokenizer/tokenizer.h"

namespace deepinfer::server {

struct CompletionsRequest {
  std::vector<int32_t> prompt;
  std::string prompt_text;  // what echo shows: the prompt string, or the decoded ids
  api::GenerationOptions options;  // sampling.n and sampling.logprobs included
  bool echo = false;
  // max_tokens 0 with echo (lm-evaluation-harness's loglikelihood pattern): the engine generates
  // one token (options.max_tokens = 1), which the answer leaves out.
  bool echo_only = false;
};

// echo with logprobs also asks the engine for prompt log-probabilities (sampling.prompt_logprobs).
// Throws api::ApiError (400) naming the field for a missing, mistyped or out-of-range value.
CompletionsRequest parse_completions_request(const nlohmann::ordered_json& body, const Tokenizer& tokenizer);

}  // namespace deepinfer::server
