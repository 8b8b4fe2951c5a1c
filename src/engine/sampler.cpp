#include "engine/sampler.h"

#include <algorithm>
#include <bit>
#include <functional>
#include <cmath>

#include "core/error.h"
#include "engine/counter_rng.h"
#include "engine/sampling_math.h"

namespace deepinfer::engine {
namespace {

constexpr float kMinusInfinity = -std::numeric_limits<float>::infinity();

// Reused by every call on a thread: a fresh vocabulary-sized buffer per token would cost an
// mmap/munmap pair and a page fault per 4 KiB.
struct Scratch {
  std::vector<float> values;
  std::vector<float> raw;
  std::vector<uint64_t> keys;
};

Scratch& thread_scratch() {
  thread_local Scratch scratch;
  return scratch;
}

// A token's rank as one integer: weight first (a non-negative float's bits order like its value),
// then the lower id. Every key is distinct, so top-k and nucleus boundaries are exact and
// deterministic, and ranking needs no indirection through the weights array.
uint64_t rank_key(float weight, int32_t token) {
  return (static_cast<uint64_t>(std::bit_cast<uint32_t>(weight)) << 32) |
         (0xFFFFFFFFu - static_cast<uint32_t>(token));
}
float weight_of(uint64_t key) { return std::bit_cast<float>(static_cast<uint32_t>(key >> 32)); }
int32_t token_of(uint64_t key) { return static_cast<int32_t>(0xFFFFFFFFu - static_cast<uint32_t>(key)); }

void apply_penalties(std::span<float> logits, const SamplingParams& params,
                     const TokenHistory& history) {
  const float repetition = params.repetition_penalty;
  if (repetition != 1.0f) {
    // HF / vLLM: shrink toward zero and push negative logits further down, so a seen token always
    // loses probability whatever the sign of its logit.
    const auto penalize = [&](int32_t token) {
      float& logit = logits[static_cast<size_t>(token)];
      logit = logit > 0.0f ? logit / repetition : logit * repetition;
    };
    for (int32_t token : history.prompt_tokens_distinct()) penalize(token);
    for (const GeneratedTokenCount& seen : history.generated_counts())
      if (!seen.in_prompt) penalize(seen.token);
  }
  if (params.frequency_penalty != 0.0f || params.presence_penalty != 0.0f) {
    for (const GeneratedTokenCount& seen : history.generated_counts())
      logits[static_cast<size_t>(seen.token)] -=
          params.frequency_penalty * static_cast<float>(seen.count) + params.presence_penalty;
  }
}

void apply_logit_bias(std::span<float> logits, const SamplingParams& params) {
  for (const auto& [token, bias] : params.logit_bias) {
    if (token < 0 || static_cast<size_t>(token) >= logits.size())
      fail("sampler: logit_bias token id ", token, " is outside the vocabulary [0, ", logits.size(), ")");
    logits[static_cast<size_t>(token)] += bias;
  }
}

double weight_sum(std::span<const uint64_t> keys) {
  double total = 0.0;
  for (uint64_t key : keys) total += weight_of(key);
  return total;
}

// The nucleus of `keys` (unordered): the smallest set of best-ranked keys whose mass reaches
// `target`; a key stays when the mass ranked before it is < target. Moves it to the front and
// returns its size. A weighted quickselect, linear on average: a nucleus can hold most of a flat
// vocabulary, where sorting 10^5 entries would cost milliseconds.
size_t select_nucleus(std::span<uint64_t> keys, double target) {
  size_t kept = 0, end = keys.size();  // [0, kept) in the nucleus, [kept, end) undecided
  double kept_mass = 0.0;              // always < target
  // Median-of-three pivots can degrade on adversarial input; after this many rounds, sort.
  int rounds_left = 2 * static_cast<int>(std::bit_width(keys.size())) + 8;
  while (end - kept > 32 && rounds_left-- > 0) {
    const auto first = keys.begin() + static_cast<std::ptrdiff_t>(kept);
    const auto last = keys.begin() + static_cast<std::ptrdiff_t>(end);
    const uint64_t a = *first, b = first[(end - kept) / 2], c = *(last - 1);
    const uint64_t pivot = std::max(std::min(a, b), std::min(std::max(a, b), c));
    const auto above_end = std::partition(first, last, [pivot](uint64_t key) { return key > pivot; });
    const double above_mass = weight_sum({first, above_end});
    if (kept_mass + above_mass >= target) {
      end = static_cast<size_t>(above_end - keys.begin());
      continue;
    }
    std::iter_swap(above_end, std::find(above_end, last, pivot));
    kept = static_cast<size_t>(above_end - keys.begin()) + 1;
    kept_mass += above_mass + weight_of(pivot);
    if (kept_mass >= target) return kept;
  }
  std::sort(keys.begin() + static_cast<std::ptrdiff_t>(kept), keys.begin() + static_cast<std::ptrdiff_t>(end),
            std::greater<>());
  for (size_t j = kept; j < end; ++j) {
    if (kept_mass >= target) return j;
    kept_mass += weight_of(keys[j]);
  }
  return end;
}

// The top_k best-ranked keys among tokens with weight >= floor, through a min-heap: one compare
// per token for most of the vocabulary, where nth_element would move 10^5 keys around.
void select_top_k(std::span<const float> weights, size_t top_k, float floor, std::vector<uint64_t>& keys) {
  keys.clear();
  const std::greater<> min_heap;
  for (size_t token = 0; token < weights.size(); ++token) {
    if (!(weights[token] > 0.0f && weights[token] >= floor)) continue;
    const uint64_t key = rank_key(weights[token], static_cast<int32_t>(token));
    if (keys.size() < top_k) {
      keys.push_back(key);
      std::push_heap(keys.begin(), keys.end(), min_heap);
    } else if (key > keys.front()) {
      std::pop_heap(keys.begin(), keys.end(), min_heap);
      keys.back() = key;
      std::push_heap(keys.begin(), keys.end(), min_heap);
    }
  }
}

// `processed` (penalties and bias applied) is overwritten with the weights p_i / p_max, zero
// outside the truncated set: the distribution a sampled token is drawn from, unnormalised.
void truncated_weights(std::span<float> processed, float max_logit, std::vector<uint64_t>& keys,
                       const SamplingParams& params) {
  // Division by T, not multiplication by 1/T: with a tiny temperature 1/T overflows and 0 * inf
  // is NaN for the best token.
  exp_of_shifted_in_place(processed, max_logit, params.temperature);
  const std::span<float> weights = processed;

  // min_p compares p_i / p_max, which is the weight itself and is unchanged by top-k
  // renormalising, so min_p and top-k commute; both keep a prefix of the ranking, and top-p
  // applies last, to the distribution they leave (vLLM's order).
  const float floor = params.min_p;
  const bool truncate_k = params.top_k_enabled() && static_cast<size_t>(params.top_k) < weights.size();
  const bool truncate_p = params.top_p < 1.0f;
  if (!truncate_k && !truncate_p) {
    if (floor > 0.0f)
      for (float& weight : weights) weight = weight >= floor ? weight : 0.0f;
    return;
  }

  if (truncate_k) {
    select_top_k(weights, static_cast<size_t>(params.top_k), floor, keys);
  } else {
    for (float& weight : weights) weight = weight >= floor ? weight : 0.0f;
    // A token lighter than (1 - top_p) * total / count cannot be in the nucleus: even with all the
    // tokens ranked after it, it would carry less than the 1 - top_p that the nucleus leaves out.
    // Half that bound, for rounding.
    const double total = sum_of(weights);
    const auto cutoff = static_cast<float>(0.5 * (1.0 - params.top_p) * total / static_cast<double>(weights.size()));
    keys.clear();
    for (size_t token = 0; token < weights.size(); ++token)
      if (weights[token] > 0.0f && weights[token] >= cutoff)
        keys.push_back(rank_key(weights[token], static_cast<int32_t>(token)));
    keys.resize(select_nucleus(keys, static_cast<double>(params.top_p) * total));
  }
  if (truncate_k && truncate_p)
    keys.resize(select_nucleus(keys, static_cast<double>(params.top_p) * weight_sum(keys)));

  const uint64_t boundary = *std::min_element(keys.begin(), keys.end());
  const float boundary_weight = weight_of(boundary);
  const int32_t boundary_token = token_of(boundary);
  for (size_t token = 0; token < weights.size(); ++token) {
    const bool kept = weights[token] > boundary_weight ||
                      (weights[token] == boundary_weight && static_cast<int32_t>(token) <= boundary_token);
    weights[token] = kept ? weights[token] : 0.0f;
  }
}

// The processed row with its argmax (penalties and bias applied, NaN as -inf), in the thread's
// scratch; throws when no logit is finite.
std::span<float> processed_row(std::span<const float> logits, const SamplingParams& params,
                               const TokenHistory& history, int32_t& best) {
  if (logits.empty()) fail("sampler: the logits row is empty");
  Scratch& scratch = thread_scratch();
  scratch.raw.resize(logits.size());
  std::transform(logits.begin(), logits.end(), scratch.raw.begin(),
                 [](float logit) { return logit != logit ? kMinusInfinity : logit; });
  scratch.values.assign(scratch.raw.begin(), scratch.raw.end());
  apply_penalties_and_bias(scratch.values, params, history);
  best = argmax_lowest_index(scratch.values);
  const float max_logit = scratch.values[static_cast<size_t>(best)];
  if (!std::isfinite(max_logit))
    fail("sampler: the largest logit is ", max_logit, " (token ", best, "); sampling needs a finite maximum");
  return scratch.values;
}

// `raw` is the sanitized copy of the model's logits (NaN -> -inf); `scratch` a buffer of its size.
void fill_logprobs(std::span<const float> raw, std::span<float> scratch, int32_t alternatives,
                   SampleResult& result) {
  const float max_logit = max_of(raw);
  std::copy(raw.begin(), raw.end(), scratch.begin());
  exp_of_shifted_in_place(scratch, max_logit, 1.0f);
  const double log_normalizer = static_cast<double>(max_logit) + std::log(sum_of(scratch));
  const auto logprob = [&](int32_t token) {
    return static_cast<float>(raw[static_cast<size_t>(token)] - log_normalizer);
  };
  result.logprob = logprob(result.token);

  // A sorted buffer of at most 20 ids: almost every token fails the first comparison.
  const size_t wanted = std::min(static_cast<size_t>(alternatives), raw.size());
  std::vector<int32_t> best;
  best.reserve(wanted + 1);
  const auto before = [&](int32_t a, int32_t b) {
    return raw[static_cast<size_t>(a)] > raw[static_cast<size_t>(b)] ||
           (raw[static_cast<size_t>(a)] == raw[static_cast<size_t>(b)] && a < b);
  };
  for (size_t i = 0; i < raw.size() && wanted > 0; ++i) {
    const auto token = static_cast<int32_t>(i);
    if (best.size() == wanted && !before(token, best.back())) continue;
    best.insert(std::upper_bound(best.begin(), best.end(), token, before), token);
    if (best.size() > wanted) best.pop_back();
  }
  result.top_logprobs.clear();
  for (int32_t token : best) result.top_logprobs.push_back({token, logprob(token)});
}

}  // namespace

void apply_penalties_and_bias(std::span<float> logits, const SamplingParams& params,
                              const TokenHistory& history) {
  if (static_cast<size_t>(history.id_bound()) > logits.size())
    fail("sampler: the token history holds id ", history.id_bound() - 1,
         ", outside the vocabulary of ", logits.size(), " logits");
  apply_penalties(logits, params, history);
  apply_logit_bias(logits, params);
}

SampleResult score_token(std::span<const float> logits, int32_t token, int32_t alternatives) {
  if (logits.empty()) fail("sampler: the logits row is empty");
  if (token < 0 || static_cast<size_t>(token) >= logits.size())
    fail("sampler: token ", token, " is outside the vocabulary of ", logits.size(), " logits");
  Scratch& scratch = thread_scratch();
  scratch.raw.resize(logits.size());
  std::transform(logits.begin(), logits.end(), scratch.raw.begin(),
                 [](float logit) { return logit != logit ? kMinusInfinity : logit; });
  scratch.values.resize(logits.size());
  SampleResult result;
  result.token = token;
  fill_logprobs(scratch.raw, scratch.values, alternatives, result);
  return result;
}

SampleResult sample(std::span<const float> logits, const SamplingParams& params,
                    const TokenHistory& history, uint64_t seed, uint64_t request_id, int64_t position) {
  const CounterRng rng(seed, request_id, position);
  int32_t best = -1;
  const std::span<float> processed = processed_row(logits, params, history, best);
  Scratch& scratch = thread_scratch();
  SampleResult result;
  result.token = best;
  if (!params.greedy()) {
    truncated_weights(processed, processed[static_cast<size_t>(best)], scratch.keys, params);
    result.token = invert_cdf(processed, rng.uniform(0));
  }
  if (params.logprobs) fill_logprobs(scratch.raw, processed, *params.logprobs, result);
  return result;
}

void token_distribution(std::span<const float> logits, const SamplingParams& params, const TokenHistory& history,
                        std::vector<float>& out) {
  int32_t best = -1;
  const std::span<float> processed = processed_row(logits, params, history, best);
  out.assign(processed.size(), 0.0f);
  if (params.greedy()) {
    out[static_cast<size_t>(best)] = 1.0f;
    return;
  }
  truncated_weights(processed, processed[static_cast<size_t>(best)], thread_scratch().keys, params);
  const double total = sum_of(processed);
  for (size_t i = 0; i < processed.size(); ++i) out[i] = static_cast<float>(processed[i] / total);
}

}  // namespace deepinfer::engine
