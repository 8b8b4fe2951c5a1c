#include "engine/speculation.h"

#include <algorithm>
#include <chrono>
#include <span>

#include "core/error.h"
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

SpeculationGovernor::SpeculationGovernor(int64_t exploit_steps, int64_t probe_steps)
    : exploit_steps_(exploit_steps), probe_steps_(probe_steps), exploit_now_(exploit_steps) {
  if (exploit_steps < 2 || probe_steps < 2) fail("speculation governor: phases of at least 2 steps");
  // Start by measuring drafting, then the plain engine, then keep the faster.
  steps_left_ = probe_steps_;
}

void SpeculationGovernor::change(bool drafting, int64_t steps) {
  if (drafting != drafting_) ++switches_;
  drafting_ = drafting;
  steps_left_ = steps;
  skip_next_ = true;
  seconds_ = 0;
  tokens_ = 0;
  counted_ = 0;
}

int64_t SpeculationGovernor::probe_length(bool drafting) const {
  const double probe_step = step_seconds_[drafting ? 1 : 0], exploit_step = step_seconds_[drafting ? 0 : 1];
  if (probe_step <= 0 || exploit_step <= 0) return probe_steps_;
  const double balanced = static_cast<double>(exploit_now_) * exploit_step / probe_step / 8.0;
  return std::clamp<int64_t>(static_cast<int64_t>(balanced), 2, probe_steps_);
}

void SpeculationGovernor::record(double seconds, int64_t tokens) {
  if (skip_next_) {
    skip_next_ = false;
  } else {
    seconds_ += seconds;
    tokens_ += tokens;
    ++counted_;
  }
  if (--steps_left_ > 0) return;
  if (seconds_ > 0) rate_[drafting_ ? 1 : 0] = static_cast<double>(tokens_) / seconds_;
  if (counted_ > 0) step_seconds_[drafting_ ? 1 : 0] = seconds_ / static_cast<double>(counted_);
  if (probing_ && rate_[drafting_ ? 0 : 1] == 0) {  // the other mode was never measured
    change(!drafting_, probe_steps_);
    return;
  }
  const bool faster = rate_[1] > rate_[0];
  if (probing_) {  // measured the other mode: keep the faster
    probing_ = false;
    const bool confirmed = faster != drafting_;  // the probe lost: back to the mode before it
    exploit_now_ = confirmed ? std::min(exploit_now_ * 2, exploit_steps_ * 16) : exploit_steps_;
    change(faster, exploit_now_);
  } else {  // an exploit phase ends: measure the other mode again
    probing_ = true;
    change(!drafting_, probe_length(!drafting_));
  }
}

namespace {

constexpr int64_t kProbeContext = 16;  // tokens each probe sequence holds before the timed pass

// Seconds of one forward pass of `tokens` rows split into sequences of at most `rows_per_sequence`.
double time_pass(const model::Model& model, int64_t tokens, int64_t rows_per_sequence) {
  const int64_t vocab = model.vocab_size();
  std::vector<model::SequenceState> sequences;
  std::vector<std::vector<int32_t>> rows;
  for (int64_t left = tokens; left > 0; left -= rows_per_sequence) {
    sequences.push_back(model.new_sequence());
    std::vector<int32_t> context(kProbeContext);
    for (int64_t i = 0; i < kProbeContext; ++i) context[static_cast<std::size_t>(i)] = static_cast<int32_t>((7 * i + 3) % vocab);
    model.forward(sequences.back(), context, {}, model::LogitRows::None);
    rows.emplace_back(static_cast<std::size_t>(std::min(left, rows_per_sequence)), 11 % static_cast<int32_t>(vocab));
  }
  std::vector<std::vector<float>> logits(rows.size());
  std::vector<model::BatchItem> batch;
  for (std::size_t s = 0; s < rows.size(); ++s) {
    logits[s].resize(rows[s].size() * static_cast<std::size_t>(vocab));
    batch.push_back(model::BatchItem{&sequences[s], rows[s], logits[s], model::LogitRows::All});
  }
  const auto start = std::chrono::steady_clock::now();
  model.forward_batch(batch);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

StepRateTable profile_step_rates(const model::Model& model, int64_t max_tokens, int64_t draft_block) {
  if (max_tokens < 1 || draft_block < 1) fail("step profile: max_tokens and draft_block must be at least 1");
  std::vector<int64_t> probes;
  for (int64_t tokens = 1; tokens <= std::min<int64_t>(max_tokens, 256); tokens *= 2) probes.push_back(tokens);
  time_pass(model, 1, 1);  // warm-up: first-touch of weights, the backend's lazy set-up
  std::vector<double> rates;
  for (int64_t tokens : probes) {
    std::vector<double> seconds;
    const int repeats = tokens <= 32 ? 3 : 1;  // large passes are long and steady enough alone
    for (int i = 0; i < repeats; ++i) seconds.push_back(time_pass(model, tokens, draft_block + 1));
    std::nth_element(seconds.begin(), seconds.begin() + static_cast<std::ptrdiff_t>(seconds.size() / 2), seconds.end());
    rates.push_back(1.0 / std::max(seconds[seconds.size() / 2], 1e-9));
  }
  // A larger step is never faster: later probes' noise must not make the budget jump.
  for (std::size_t i = 1; i < rates.size(); ++i) rates[i] = std::min(rates[i], rates[i - 1]);
  return StepRateTable(std::move(probes), std::move(rates));
}

}  // namespace deepinfer::engine
