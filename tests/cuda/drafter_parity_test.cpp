// The DSpark drafter on the CUDA backend against the CPU backend (tiny_dspark fixture): the
// target's taps of a prompt, the drafter's context built from them, and a draft block (Markov-
// corrected logits within 1e-3, the same greedy tokens, confidences within 1e-3), the greedy draft
// head on the device against the path that keeps the logits; a batched draft gives each request
// what it gets alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "gpu_fixtures.h"
#include "model/drafter.h"

namespace deepinfer {
namespace {

using gpu_testing::fixture_pair;

constexpr float kDraftParityTolerance = 1e-3f;

float worst_difference(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float worst = 0;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    const float diff = std::abs(a[i] - b[i]);
    if (!(diff <= worst)) worst = std::isnan(diff) ? INFINITY : diff;
  }
  return worst;
}

struct DraftRun {
  std::vector<float> taps;
  int32_t anchor = -1;
  model::DraftBlock block;
  model::DraftState state;
};

DraftRun draft_after_prompt(const model::Model& target, const std::vector<int32_t>& prompt) {
  const model::Drafter& drafter = *target.drafter();
  DraftRun run;
  model::SequenceState sequence = target.new_sequence();
  std::vector<float> logits(prompt.size() * static_cast<std::size_t>(target.vocab_size()));
  run.taps.resize(prompt.size() * static_cast<std::size_t>(drafter.tap_width()));
  const model::BatchItem item{.sequence = &sequence, .tokens = prompt, .logits = logits,
                              .rows = model::LogitRows::All, .taps = run.taps};
  target.forward_batch(std::span(&item, 1));
  const float* last = logits.data() + (prompt.size() - 1) * static_cast<std::size_t>(target.vocab_size());
  run.anchor = static_cast<int32_t>(std::max_element(last, last + target.vocab_size()) - last);
  run.state = drafter.new_state();
  drafter.inject(run.state, run.taps);
  const model::DraftRequest request{&run.state, run.anchor, {}, true};
  run.block = drafter.draft(std::span(&request, 1), target.backend()).at(0);
  return run;
}

TEST(DrafterOnCuda, MatchesTheCpu) {
  DEEPINFER_REQUIRE_GPU();
  const auto& pair = fixture_pair("v41/tiny_dspark");
  ASSERT_NE(pair.gpu->drafter(), nullptr);
  std::vector<int32_t> prompt;
  for (int i = 0; i < 21; ++i) prompt.push_back(static_cast<int32_t>(6 + (i * 97) % 500));  // past the window of 8
  const DraftRun cpu = draft_after_prompt(*pair.cpu, prompt);
  DraftRun gpu = draft_after_prompt(*pair.gpu, prompt);
  EXPECT_LT(worst_difference(cpu.taps, gpu.taps), kDraftParityTolerance);
  EXPECT_EQ(cpu.anchor, gpu.anchor);
  EXPECT_LT(worst_difference(cpu.block.base_logits, gpu.block.base_logits), kDraftParityTolerance);
  EXPECT_LT(worst_difference(cpu.block.logits, gpu.block.logits), kDraftParityTolerance);
  EXPECT_EQ(cpu.block.tokens, gpu.block.tokens);
  EXPECT_LT(worst_difference(cpu.block.confidence, gpu.block.confidence), kDraftParityTolerance);

  // The greedy draft head (the Markov loop on the device when the logits are not kept): the
  // tokens and confidences of the path that keeps them.
  const model::DraftRequest greedy_request{&gpu.state, gpu.anchor, {}, false};
  const model::DraftBlock greedy = pair.gpu->drafter()->draft(std::span(&greedy_request, 1), pair.gpu->backend()).at(0);
  EXPECT_EQ(greedy.tokens, gpu.block.tokens);
  EXPECT_LT(worst_difference(greedy.confidence_raw, gpu.block.confidence_raw), kDraftParityTolerance);
  EXPECT_TRUE(greedy.logits.empty());

  // Two requests in one draft pass on the device, each as alone.
  const model::Drafter& drafter = *pair.gpu->drafter();
  model::DraftState other = drafter.new_state();
  drafter.inject(other, std::span(gpu.taps).first(9 * static_cast<std::size_t>(drafter.tap_width())));
  const model::DraftRequest alone{&other, 11, {}, true};
  const model::DraftBlock other_alone = drafter.draft(std::span(&alone, 1), pair.gpu->backend()).at(0);
  const std::vector<model::DraftRequest> both{{&other, 11, {}, true}, {&gpu.state, gpu.anchor, {}, true}};
  const std::vector<model::DraftBlock> batched = drafter.draft(both, pair.gpu->backend());
  EXPECT_EQ(batched.at(0).tokens, other_alone.tokens);
  EXPECT_EQ(batched.at(1).tokens, gpu.block.tokens);
  EXPECT_LT(worst_difference(batched.at(1).logits, gpu.block.logits), kDraftParityTolerance);
  const std::vector<model::DraftRequest> both_greedy{{&other, 11, {}, false}, {&gpu.state, gpu.anchor, {}, false}};
  const std::vector<model::DraftBlock> batched_greedy = drafter.draft(both_greedy, pair.gpu->backend());
  EXPECT_EQ(batched_greedy.at(0).tokens, other_alone.tokens);
  EXPECT_EQ(batched_greedy.at(1).tokens, gpu.block.tokens);
  EXPECT_EQ(batched_greedy.at(1).confidence_raw, greedy.confidence_raw);
}

}  // namespace
}  // namespace deepinfer
