#pragma once
// The token sampler on the device: for each row of a logits batch, the token (and raw
// log-probabilities) that engine::sample (src/engine/sampler.h) returns for the same logits,
// parameters, history, seed, request id and position. Plain C++ over device pointers, launched on
// the given stream, never synchronising; engine-independent (kernels sit below the engine), so
// the caller flattens SamplingParams and TokenHistory into the structs below.
//
// What is identical to the CPU by construction and what only up to rounding: see sampler.cu.
// In short: penalties, bias, argmax, the weights exp((l - max) / T), min-p, top-k, the draw
// (inverse CDF), the Philox uniform and the logprob arithmetic are bit for bit; a top-p boundary
// can differ only where a partial mass of the ranking lands within rounding (~1e-16 relative) of
// its target, and a logprob only where CUDA's log(double) and glibc's differ by an ulp and that
// ulp crosses a float rounding boundary.
#include <cstddef>
#include <cstdint>

struct CUstream_st;

namespace deepinfer::kernels::cuda {

using Stream = CUstream_st*;

constexpr int32_t kSampleMaxLogprobs = 20;  // engine::kMaxLogprobs

// One row's sampling parameters (engine::SamplingParams plus the random stream's key).
struct SampleRowParams {
  float temperature = 1.0f;  // 0 = greedy
  float top_p = 1.0f;        // (0, 1]; 1 = off
  float min_p = 0.0f;        // [0, 1]; 0 = off
  int32_t top_k = 0;         // >= 1 keeps the k best; 0 or -1 = off
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  float repetition_penalty = 1.0f;
  uint64_t seed = 0;
  uint64_t request_id = 0;
  int64_t position = 0;      // must lie in [0, 2^32) (error 3 otherwise)
  int32_t logprobs = -1;     // -1: none; k in [0, 20]: the sampled token's and k alternatives
  // Half-open ranges into the arrays passed to sample_rows:
  int32_t prompt_begin = 0, prompt_end = 0;        // prompt_tokens: distinct ids, ascending
  int32_t generated_begin = 0, generated_end = 0;  // generated: distinct ids, first-seen order
  int32_t bias_begin = 0, bias_end = 0;            // bias: distinct ids (std::map order)
  // A structured-output mask: row mask_row of the masks passed to sample_rows ((vocab + 63) / 64
  // words; bit i % 64 of word i / 64 allows token i). Forbidden tokens' logits are -inf for every
  // step of the draw and the logprobs. When no allowed token has a non-NaN logit, the result is
  // mask_fallback_token (the grammar's EOS) with logprob 0 and no alternatives, as the engine's
  // host path answers. -1: no mask.
  int32_t mask_row = -1;
  int32_t mask_fallback_token = -1;
};

// TokenHistory::generated_counts() entry.
struct GeneratedCount {
  int32_t token;
  int32_t count;
  int32_t in_prompt;  // nonzero when token is also among the row's prompt tokens
};

struct LogitBias {
  int32_t token;
  float bias;
};

enum SampleRowError : int32_t {
  kSampleOk = 0,
  kSampleNoFiniteMaximum = 1,  // the largest processed logit is not finite (e.g. all -inf)
  kSampleIdOutsideVocabulary = 2,  // a history or logit_bias id is outside [0, vocab)
  kSamplePositionOutOfRange = 3,   // position outside [0, 2^32): it cannot key the random stream
};

struct SampleRowResult {
  int32_t token;     // -1 on error
  int32_t error;     // SampleRowError; where the CPU would throw, the first reason it would give
  float logprob;     // NaN when logprobs < 0 or on error
  int32_t top_count; // min(logprobs, vocab) alternatives, best first, ties to the lower id
  int32_t top_tokens[kSampleMaxLogprobs];
  float top_logprobs[kSampleMaxLogprobs];
};

// Device scratch sample_rows needs for `rows` rows of `vocab` logits (about 5 bytes per logit).
std::size_t sample_scratch_bytes(int64_t rows, int64_t vocab);

// results[r] = engine::sample(logits[r, :], params[r], history of params[r], params[r].seed,
// params[r].request_id, params[r].position), errors reported in results[r].error instead of
// thrown. masks: the rows' structured-output masks (SampleRowParams::mask_row; null when no row
// has one). Every pointer is device memory; `scratch` holds at least sample_scratch_bytes(rows,
// vocab) bytes, 16-byte aligned. vocab in [1, 2^31); rows >= 0 (0 launches nothing). Raises
// deepinfer::Error on bad sizes or a failed launch.
void sample_rows(const float* logits, int64_t rows, int64_t vocab, const SampleRowParams* params,
                 const int32_t* prompt_tokens, const GeneratedCount* generated, const LogitBias* bias,
                 const uint64_t* masks, void* scratch, std::size_t scratch_bytes, SampleRowResult* results,
                 Stream stream);

// out[i] = results[i].token for i < count: the drawn ids where a pass chained on this one reads
// them (resolve_token_ids) without a trip through the host.
void store_drawn_tokens(const SampleRowResult* results, int64_t count, int32_t* out, Stream stream);

}  // namespace deepinfer::kernels::cuda
