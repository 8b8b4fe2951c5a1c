#include "model/draft_head.h"

#include <limits>
#include <vector>

#include "core/error.h"
#include "model/ops.h"

namespace deepinfer::model {

void markov_logits(const DraftHeadWeights& weights, int32_t previous, std::span<const float> base,
                   std::span<float> embedding, std::span<float> logits) {
  const kernels::WeightMatrix& w1 = *weights.markov_w1;
  const kernels::WeightMatrix& w2 = *weights.markov_w2;
  if (std::cmp_not_equal(embedding.size(), w1.cols) || std::cmp_not_equal(logits.size(), w2.rows) ||
      base.size() != logits.size())
    fail("draft head: buffers of ", embedding.size(), " / ", base.size(), " / ", logits.size(),
         " floats for a Markov head of rank ", w1.cols, " over ", w2.rows, " tokens");
  if (previous < 0 || previous >= w1.rows) fail("draft head: token ", previous, " outside the Markov table of ", w1.rows);
  kernels::decode_row(w1, previous, embedding.data());
  kernels::linear(embedding.data(), 1, w2, logits.data());
  for (std::size_t v = 0; v < logits.size(); ++v) logits[v] += base[v];
}

float raw_confidence(const DraftHeadWeights& weights, std::span<const float> collapsed, std::span<const float> embedding) {
  if (weights.confidence.size() != collapsed.size() + embedding.size())
    fail("draft head: a confidence head of ", weights.confidence.size(), " weights for ", collapsed.size(), " + ",
         embedding.size(), " features");
  const auto hidden = static_cast<int64_t>(collapsed.size());
  return dot(weights.confidence.data(), collapsed.data(), hidden) +
         dot(weights.confidence.data() + hidden, embedding.data(), static_cast<int64_t>(embedding.size()));
}

int32_t greedy_draft_token(std::span<const float> logits) {
  int32_t best = 0;
  float best_value = -std::numeric_limits<float>::infinity();
  bool found = false;
  for (std::size_t v = 0; v < logits.size(); ++v)
    if (logits[v] > best_value || (!found && logits[v] == best_value)) {  // NaN compares false
      best = static_cast<int32_t>(v);
      best_value = logits[v];
      found = true;
    }
  return best;
}

void ForwardPass::greedy_draft_head(const DraftHeadWeights& weights, std::span<const int32_t> anchors, int64_t gamma,
                                    std::span<int32_t> tokens, std::span<float> confidence_raw) {
  const auto blocks = static_cast<int64_t>(anchors.size());
  const int64_t rows = blocks * gamma;
  if (std::cmp_not_equal(tokens.size(), rows) || std::cmp_not_equal(confidence_raw.size(), rows))
    fail("draft head: ", tokens.size(), " tokens and ", confidence_raw.size(), " confidences for ", rows, " rows");
  const int64_t vocab = weights.markov_w2->rows;
  const auto hidden = static_cast<int64_t>(weights.confidence.size()) - weights.markov_w1->cols;
  std::vector<int64_t> all_rows(static_cast<std::size_t>(rows));
  for (int64_t t = 0; t < rows; ++t) all_rows[static_cast<std::size_t>(t)] = t;
  std::vector<float> collapsed(static_cast<std::size_t>(rows * hidden));
  collapse_head(weights.head, all_rows, collapsed.data());
  std::vector<float> base(static_cast<std::size_t>(rows * vocab));
  head(weights.head, all_rows, base.data(), nullptr);
  std::vector<float> embedding(static_cast<std::size_t>(weights.markov_w1->cols));
  std::vector<float> logits(static_cast<std::size_t>(vocab));
  for (int64_t r = 0; r < blocks; ++r) {
    int32_t previous = anchors[static_cast<std::size_t>(r)];
    for (int64_t k = 0; k < gamma; ++k) {
      const auto row = static_cast<std::size_t>(r * gamma + k);
      markov_logits(weights, previous, std::span<const float>(base).subspan(row * vocab, vocab), embedding, logits);
      confidence_raw[row] = raw_confidence(
          weights, std::span<const float>(collapsed).subspan(row * hidden, static_cast<std::size_t>(hidden)), embedding);
      previous = greedy_draft_token(logits);
      tokens[row] = previous;
    }
  }
}

}  // namespace deepinfer::model
