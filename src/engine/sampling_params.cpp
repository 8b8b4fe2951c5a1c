#include "engine/sampling_params.h"

#include <cmath>

#include "core/error.h"

namespace deepinfer::engine {
namespace {

// Written as !(in range) so that NaN fails every check.
void require(bool in_range, const char* field, double value, const char* allowed) {
  if (!in_range) fail("sampling parameter ", field, " = ", value, ": must be ", allowed);
}

void require_token(int32_t token, int64_t vocab_size, const char* field) {
  if (token < 0 || token >= vocab_size)
    fail("sampling parameter ", field, ": token id ", token, " is outside the vocabulary [0, ",
         vocab_size, ")");
}

}  // namespace

void validate(const SamplingParams& params, int64_t vocab_size) {
  require(params.temperature >= 0.0f && std::isfinite(params.temperature), "temperature",
          params.temperature, "finite and >= 0 (0 means greedy)");
  require(params.top_p > 0.0f && params.top_p <= 1.0f, "top_p", params.top_p, "in (0, 1]");
  require(params.top_k >= -1, "top_k", params.top_k, ">= 1, or 0 or -1 to disable");
  require(params.min_p >= 0.0f && params.min_p <= 1.0f, "min_p", params.min_p, "in [0, 1]");
  require(params.presence_penalty >= -2.0f && params.presence_penalty <= 2.0f, "presence_penalty",
          params.presence_penalty, "in [-2, 2]");
  require(params.frequency_penalty >= -2.0f && params.frequency_penalty <= 2.0f,
          "frequency_penalty", params.frequency_penalty, "in [-2, 2]");
  require(params.repetition_penalty > 0.0f && std::isfinite(params.repetition_penalty),
          "repetition_penalty", params.repetition_penalty, "finite and > 0 (1 means off)");
  for (const auto& [token, bias] : params.logit_bias) {
    require_token(token, vocab_size, "logit_bias");
    if (!(bias >= -100.0f && bias <= 100.0f))
      fail("sampling parameter logit_bias: bias ", bias, " for token ", token,
           " must be in [-100, 100]");
  }
  for (int32_t token : params.stop_token_ids) require_token(token, vocab_size, "stop_token_ids");
  if (params.logprobs)
    require(*params.logprobs >= 0 && *params.logprobs <= kMaxLogprobs, "logprobs", *params.logprobs,
            "in [0, 20]");
  if (params.prompt_logprobs)
    require(*params.prompt_logprobs >= 0 && *params.prompt_logprobs <= kMaxLogprobs, "prompt_logprobs",
            *params.prompt_logprobs, "in [0, 20]");
  require(params.n >= 1, "n", params.n, ">= 1");
}

}  // namespace deepinfer::engine
