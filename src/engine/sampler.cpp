#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "engine/counter_rng.h"

namespace deepinfer::engine {
namespace {

constexpr float kMinusInfinity = -std::numeric_limits<float>::infinity();

// Reused by every call on a thread: a fresh vocabulary-sized buffer per token would cost an
// mmap/munmap pair and a page fault per 4 KiB.
struct Scratch {
  std::vector<float> values;
  std::vector<int32_t> ids;
};

Scratch& thread_scratch() {
  thread_local Scratch scratch;
  return scratch;
}

// The one total order used for ranking: larger value first, then the lower id. It makes top-k,
// nucleus boundaries and greedy ties deterministic.
struct RanksBefore {
  const float* values;
  bool operator()(int32_t a, int32_t b) const {
    return values[a] > values[b] || (values[a] == values[b] && a < b);
  }
};

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

int32_t argmax_lowest_id(std::span<const float> values) {
  size_t best = 0;
  for (size_t i = 1; i < values.size(); ++i)
    if (values[i] > values[best]) best = i;
  return static_cast<int32_t>(best);
}

// Keeps the smallest prefix of `ids`, ranked by weight, whose mass reaches top_p of their total:
// a token stays when the mass ranked before it is < top_p * total. Sorts in growing chunks
// (nth_element, then sort of the chunk) because a nucleus is usually a few dozen tokens out of a
// vocabulary of 10^5.
void keep_nucleus(std::vector<int32_t>& ids, const float* weights, float top_p) {
  double total = 0.0;
  for (int32_t id : ids) total += weights[id];
  const double target = static_cast<double>(top_p) * total;
  const RanksBefore ranks_before{weights};
  double mass_before = 0.0;
  size_t sorted_end = 0, chunk = 64;
  while (sorted_end < ids.size()) {
    const size_t chunk_end = std::min(ids.size(), sorted_end + chunk);
    const auto first = ids.begin() + static_cast<std::ptrdiff_t>(sorted_end);
    const auto last = ids.begin() + static_cast<std::ptrdiff_t>(chunk_end);
    if (last != ids.end()) std::nth_element(first, last, ids.end(), ranks_before);
    std::sort(first, last, ranks_before);
    for (size_t j = sorted_end; j < chunk_end; ++j) {
      if (mass_before >= target) {
        ids.resize(j);
        return;
      }
      mass_before += weights[ids[j]];
    }
    sorted_end = chunk_end;
    chunk *= 4;
  }
}

// Inverse CDF over `ids` in ascending id order, the mass summed in double in that order, so the
// token for a given uniform depends on nothing but the weights.
template <typename IdRange>
int32_t invert_cdf(const IdRange& ids, const float* weights, double uniform) {
  double total = 0.0;
  for (int32_t id : ids) total += weights[id];
  const double target = uniform * total;
  double mass = 0.0;
  int32_t last_positive = -1;
  for (int32_t id : ids) {
    if (weights[id] <= 0.0f) continue;
    mass += weights[id];
    last_positive = id;
    if (mass > target) return id;
  }
  return last_positive;  // rounding left target at the very top of the mass
}

// `logits` (processed: penalties and bias applied) is overwritten with weights p_i / p_max.
int32_t draw_token(std::span<float> logits, float max_logit, std::vector<int32_t>& ids,
                   const SamplingParams& params, double uniform) {
  const size_t vocab = logits.size();
  const float temperature = params.temperature;
  // Division, not a reciprocal: with a tiny temperature 1/T overflows and 0 * inf is NaN.
  const auto weight = [&](float logit) { return std::exp((logit - max_logit) / temperature); };

  const bool truncate_k = params.top_k_enabled() && static_cast<size_t>(params.top_k) < vocab;
  const bool truncate_min_p = params.min_p > 0.0f;
  const bool truncate_p = params.top_p < 1.0f;
  float* weights = logits.data();

  if (!truncate_k && !truncate_min_p && !truncate_p) {
    for (float& value : logits) value = weight(value);
    ids.resize(vocab);
    std::iota(ids.begin(), ids.end(), 0);
    return invert_cdf(ids, weights, uniform);
  }

  ids.resize(vocab);
  std::iota(ids.begin(), ids.end(), 0);
  if (truncate_k) {
    // Ranked by logit: the temperature is monotonic, so this is the top-k of the probabilities.
    const auto kth = ids.begin() + params.top_k;
    std::nth_element(ids.begin(), kth, ids.end(), RanksBefore{logits.data()});
    ids.resize(static_cast<size_t>(params.top_k));
    std::sort(ids.begin(), ids.end());
    for (int32_t id : ids) weights[id] = weight(logits[static_cast<size_t>(id)]);
  } else {
    for (float& value : logits) value = weight(value);
  }
  // min_p compares p_i / p_max, which is the weight itself and unchanged by top-k renormalising,
  // so min_p and top-k commute; both keep a prefix of the ranking, and top-p applies last.
  if (truncate_min_p)
    std::erase_if(ids, [&](int32_t id) { return weights[id] < params.min_p; });
  if (truncate_p) {
    keep_nucleus(ids, weights, params.top_p);
    std::sort(ids.begin(), ids.end());
  }
  return invert_cdf(ids, weights, uniform);
}

void fill_logprobs(std::span<const float> raw_logits, int32_t alternatives, SampleResult& result) {
  float max_logit = kMinusInfinity;
  for (float logit : raw_logits)
    if (logit > max_logit) max_logit = logit;
  double sum = 0.0;
  for (float logit : raw_logits)
    if (!std::isnan(logit)) sum += std::exp(static_cast<double>(logit - max_logit));
  const double log_normalizer = static_cast<double>(max_logit) + std::log(sum);
  const auto logprob = [&](float logit) {
    return std::isnan(logit) ? kMinusInfinity : static_cast<float>(logit - log_normalizer);
  };
  result.logprob = logprob(raw_logits[static_cast<size_t>(result.token)]);

  // A sorted buffer of at most 20 entries beats a partial sort of the whole vocabulary.
  const size_t wanted = std::min(static_cast<size_t>(alternatives), raw_logits.size());
  std::vector<int32_t> best;
  best.reserve(wanted + 1);
  const auto before = [&](int32_t a, int32_t b) {
    const float la = std::isnan(raw_logits[a]) ? kMinusInfinity : raw_logits[a];
    const float lb = std::isnan(raw_logits[b]) ? kMinusInfinity : raw_logits[b];
    return la > lb || (la == lb && a < b);
  };
  for (size_t i = 0; i < raw_logits.size() && wanted > 0; ++i) {
    const auto id = static_cast<int32_t>(i);
    if (best.size() == wanted && !before(id, best.back())) continue;
    best.insert(std::upper_bound(best.begin(), best.end(), id, before), id);
    if (best.size() > wanted) best.pop_back();
  }
  result.top_logprobs.clear();
  for (int32_t id : best) result.top_logprobs.push_back({id, logprob(raw_logits[static_cast<size_t>(id)])});
}

}  // namespace

SampleResult sample(std::span<const float> logits, const SamplingParams& params,
                    const TokenHistory& history, uint64_t seed, uint64_t request_id, int64_t position) {
  if (logits.empty()) fail("sampler: the logits row is empty");
  if (static_cast<size_t>(history.id_bound()) > logits.size())
    fail("sampler: the token history holds id ", history.id_bound() - 1,
         ", outside the vocabulary of ", logits.size(), " logits");
  const CounterRng rng(seed, request_id, position);

  Scratch& scratch = thread_scratch();
  std::vector<float>& processed = scratch.values;
  processed.resize(logits.size());
  std::transform(logits.begin(), logits.end(), processed.begin(),
                 [](float logit) { return std::isnan(logit) ? kMinusInfinity : logit; });
  apply_penalties(processed, params, history);
  apply_logit_bias(processed, params);

  SampleResult result;
  const int32_t best = argmax_lowest_id(processed);
  const float max_logit = processed[static_cast<size_t>(best)];
  if (!std::isfinite(max_logit))
    fail("sampler: the largest logit is ", max_logit, " (token ", best,
         "); sampling needs a finite maximum");
  result.token = params.greedy() ? best
                                 : draw_token(processed, max_logit, scratch.ids, params, rng.uniform(0));
  if (params.logprobs) fill_logprobs(logits, *params.logprobs, result);
  return result;
}

}  // namespace deepinfer::engine
