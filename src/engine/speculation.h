#pragma once
// Speculative decoding with the model's DSpark drafter (docs/ENGINE.md, "Speculative decoding"):
// the modes, the counters the engine publishes, and the step-cost table that confidence-scheduled
// verification reads (../shared/docs/dspark.md §3).
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "engine/verify_schedule.h"

namespace deepinfer::model {
class Model;
}

namespace deepinfer::engine {

// off: one token per sequence per step. static_blocks: every sequence verifies its whole draft
// block each step. scheduled: the step's verify budget comes from the drafts' confidences and the
// profiled step costs, and goes to the draft positions most likely to survive.
enum class SpeculativeMode { off, static_blocks, scheduled };

const char* speculative_mode_name(SpeculativeMode mode);  // "off", "static", "scheduled"
std::optional<SpeculativeMode> parse_speculative_mode(std::string_view name);

struct SpeculationCounters {
  int64_t rounds = 0;           // verifications with at least one draft
  int64_t draft_tokens = 0;     // draft tokens verified
  int64_t accepted_tokens = 0;  // of those, kept
  int64_t drafted_tokens = 0;   // draft tokens proposed (verified or not)
  int64_t rollbacks = 0;        // verifications that rejected a draft and rolled the state back
  // [k]: rounds that verified draft position k, and those that kept it.
  std::vector<int64_t> verified_by_position;
  std::vector<int64_t> accepted_by_position;
};

// Target steps per second by step size, measured on `model` now: for each probe size (1, 2, 4 ..
// up to max_tokens), one forward pass over fresh sequences of draft_block + 1 rows each (a
// verification's shape) after a short context, every row's logits computed; the median of a few
// passes. What verifying one more draft token costs on this backend.
StepRateTable profile_step_rates(const model::Model& model, int64_t max_tokens, int64_t draft_block);

}  // namespace deepinfer::engine
