#pragma once
// Picks the next token of one sequence from its logits row. Pure: the result depends only on the
// arguments, so batching, call order and threads cannot change a request's tokens.
// docs/ENGINE.md ("Sampling") describes the pipeline and every choice made here.
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "engine/sampling_params.h"
#include "engine/token_history.h"

namespace deepinfer::engine {

struct TokenLogprob {
  int32_t token;
  float logprob;
};

struct SampleResult {
  int32_t token = -1;
  // Log-probabilities of the raw model distribution (log_softmax of the logits as given: before
  // penalties, bias, temperature and truncation; vLLM's default raw_logprobs). Only filled when
  // params.logprobs is set: `logprob` of the sampled token and `top_logprobs`, the
  // min(*params.logprobs, vocab) most likely tokens, best first, ties to the lower id.
  float logprob = std::numeric_limits<float>::quiet_NaN();
  std::vector<TokenLogprob> top_logprobs;
};

// The logit processing that precedes truncation and the draw, in place: the repetition penalty
// (over prompt + generated ids), then frequency and presence penalties (over generated ids), then
// logit_bias. Exposed so the engine can report processed log-probabilities and tests can check
// the arithmetic. Throws deepinfer::Error when a history or bias id is outside `logits`.
void apply_penalties_and_bias(std::span<float> logits, const SamplingParams& params,
                              const TokenHistory& history);

// `logits`: the model's row for this position, one float per vocabulary id (NaN counts as -inf).
// `history`: the sequence so far (prompt + generated), for the penalties.
// The random draw is keyed by (seed, request_id, position) only; see counter_rng.h:
//   seed       the request's seed (user-given, or engine-drawn and reported);
//   request_id the stream within that seed: the engine passes the choice index (0 .. n-1) so that
//              a seeded request replays identically on any run and any server;
//   position   the index in the sequence of the token being sampled (prompt length + generated).
// Stop tokens are not handled here: the engine compares the returned token with stop_token_ids.
// Throws deepinfer::Error when the logits are empty, a token id in the history or logit_bias is
// outside the vocabulary, or no token has a finite logit.
SampleResult sample(std::span<const float> logits, const SamplingParams& params,
                    const TokenHistory& history, uint64_t seed, uint64_t request_id, int64_t position);

// The distribution sample() draws from for these arguments, normalised, into `out` (one
// probability per id): penalties and bias, temperature, min_p / top-k / top-p truncation; for
// greedy parameters all mass on the argmax. Speculative decoding verifies against it (and draws
// drafts from it). Throws as sample() does.
void token_distribution(std::span<const float> logits, const SamplingParams& params, const TokenHistory& history,
                        std::vector<float>& out);

// The raw log-probability of `token` under `logits` and the `alternatives` most likely tokens, as
// sample() reports them for a sampled token (same arithmetic, bit for bit): used to score prompt
// tokens. Throws deepinfer::Error when the logits are empty or `token` is outside them.
SampleResult score_token(std::span<const float> logits, int32_t token, int32_t alternatives);

}  // namespace deepinfer::engine
