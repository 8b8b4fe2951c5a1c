#pragma once
// Verification of one request's draft tokens against the target model (speculative decoding;
// ../shared/docs/dspark.md §3.4): how many of the drafts the target keeps, and the token it adds
// after them (the bonus, or the correction of the first rejected draft). Lossless by construction:
// greedy acceptance gives the target's greedy tokens, and sampled acceptance gives tokens
// distributed as the target's (standard speculative sampling: a draft x drawn from q is kept with
// probability min(1, p(x) / q(x)); on a rejection the token comes from the residual max(0, p - q),
// normalised).
//
// The uniforms come from the engine's counter-based generator (counter_rng.h), keyed by the
// request's seed and stream and by the position of the token they decide, with a draw index of
// their own per use (below): a seeded request verifies the same way alone or in any batch, and no
// uniform decides two things.
#include <cstdint>
#include <span>
#include <vector>

namespace deepinfer::engine {

// Draw indices at a position (counter_rng.h). kTokenDraw is the sampler's own: a token drawn from
// a distribution (the target's, the residual) at that position. The drafter draws its token at a
// position with kDraftDraw: were it kTokenDraw, a rejected draft and the residual draw that
// replaces it would share their uniform, and the replacement would lean away from the draft.
// (An exact replay, RequestSampling::exact_replay, draws its drafts with kTokenDraw on purpose:
// it keeps a draft only where the target's own draw is that token, and draws no residual.)
inline constexpr uint32_t kTokenDraw = 0;
inline constexpr uint32_t kAcceptDraw = 1;
inline constexpr uint32_t kDraftDraw = 2;

struct DraftVerdict {
  int32_t accepted = 0;  // drafts kept, in order from the first
  // The token after them: the target's choice where the first rejected draft stood, or after the
  // last draft when all were kept; -1 when a kept draft was a stop token (nothing follows it).
  int32_t bonus = -1;
};

// The uniforms of one request's verification: (seed, request_id) as the sampler takes them, and
// `first_position`, the position of the first draft token (the anchor's position + 1).
struct VerifyStream {
  uint64_t seed = 0;
  uint64_t request_id = 0;
  int64_t first_position = 0;
};

// Greedy verification. `target_rows[i]`: the target's processed logits (after penalties and bias:
// what the sampler's argmax reads) predicting the token after the i-th verified token, row 0 the
// one after the anchor; there is one row more than there are drafts. Draft i is kept while it is
// the row's argmax (ties to the lowest id, as the sampler breaks them). A kept draft that is one
// of `stop_tokens` ends the verdict there, with no bonus. Throws deepinfer::Error on a row count
// that is not drafts + 1, or rows of unequal width.
DraftVerdict accept_greedy(std::span<const std::span<const float>> target_rows, std::span<const int32_t> drafts,
                           std::span<const int32_t> stop_tokens);
// accept_greedy on the rows' argmax tokens, as a backend that draws greedily on the device gives
// them (one more than there are drafts). Throws deepinfer::Error on any other count.
DraftVerdict accept_greedy_tokens(std::span<const int32_t> target_tokens, std::span<const int32_t> drafts,
                                  std::span<const int32_t> stop_tokens);

// Sampled verification. `target[i]` and `draft[i]` are probability distributions over the
// vocabulary (non-negative, summing to 1 up to rounding): target[i] is the target's distribution
// after the request's transforms (temperature, truncation, penalties) at row i (drafts + 1 rows);
// draft[i] is the distribution draft i was drawn from (the drafter's, Markov-corrected, at the
// request's temperature), with draft[i][drafts[i]] > 0. Draft i is kept when
// u * draft[i][x] < target[i][x] (u uniform at its position, kAcceptDraw); at the first rejection
// the bonus is drawn (kTokenDraw at that position) from max(0, target[i] - draft[i]) normalised,
// or from target[i] where that residual has no mass; when every draft is kept, from target[drafts].
// Stop tokens as accept_greedy. Throws deepinfer::Error on mismatched sizes, or a draft token the
// draft distribution gives no probability.
DraftVerdict accept_sampled(std::span<const std::span<const float>> target, std::span<const std::span<const float>> draft,
                            std::span<const int32_t> drafts, std::span<const int32_t> stop_tokens,
                            const VerifyStream& stream);

}  // namespace deepinfer::engine
