#include "engine/speculation.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <span>

#include "core/error.h"
#include "model/drafter.h"
#include "model/model.h"

namespace deepinfer::engine {

const char* speculative_mode_name(SpeculativeMode mode) {
  switch (mode) {
    case SpeculativeMode::off: return "off";
    case SpeculativeMode::static_blocks: return "static";
    case SpeculativeMode::scheduled: return "scheduled";
  }
  return "unknown";
}

std::optional<SpeculativeMode> parse_speculative_mode(std::string_view name) {
  if (name == "off") return SpeculativeMode::off;
  if (name == "static") return SpeculativeMode::static_blocks;
  if (name == "scheduled") return SpeculativeMode::scheduled;
  return std::nullopt;
}

namespace {
constexpr int kLoads = 9;  // 1, 2-3, 4-7, ..., 128 and more sequences
}  // namespace

SpeculationGovernor::SpeculationGovernor(int64_t exploit_steps, int64_t probe_steps)
    : exploit_steps_(exploit_steps), probe_steps_(probe_steps) {
  if (exploit_steps < 2 || probe_steps < 2) fail("speculation governor: phases of at least 2 steps");
  // Each load starts by measuring drafting, then the plain engine, then keeps the faster.
  loads_.resize(kLoads);
  for (Load& load : loads_) {
    load.exploit_now = exploit_steps_;
    load.steps_left = probe_steps_;
  }
}

int SpeculationGovernor::load_of(int64_t sequences, int current) {
  sequences = std::max<int64_t>(sequences, 1);
  const int64_t first = int64_t{1} << current;  // load `current` holds [first, 2 first - 1]
  const bool below = 4 * sequences < 3 * first;
  const bool above = current < kLoads - 1 && 4 * sequences > 5 * (2 * first - 1);
  if (!below && !above) return current;
  return std::min(static_cast<int>(std::bit_width(static_cast<uint64_t>(sequences))) - 1, kLoads - 1);
}

double SpeculationGovernor::rate(bool with_drafting) const {
  return loads_[static_cast<std::size_t>(last_load_)].rate[with_drafting ? 1 : 0];
}

void SpeculationGovernor::change(Load& load, bool drafting, int64_t steps) const {
  load.drafting = drafting;
  load.steps_left = steps;
  load.skip_next = true;
  load.seconds = 0;
  load.tokens = 0;
  load.counted = 0;
}

void SpeculationGovernor::first_visit(int index) {
  Load& load = loads_[static_cast<std::size_t>(index)];
  load.visited = true;
  for (const int neighbour : {index + 1, index - 1}) {
    if (neighbour < 0 || neighbour >= kLoads) continue;
    const Load& near = loads_[static_cast<std::size_t>(neighbour)];
    // Only a decision against drafting carries over: drafting's cost grows with the load, so a
    // neighbour's "drafting pays" says little of a higher load (exploiting it there for a whole
    // phase cost 30% at 32 clients on the H200), while starting plain risks no more than plain.
    if (near.rate[0] <= 0 || near.rate[1] <= 0 || near.rate[1] > near.rate[0]) continue;
    load.step_seconds[0] = near.step_seconds[0];
    load.step_seconds[1] = near.step_seconds[1];
    load.probing = false;
    change(load, /*drafting=*/false, exploit_steps_);
    return;
  }
}

int64_t SpeculationGovernor::probe_length(const Load& load, bool drafting) const {
  const double probe_step = load.step_seconds[drafting ? 1 : 0], exploit_step = load.step_seconds[drafting ? 0 : 1];
  if (probe_step <= 0 || exploit_step <= 0) return probe_steps_;
  const double balanced = static_cast<double>(load.exploit_now) * exploit_step / probe_step / 8.0;
  return std::clamp<int64_t>(static_cast<int64_t>(balanced), 2, probe_steps_);
}

void SpeculationGovernor::record(double seconds, int64_t tokens, int64_t sequences) {
  const int index = load_of(sequences, last_load_);
  Load& load = loads_[static_cast<std::size_t>(index)];
  if (!load.visited) first_visit(index);
  // A step at another load than the one before, or in another mode than this load's, says
  // nothing of this load's mode: the step after it is its first.
  if (index == last_load_ && drafting_ == load.drafting) advance(load, seconds, tokens);
  else load.skip_next = true;
  last_load_ = index;
  if (load.drafting != drafting_) ++switches_;
  drafting_ = load.drafting;
}

void SpeculationGovernor::advance(Load& load, double seconds, int64_t tokens) {
  if (load.skip_next) {
    load.skip_next = false;
  } else {
    load.seconds += seconds;
    load.tokens += tokens;
    ++load.counted;
  }
  if (--load.steps_left > 0) return;
  const int mode = load.drafting ? 1 : 0;
  if (load.seconds > 0) load.rate[mode] = static_cast<double>(load.tokens) / load.seconds;
  if (load.counted > 0) load.step_seconds[mode] = load.seconds / static_cast<double>(load.counted);
  if (load.probing && load.rate[1 - mode] == 0) {  // the other mode was never measured
    change(load, !load.drafting, probe_steps_);
    return;
  }
  const bool faster = load.rate[1] > load.rate[0];
  if (load.probing) {  // measured the other mode: keep the faster
    load.probing = false;
    const bool confirmed = faster != load.drafting;  // the probe lost: back to the mode before it
    load.exploit_now = confirmed ? std::min(load.exploit_now * 2, exploit_steps_ * 16) : exploit_steps_;
    change(load, faster, load.exploit_now);
  } else {  // an exploit phase ends: measure the other mode again
    load.probing = true;
    change(load, !load.drafting, probe_length(load, !load.drafting));
  }
}

namespace {

constexpr int64_t kProbeContext = 16;  // tokens each probe sequence holds before the timed pass

int32_t probe_token(int64_t i, int64_t vocab) { return static_cast<int32_t>((7 * i + 3) % vocab); }

// Seconds of one verification-shaped forward pass of `tokens` rows split into sequences of at most
// `rows_per_sequence`, as the engine runs a greedy speculative step: every row's taps for the
// drafter, and every row's token drawn where the logits are on a backend that draws
// (StepExecutor::compute_drawing), else every row's logits to the host.
double time_pass(const model::Model& model, int64_t tokens, int64_t rows_per_sequence) {
  const int64_t vocab = model.vocab_size();
  const int64_t tap_width = model.drafter() ? model.drafter()->tap_width() : 0;
  const bool drawing = model.backend().draws_tokens();
  std::vector<model::SequenceState> sequences;
  std::vector<std::vector<int32_t>> rows;
  for (int64_t left = tokens; left > 0; left -= rows_per_sequence) {
    sequences.push_back(model.new_sequence());
    std::vector<int32_t> context(kProbeContext);
    for (int64_t i = 0; i < kProbeContext; ++i) context[static_cast<std::size_t>(i)] = probe_token(i, vocab);
    model.forward(sequences.back(), context, {}, model::LogitRows::None);
    rows.emplace_back(static_cast<std::size_t>(std::min(left, rows_per_sequence)), 11 % static_cast<int32_t>(vocab));
  }
  std::vector<std::vector<float>> logits(rows.size()), taps(rows.size());
  std::vector<model::BatchItem> batch;
  std::vector<model::TokenDraw> draws;
  int64_t head_row = 0;
  for (std::size_t s = 0; s < rows.size(); ++s) {
    if (!drawing) logits[s].resize(rows[s].size() * static_cast<std::size_t>(vocab));
    taps[s].resize(rows[s].size() * static_cast<std::size_t>(tap_width));
    batch.push_back(model::BatchItem{&sequences[s], rows[s], logits[s], model::LogitRows::All, -1, taps[s]});
    for (std::size_t r = 0; r < rows[s].size(); ++r) {
      model::TokenDraw draw;
      draw.row = head_row++;
      draw.temperature = 0.0f;
      draw.position = kProbeContext + static_cast<int64_t>(r);
      draws.push_back(std::move(draw));
    }
  }
  std::vector<model::DrawnToken> drawn(draws.size());
  const auto start = std::chrono::steady_clock::now();
  if (drawing) model.forward_batch_draw(batch, draws, drawn);
  else model.forward_batch(batch);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Seconds of the drafter's call for `sequences` greedy blocks after a short context.
double time_draft(const model::Model& model, int64_t sequences) {
  const model::Drafter& drafter = *model.drafter();
  std::vector<model::DraftState> states;
  const std::vector<float> taps(static_cast<std::size_t>(kProbeContext * drafter.tap_width()), 0.0f);
  for (int64_t s = 0; s < sequences; ++s) {
    states.push_back(drafter.new_state());
    drafter.inject(states.back(), taps);
  }
  std::vector<model::DraftRequest> requests;
  for (int64_t s = 0; s < sequences; ++s) {
    model::DraftRequest request;
    request.state = &states[static_cast<std::size_t>(s)];
    request.anchor = probe_token(s, model.vocab_size());
    requests.push_back(std::move(request));
  }
  const auto start = std::chrono::steady_clock::now();
  drafter.draft(requests, model.backend());
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

template <class Timed>
double median_seconds(int repeats, const Timed& timed) {
  std::vector<double> seconds;
  for (int i = 0; i < repeats; ++i) seconds.push_back(timed());
  std::nth_element(seconds.begin(), seconds.begin() + static_cast<std::ptrdiff_t>(seconds.size() / 2), seconds.end());
  return seconds[seconds.size() / 2];
}

}  // namespace

StepRateTable profile_step_rates(const model::Model& model, int64_t max_tokens, int64_t draft_block) {
  if (max_tokens < 1 || draft_block < 1) fail("step profile: max_tokens and draft_block must be at least 1");
  std::vector<int64_t> probes;
  for (int64_t tokens = 1; tokens <= std::min<int64_t>(max_tokens, 256); tokens *= 2) probes.push_back(tokens);
  time_pass(model, 1, 1);  // warm-up: first-touch of weights, the backend's lazy set-up
  std::vector<double> rates;
  for (int64_t tokens : probes) {
    const int repeats = tokens <= 32 ? 3 : 1;  // large passes are long and steady enough alone
    rates.push_back(1.0 / std::max(median_seconds(repeats, [&] { return time_pass(model, tokens, draft_block + 1); }), 1e-9));
  }
  // A larger step is never faster: later probes' noise must not make the budget jump.
  for (std::size_t i = 1; i < rates.size(); ++i) rates[i] = std::min(rates[i], rates[i - 1]);
  // The drafter, for as many sequences as a step can verify blocks of.
  std::vector<int64_t> draft_probes;
  std::vector<double> draft_seconds;
  if (model.drafter()) {
    time_draft(model, 1);  // warm-up
    for (int64_t sequences = 1; sequences <= std::max<int64_t>(1, max_tokens / (draft_block + 1)) && sequences <= 256;
         sequences *= 2) {
      draft_probes.push_back(sequences);
      draft_seconds.push_back(median_seconds(sequences <= 32 ? 3 : 1, [&] { return time_draft(model, sequences); }));
    }
    for (std::size_t i = 1; i < draft_seconds.size(); ++i) draft_seconds[i] = std::max(draft_seconds[i], draft_seconds[i - 1]);
  }
  return StepRateTable(std::move(probes), std::move(rates), std::move(draft_probes), std::move(draft_seconds));
}

}  // namespace deepinfer::engine
