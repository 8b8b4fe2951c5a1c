#include "engine/draft_acceptance.h"

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "engine/counter_rng.h"
#include "engine/sampling_math.h"

namespace deepinfer::engine {
namespace {

bool is_stop(int32_t token, std::span<const int32_t> stop_tokens) {
  return std::find(stop_tokens.begin(), stop_tokens.end(), token) != stop_tokens.end();
}

// Rows drafts + 1, each as wide as the first; every draft id inside them.
void check_shapes(const char* what, std::span<const std::span<const float>> rows, std::span<const int32_t> drafts) {
  if (rows.size() != drafts.size() + 1)
    fail(what, ": ", rows.size(), " target rows for ", drafts.size(), " drafts (one row more than drafts)");
  const std::size_t vocab = rows.front().size();
  if (vocab == 0) fail(what, ": empty rows");
  for (const std::span<const float>& row : rows)
    if (row.size() != vocab) fail(what, ": rows of ", vocab, " and ", row.size(), " entries");
  for (const int32_t token : drafts)
    if (token < 0 || static_cast<std::size_t>(token) >= vocab)
      fail(what, ": draft token ", token, " is outside the vocabulary of ", vocab);
}

}  // namespace

DraftVerdict accept_greedy_tokens(std::span<const int32_t> target_tokens, std::span<const int32_t> drafts,
                                  std::span<const int32_t> stop_tokens) {
  if (target_tokens.size() != drafts.size() + 1)
    fail("accept_greedy: ", target_tokens.size(), " target tokens for ", drafts.size(), " drafts (one more than drafts)");
  DraftVerdict verdict;
  for (std::size_t i = 0; i < drafts.size(); ++i) {
    if (drafts[i] != target_tokens[i]) break;
    ++verdict.accepted;
    if (is_stop(drafts[i], stop_tokens)) return verdict;  // nothing follows a stop token
  }
  verdict.bonus = target_tokens[static_cast<std::size_t>(verdict.accepted)];
  return verdict;
}

DraftVerdict accept_greedy(std::span<const std::span<const float>> target_rows, std::span<const int32_t> drafts,
                           std::span<const int32_t> stop_tokens) {
  check_shapes("accept_greedy", target_rows, drafts);
  std::vector<int32_t> target_tokens;
  for (const std::span<const float>& row : target_rows) target_tokens.push_back(argmax_lowest_index(row));
  return accept_greedy_tokens(target_tokens, drafts, stop_tokens);
}

DraftVerdict accept_sampled(std::span<const std::span<const float>> target, std::span<const std::span<const float>> draft,
                            std::span<const int32_t> drafts, std::span<const int32_t> stop_tokens,
                            const VerifyStream& stream) {
  check_shapes("accept_sampled", target, drafts);
  if (draft.size() != drafts.size()) fail("accept_sampled: ", draft.size(), " draft rows for ", drafts.size(), " drafts");
  const std::size_t vocab = target.front().size();
  DraftVerdict verdict;
  for (std::size_t i = 0; i < drafts.size(); ++i) {
    if (draft[i].size() != vocab) fail("accept_sampled: a draft row of ", draft[i].size(), " entries for ", vocab);
    const auto x = static_cast<std::size_t>(drafts[i]);
    const double q = draft[i][x], p = target[i][x];
    if (!(q > 0.0)) fail("accept_sampled: draft ", i, " (token ", drafts[i], ") has draft probability ", q);
    const int64_t position = stream.first_position + static_cast<int64_t>(i);
    const double u = CounterRng(stream.seed, stream.request_id, position).uniform(kAcceptDraw);
    if (u * q < p) {
      ++verdict.accepted;
      if (is_stop(drafts[i], stop_tokens)) return verdict;
      continue;
    }
    // Rejected: the token here comes from what the target gives beyond the draft.
    std::vector<float> residual(vocab);
    for (std::size_t t = 0; t < vocab; ++t) residual[t] = std::max(0.0f, target[i][t] - draft[i][t]);
    const double uniform = CounterRng(stream.seed, stream.request_id, position).uniform(kTokenDraw);
    verdict.bonus = sum_of(residual) > 0.0 ? invert_cdf(residual, uniform) : invert_cdf(target[i], uniform);
    return verdict;
  }
  const int64_t position = stream.first_position + static_cast<int64_t>(drafts.size());
  verdict.bonus = invert_cdf(target[drafts.size()], CounterRng(stream.seed, stream.request_id, position).uniform(kTokenDraw));
  return verdict;
}

}  // namespace deepinfer::engine
