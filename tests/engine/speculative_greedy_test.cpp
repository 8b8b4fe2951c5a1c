// Greedy speculative decoding with the DSpark drafter is lossless: draft a block, verify the
// anchor and the drafts in one target forward, keep what accept_greedy keeps, roll the target's
// state back where drafts were rejected (the snapshot taken before the verify, then the kept
// tokens replayed), extend the drafter's context with the kept positions' taps. The output must
// be the target's plain greedy output token for token. The fixture's drafter has random weights,
// so a draft is nearly always rejected at once; a pick that copies the target's own greedy tokens
// for the first j positions of each block (j = 0 .. gamma, in turn) makes every acceptance length
// happen, including the whole block.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "engine/draft_acceptance.h"
#include "model/drafter.h"
#include "model/golden.h"
#include "model/model.h"

namespace deepinfer::engine {
namespace {

using model::BatchItem;
using model::LogitRows;

int32_t speculative_test_argmax(const float* row, int64_t width) {
  return static_cast<int32_t>(std::max_element(row, row + width) - row);
}

std::vector<int32_t> plain_greedy(const model::Model& target, const std::vector<int32_t>& prompt, int64_t steps) {
  const int64_t vocab = target.vocab_size();
  model::SequenceState sequence = target.new_sequence();
  std::vector<float> logits(static_cast<std::size_t>(vocab));
  target.forward(sequence, prompt, logits, LogitRows::Last);
  std::vector<int32_t> out;
  while (static_cast<int64_t>(out.size()) < steps) {
    out.push_back(speculative_test_argmax(logits.data(), vocab));
    target.forward(sequence, std::span(&out.back(), 1), logits, LogitRows::Last);
  }
  return out;
}

struct SpeculativeRun {
  std::vector<int32_t> tokens;
  std::vector<int64_t> accepted_per_round;
};

// `oracle` (may be empty): the target's greedy continuation; round r copies it for the first
// r % (gamma + 1) drafts and then writes a wrong token.
SpeculativeRun speculative_greedy(const model::Model& target, const std::vector<int32_t>& prompt, int64_t steps,
                                  const std::vector<int32_t>& oracle) {
  const model::Drafter& drafter = *target.drafter();
  const int64_t vocab = target.vocab_size();
  const int64_t gamma = drafter.block_size();
  const auto width = static_cast<std::size_t>(drafter.tap_width());
  model::SequenceState sequence = target.new_sequence();
  model::DraftState context = drafter.new_state();
  std::vector<float> logits(prompt.size() * static_cast<std::size_t>(vocab));
  std::vector<float> taps(prompt.size() * width);
  BatchItem prefill{.sequence = &sequence, .tokens = prompt, .logits = logits, .rows = LogitRows::All, .taps = taps};
  target.forward_batch(std::span(&prefill, 1));
  drafter.inject(context, taps);
  int32_t anchor = speculative_test_argmax(logits.data() + (prompt.size() - 1) * static_cast<std::size_t>(vocab), vocab);

  SpeculativeRun run;
  run.tokens.push_back(anchor);
  for (int64_t round = 0; static_cast<int64_t>(run.tokens.size()) < steps; ++round) {
    const int64_t copy = round % (gamma + 1);
    const int64_t first_draft = static_cast<int64_t>(run.tokens.size());  // index of draft 0 in the output
    model::DraftRequest request{&context, anchor, {}};
    if (!oracle.empty())
      request.pick = [&](std::span<const float>, int64_t k) {
        const auto index = static_cast<std::size_t>(std::min<int64_t>(first_draft + k, static_cast<int64_t>(oracle.size()) - 1));
        return k < copy ? oracle[index] : static_cast<int32_t>((oracle[index] + 1) % vocab);
      };
    const model::DraftBlock block = drafter.draft(std::span(&request, 1), target.backend()).at(0);

    // Verify the anchor and every draft in one forward.
    const std::vector<std::byte> before = target.save_snapshot(sequence);
    std::vector<int32_t> verify{anchor};
    verify.insert(verify.end(), block.tokens.begin(), block.tokens.end());
    logits.assign(verify.size() * static_cast<std::size_t>(vocab), 0.0f);
    taps.assign(verify.size() * width, 0.0f);
    BatchItem item{.sequence = &sequence, .tokens = verify, .logits = logits, .rows = LogitRows::All, .taps = taps};
    target.forward_batch(std::span(&item, 1));
    std::vector<std::span<const float>> rows;
    for (std::size_t i = 0; i < verify.size(); ++i)
      rows.push_back(std::span<const float>(logits).subspan(i * static_cast<std::size_t>(vocab), static_cast<std::size_t>(vocab)));
    const DraftVerdict verdict = accept_greedy(rows, block.tokens, {});
    run.accepted_per_round.push_back(verdict.accepted);

    // Keep the anchor and the accepted drafts: roll back what the rejected ones wrote.
    const auto kept = static_cast<std::size_t>(1 + verdict.accepted);
    if (kept < verify.size()) {
      target.restore_snapshot(sequence, before);
      target.forward(sequence, std::span(verify).first(kept), {}, LogitRows::None);
    }
    drafter.inject(context, std::span(taps).first(kept * width));
    for (int64_t i = 0; i < verdict.accepted; ++i) run.tokens.push_back(block.tokens[static_cast<std::size_t>(i)]);
    anchor = verdict.bonus;
    run.tokens.push_back(anchor);
    EXPECT_EQ(sequence.length, static_cast<int64_t>(prompt.size() + run.tokens.size()) - 1);
    EXPECT_EQ(context.length, sequence.length);
  }
  run.tokens.resize(static_cast<std::size_t>(steps));
  return run;
}

TEST(SpeculativeGreedy, EqualsPlainGreedyTokenForToken) {
  const model::Model& target = model::testing::shared_fixture("tiny_dspark", "v41");
  ASSERT_NE(target.drafter(), nullptr);
  const model::testing::Golden fixture("tiny_dspark", "v41");
  const std::vector<int32_t> prompt = fixture.int32s("prompt_ids");
  constexpr int64_t kSteps = 40;  // past the fixture's sliding window many times over
  const std::vector<int32_t> reference = plain_greedy(target, prompt, kSteps);

  const SpeculativeRun drafted = speculative_greedy(target, prompt, kSteps, {});
  EXPECT_EQ(drafted.tokens, reference);

  const SpeculativeRun forced = speculative_greedy(target, prompt, kSteps, reference);
  EXPECT_EQ(forced.tokens, reference);
  // Every acceptance length happened, the whole block included.
  const int64_t gamma = target.drafter()->block_size();
  for (int64_t length = 0; length <= gamma; ++length)
    EXPECT_NE(std::find(forced.accepted_per_round.begin(), forced.accepted_per_round.end(), length),
              forced.accepted_per_round.end())
        << "no round accepted " << length << " drafts";
}

}  // namespace
}  // namespace deepinfer::engine
