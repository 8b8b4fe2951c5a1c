#pragma once
// Per-request sampling parameters with OpenAI / vLLM semantics. The API layer fills them from a
// request body and calls validate() before scheduling; the sampler assumes they are valid.
// docs/ENGINE.md ("Sampling") gives the order in which they apply.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "grammar/jump_forward.h"
#include "grammar/matcher.h"

namespace deepinfer::engine {

// Structured output: every token of the answer must keep it inside a grammar (grammar/).
struct OutputConstraint {
  std::shared_ptr<const grammar::CompiledGrammar> grammar;
  std::shared_ptr<const grammar::Vocabulary> vocabulary;  // the model tokenizer's, EOS included
  // The grammar applies after this token has been generated (thinking: </think>, so reasoning
  // is free and the answer constrained); -1: from the first generated token.
  int32_t after_token = -1;
  // The tokenizer's encoding of text, for jump-forward (grammar/jump_forward.h): the bytes the
  // grammar forces are appended as these tokens without sampling. Empty: every token is sampled.
  grammar::TextEncoder encode;
};

struct SamplingParams {
  float temperature = 1.0f;        // >= 0; 0 = greedy (argmax, ties to the lowest id)
  float top_p = 1.0f;              // (0, 1]; 1 = off
  int32_t top_k = 0;               // >= 1 keeps the k best; 0 or -1 = off (vLLM accepts both)
  float min_p = 0.0f;              // [0, 1]; keeps tokens with p >= min_p * p_max; 0 = off
  float presence_penalty = 0.0f;   // [-2, 2] (OpenAI); over generated tokens
  float frequency_penalty = 0.0f;  // [-2, 2] (OpenAI); over generated tokens
  float repetition_penalty = 1.0f; // > 0 (vLLM / HF); over prompt + generated tokens; 1 = off
  std::map<int32_t, float> logit_bias;   // token id -> added to its logit, [-100, 100]
  std::vector<int32_t> stop_token_ids;   // checked by the engine after each token, not the sampler
  std::optional<uint64_t> seed;          // none: the engine draws one and reports it
  std::optional<int32_t> logprobs;       // none: no log-probabilities; k in [0, 20]: the sampled
                                         // token's plus k top alternatives
  std::optional<int32_t> prompt_logprobs;  // none: off; k in [0, 20]: every prompt token after the
                                           // first gets its raw log-probability plus k top
                                           // alternatives (vLLM's prompt_logprobs); the request
                                           // then skips the prefix cache match
  int32_t n = 1;                         // completions per prompt, >= 1
  std::optional<OutputConstraint> constraint;  // none: free output

  bool greedy() const { return temperature == 0.0f; }
  bool top_k_enabled() const { return top_k > 0; }
};

constexpr int32_t kMaxLogprobs = 20;

// Throws deepinfer::Error naming the first invalid field and its allowed range. Token ids
// (logit_bias keys, stop_token_ids) must lie in [0, vocab_size).
void validate(const SamplingParams& params, int64_t vocab_size);

}  // namespace deepinfer::engine
