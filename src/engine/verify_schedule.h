#pragma once
// Confidence-scheduled verification (DSpark; ../shared/docs/dspark.md §3.1-3.3): which of the
// drafted tokens a step sends to the target. Each draft position j of request r has a confidence
// c[r][j], the drafter's estimate that it survives given the ones before it survived; its
// cumulative survival a[r][j] = c[r][0] * ... * c[r][j] is the expected gain of verifying it.
//
// Two parts, as production engines split them so that the choice stays lossless:
//  - the budget K, the number of draft tokens to verify this step, from confidences of an earlier
//    step (no dependence on this step's draft tokens): the global argmax over n of
//    (R + the n largest survivals) * steps_per_second(R + n);
//  - the allocation, the K largest survivals of this step's confidences, ties to the lower
//    position then the lower request. A position is admitted only on values that do not depend
//    on its own token (other requests', and its own request's earlier positions: later ones never
//    rank above it), which is what keeps rejection sampling exact.
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace deepinfer::engine {

// What a speculative step costs. Target steps per second by the step's token count: a step
// function over probe counts, each probe's rate holding from its count up to the next probe's (a
// count below the first probe takes the first). And, optionally, the drafter's seconds per step by
// the number of sequences it drafts for, the same kind of step function: every speculative step
// drafts the next blocks whatever it verified, so that cost does not grow with the drafts verified,
// and leaving it out would price a verified row as a larger share of the step than it is.
// Empty: not profiled, and the budget verifies every draft.
class StepRateTable {
 public:
  StepRateTable() = default;
  // Probes by increasing count, each rate > 0, each draft time >= 0. Throws deepinfer::Error
  // otherwise.
  StepRateTable(std::vector<int64_t> tokens, std::vector<double> steps_per_second,
                std::vector<int64_t> draft_sequences = {}, std::vector<double> draft_seconds = {});
  bool empty() const { return tokens_.empty(); }
  double steps_per_second(int64_t tokens) const;  // the target's pass alone
  double draft_seconds(int64_t sequences) const;  // 0 when not profiled
  // A speculative step of `tokens` target rows over `sequences` sequences, drafting included.
  double speculative_steps_per_second(int64_t tokens, int64_t sequences) const;

 private:
  std::vector<int64_t> tokens_;
  std::vector<double> rates_;
  std::vector<int64_t> draft_sequences_;
  std::vector<double> draft_seconds_;
};

// Survivals below this are never verified (nor counted in the budget).
inline constexpr double kSurvivalFloor = 1e-6;

// The budget K for `requests` active requests. `lagged[r]`: request r's confidences from the step
// the budget reads (none: a request new since then, counted as certain to survive at every
// position, 1.0, as SGLang does); `draft_length`: the positions a request drafts. Returns the n in
// [0, candidates] that maximises (requests + sum of the n largest survivals) *
// speculative_steps_per_second(requests + n, requests), the first maximum on a tie; all candidates
// when the table is empty.
int64_t verify_budget(std::span<const std::optional<std::vector<float>>> lagged, int64_t draft_length,
                      const StepRateTable& table);

// Each request's verify length (1 + its drafts admitted: the anchor is always verified) for this
// step's confidences `confidences[r]` (draft_length each, in [0, 1]) and the budget. Throws
// deepinfer::Error on a row of another length, a confidence outside [0, 1] or NaN, or a negative
// budget.
std::vector<int32_t> allocate_verify_lengths(std::span<const std::vector<float>> confidences, int64_t draft_length,
                                             int64_t budget);

}  // namespace deepinfer::engine
