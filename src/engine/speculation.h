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

// Whether drafting pays, measured while serving (scheduled mode): the engine's output tokens per
// second with drafting and without it, in alternating phases, kept apart per load (the step's
// sequence count in powers of two: 1, 2-3, 4-7, ..., 128 and more, with hysteresis at the edges),
// since drafting that pays at one sequence can lose at thirty-two, where one verification pass
// costs many plain steps. Per
// load it runs the mode that measured faster for an exploit phase, then probes the other, and so
// on; each probe that confirms the mode doubles the next exploit phase (from `exploit_steps` up to
// 16 times that), so a settled choice costs little probing, and a probe that overturns it starts
// again from `exploit_steps`. A load seen for the first time starts plain where a neighbouring
// load measured plain faster (first_visit). A probe is `probe_steps` long, or shorter where its mode's steps are
// slower: at most about an eighth of the exploit phase's time (a drafting step at high load can
// cost 30 plain ones), 2 steps at least. The first step of each phase, and of each return to a
// load, is not counted (it still verifies, or has not yet drafted, for the mode before). Tokens/s
// is compared, not per-step cost: a step with drafts is slower but may make several tokens per
// sequence.
class SpeculationGovernor {
 public:
  SpeculationGovernor(int64_t exploit_steps = 64, int64_t probe_steps = 8);
  // The mode of the next step (the load's of the last step recorded).
  bool drafting() const { return drafting_; }
  // One finished step: its wall time (from the previous step's end), the tokens it produced and
  // the sequences it ran.
  void record(double seconds, int64_t tokens, int64_t sequences = 1);
  // The last measured rates at the last step's load (tokens/s; 0 until measured) and how often
  // the mode changed.
  double rate(bool with_drafting) const;
  int64_t switches() const { return switches_; }

 private:
  struct Load {
    int64_t exploit_now = 0;  // the next exploit phase's length
    bool drafting = true;
    bool probing = true;  // this phase measures the other mode
    int64_t steps_left = 0;
    bool skip_next = true;
    double seconds = 0;
    int64_t tokens = 0;
    int64_t counted = 0;
    double rate[2] = {0, 0};
    double step_seconds[2] = {0, 0};  // mean step time last measured per mode
    bool visited = false;
  };
  // A load's first step: when a neighbouring load has measured plain decoding faster than
  // drafting, this one starts by exploiting plain decoding (its first probe of drafting sized from
  // that load's step times) instead of probing drafting first: a load that ramps down through 64,
  // 32, 16 .. sequences then pays one short probe per load, not a full probe of the slower mode
  // each.
  void first_visit(int index);
  // The load a step of `sequences` counts at, given the load of the step before (`current`): it
  // stays there while the count is within a quarter past either edge of that load's range, so a
  // steady load that sits on a boundary (7 and 8 sequences in turn, as a closed loop of 8
  // clients has) keeps one decision instead of switching between two every few steps.
  static int load_of(int64_t sequences, int current);
  void advance(Load& load, double seconds, int64_t tokens);
  void change(Load& load, bool drafting, int64_t steps) const;
  int64_t probe_length(const Load& load, bool drafting) const;

  const int64_t exploit_steps_, probe_steps_;
  std::vector<Load> loads_;  // by load_of
  int last_load_ = 0;
  bool drafting_ = true;
  int64_t switches_ = 0;
};

// Target steps per second by step size, measured on `model` now: for each probe size (1, 2, 4 ..
// up to max_tokens), one forward pass over fresh sequences of draft_block + 1 rows each (a
// verification's shape) after a short context, as a greedy speculative step runs it (every row's
// taps; every row's token drawn on a backend that draws, else every row's logits to the host);
// the median of a few passes. What verifying one more draft token costs on this backend. With the
// model's drafter: its call for 1, 2, 4 .. sequences (up to max_tokens / (draft_block + 1)), the
// part of a speculative step that verifying more or fewer drafts does not change.
StepRateTable profile_step_rates(const model::Model& model, int64_t max_tokens, int64_t draft_block);

}  // namespace deepinfer::engine
