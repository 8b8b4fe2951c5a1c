// The DSpark drafter (model/drafter.h) against the PyTorch transcription of its specification
// (tools/dspark/drafter_reference.py; fixture tests/data/golden/v41/tiny_dspark, see its README):
// the target's taps of a prompt and of a verified block, the drafter's context built from them,
// and two draft blocks (base and Markov-corrected logits, greedy tokens, raw and calibrated
// confidences). Then what needs no reference: taps are the streams' means at the tap points, a
// batched draft equals single drafts bit for bit, chunked injection equals one call, bad input
// is refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "golden.h"
#include "model/drafter.h"
#include "model/model.h"

namespace deepinfer::model {
namespace {

using testing::Golden;
using testing::max_abs_diff;

constexpr float kDraftTolerance = 1e-4f;

const Model& dspark_model() { return testing::shared_fixture("tiny_dspark", "v41"); }

int32_t draft_test_argmax(const float* row, int64_t width) {
  return static_cast<int32_t>(std::max_element(row, row + width) - row);
}

// Runs `tokens` through `sequence` with every row's logits and taps.
void forward_with_taps(const Model& model, SequenceState& sequence, std::span<const int32_t> tokens,
                       std::vector<float>& logits, std::vector<float>& taps) {
  const auto rows = tokens.size();
  logits.assign(rows * static_cast<std::size_t>(model.vocab_size()), 0.0f);
  taps.assign(rows * static_cast<std::size_t>(model.drafter()->tap_width()), 0.0f);
  const BatchItem item{.sequence = &sequence, .tokens = tokens, .logits = logits, .rows = LogitRows::All, .taps = taps};
  model.forward_batch(std::span(&item, 1));
}

void expect_draft_block(const Golden& want, const DraftBlock& block, const std::string& suffix) {
  const auto base = want.floats("base_logits" + suffix);
  const auto corrected = want.floats("draft_logits" + suffix);
  ASSERT_EQ(block.base_logits.size(), base.size());
  ASSERT_EQ(block.logits.size(), corrected.size());
  EXPECT_LT(max_abs_diff(block.base_logits.data(), base.data(), base.size()), kDraftTolerance) << "U" << suffix;
  EXPECT_LT(max_abs_diff(block.logits.data(), corrected.data(), corrected.size()), kDraftTolerance) << "z" << suffix;
  EXPECT_EQ(block.tokens, want.int32s("tokens" + suffix));
  const auto raw = want.floats("confidence_raw" + suffix);
  const auto calibrated = want.floats("confidence" + suffix);
  ASSERT_EQ(block.confidence_raw.size(), raw.size());
  EXPECT_LT(max_abs_diff(block.confidence_raw.data(), raw.data(), raw.size()), kDraftTolerance) << "raw confidence" << suffix;
  EXPECT_LT(max_abs_diff(block.confidence.data(), calibrated.data(), calibrated.size()), kDraftTolerance)
      << "confidence" << suffix;
}

TEST(DrafterGolden, TapsContextAndDraftsMatchTheReference) {
  const Model& model = dspark_model();
  const Drafter* drafter = model.drafter();
  ASSERT_NE(drafter, nullptr);
  const Golden want("tiny_dspark", "v41");
  const int64_t vocab = model.vocab_size();
  const int64_t width = drafter->tap_width();
  const std::vector<float> target_logits = want.floats("target_logits");

  // Round 1: the prompt's taps fill the context; the first generated token is the anchor.
  const std::vector<int32_t> prompt = want.int32s("prompt_ids");
  const auto p = static_cast<int64_t>(prompt.size());
  SequenceState sequence = model.new_sequence();
  std::vector<float> logits, taps;
  forward_with_taps(model, sequence, prompt, logits, taps);
  EXPECT_LT(max_abs_diff(logits.data(), target_logits.data(), logits.size()), kDraftTolerance) << "target logits";
  const auto want_taps = want.floats("taps_prompt");
  ASSERT_EQ(taps.size(), want_taps.size());
  EXPECT_LT(max_abs_diff(taps.data(), want_taps.data(), taps.size()), kDraftTolerance) << "prompt taps";
  DraftState state = drafter->new_state();
  drafter->inject(state, taps);
  EXPECT_EQ(state.length, p);
  const int32_t anchor1 = draft_test_argmax(logits.data() + (p - 1) * vocab, vocab);
  EXPECT_EQ(anchor1, want.int32s("anchor1").at(0));
  std::vector<DraftRequest> requests{{&state, anchor1, {}, true}};
  const std::vector<DraftBlock> first = drafter->draft(requests, model.backend());
  expect_draft_block(want, first.at(0), "1");
  // Without its logits the block is drafted by the backend's greedy draft head: the same tokens
  // and confidences, nothing else.
  requests[0].keep_logits = false;
  const DraftBlock greedy = drafter->draft(requests, model.backend()).at(0);
  EXPECT_EQ(greedy.tokens, first[0].tokens);
  EXPECT_EQ(greedy.confidence_raw, first[0].confidence_raw);
  EXPECT_EQ(greedy.confidence, first[0].confidence);
  EXPECT_TRUE(greedy.logits.empty());
  EXPECT_TRUE(greedy.base_logits.empty());

  // Round 2: the anchor and two drafts verified and kept; their taps extend the context.
  const std::vector<int32_t> committed{anchor1, first[0].tokens.at(0), first[0].tokens.at(1)};
  forward_with_taps(model, sequence, committed, logits, taps);
  // The reference computed these rows in one full forward, the engine in a cached continuation:
  // the summation orders differ, so the bound is relative to the logits' size.
  const float largest = std::abs(*std::max_element(target_logits.begin(), target_logits.end(),
                                                   [](float a, float b) { return std::abs(a) < std::abs(b); }));
  EXPECT_LT(max_abs_diff(logits.data(), target_logits.data() + p * vocab, logits.size()),
            kDraftTolerance * std::max(1.0f, largest))
      << "largest |logit| " << largest;
  const auto want_taps2 = want.floats("taps_round2");
  ASSERT_EQ(taps.size(), want_taps2.size());
  EXPECT_LT(max_abs_diff(taps.data(), want_taps2.data(), taps.size()), kDraftTolerance) << "verify taps";
  drafter->inject(state, taps);
  const int32_t anchor2 = draft_test_argmax(logits.data() + 2 * vocab, vocab);
  EXPECT_EQ(anchor2, want.int32s("anchor2").at(0));
  requests = {{&state, anchor2, {}, true}};
  expect_draft_block(want, drafter->draft(requests, model.backend()).at(0), "2");
  EXPECT_EQ(static_cast<int64_t>(taps.size()), 3 * width);
}

TEST(Drafter, TapsAreTheStreamMeansAtTheTapPoints) {
  const Model& model = dspark_model();
  const ModelConfig& config = model.config();
  const Golden want("tiny_dspark", "v41");
  const std::vector<int32_t> prompt = want.int32s("prompt_ids");
  SequenceState traced = model.new_sequence();
  ForwardTrace trace;
  std::vector<float> logits(prompt.size() * static_cast<std::size_t>(model.vocab_size()));
  model.forward(traced, prompt, logits, LogitRows::All, &trace);
  SequenceState tapped = model.new_sequence();
  std::vector<float> taps;
  forward_with_taps(model, tapped, prompt, logits, taps);

  const int64_t d = config.hidden_size, n = config.hc_mult, layers = config.num_layers;
  const std::vector<int64_t> points = dspark_tap_points(config);
  ASSERT_EQ(points.size(), config.dspark->target_layer_ids.size());
  for (std::size_t j = 0; j < points.size(); ++j) {
    // V4.1 taps the input of each target layer: the output of the layer before it.
    EXPECT_EQ(points[j], config.dspark->target_layer_ids[j] - 1);
    ASSERT_GE(points[j], 0);
    for (std::size_t t = 0; t < prompt.size(); ++t)
      for (int64_t e = 0; e < d; ++e) {
        float sum = 0.0f;
        for (int64_t k = 0; k < n; ++k)
          sum += trace.layer_streams[((static_cast<int64_t>(t) * layers + points[j]) * n + k) * d + e];
        ASSERT_EQ(taps[(t * points.size() + j) * static_cast<std::size_t>(d) + static_cast<std::size_t>(e)],
                  sum / static_cast<float>(n));
      }
  }
}

TEST(Drafter, BatchedDraftsEqualSingleDraftsAndChunkedInjectionEqualsOneCall) {
  const Model& model = dspark_model();
  const Drafter& drafter = *model.drafter();
  const Golden want("tiny_dspark", "v41");
  const std::vector<int32_t> prompt = want.int32s("prompt_ids");
  SequenceState sequence = model.new_sequence();
  std::vector<float> logits, taps;
  forward_with_taps(model, sequence, prompt, logits, taps);
  const auto width = static_cast<std::size_t>(drafter.tap_width());

  DraftState whole = drafter.new_state(), chunked = drafter.new_state(), shorter = drafter.new_state();
  drafter.inject(whole, taps);
  drafter.inject(chunked, std::span(taps).first(5 * width));
  drafter.inject(chunked, std::span(taps).subspan(5 * width));
  drafter.inject(shorter, std::span(taps).first(9 * width));  // another context, another position
  for (const bool keep_logits : {true, false}) {
    SCOPED_TRACE(keep_logits ? "logits kept" : "greedy draft head");
    std::vector<DraftRequest> one{{&whole, 7, {}, keep_logits}};
    const DraftBlock alone = drafter.draft(one, model.backend()).at(0);
    one = {{&chunked, 7, {}, keep_logits}};
    const DraftBlock from_chunks = drafter.draft(one, model.backend()).at(0);
    EXPECT_EQ(alone.logits, from_chunks.logits);
    EXPECT_EQ(alone.tokens, from_chunks.tokens);
    EXPECT_EQ(alone.confidence_raw, from_chunks.confidence_raw);
    one = {{&shorter, 11, {}, keep_logits}};
    const DraftBlock other_alone = drafter.draft(one, model.backend()).at(0);

    const std::vector<DraftRequest> both{{&shorter, 11, {}, keep_logits}, {&whole, 7, {}, keep_logits}};
    const std::vector<DraftBlock> batched = drafter.draft(both, model.backend());
    EXPECT_EQ(batched.at(1).logits, alone.logits);
    EXPECT_EQ(batched.at(1).tokens, alone.tokens);
    EXPECT_EQ(batched.at(1).confidence, alone.confidence);
    EXPECT_EQ(batched.at(0).logits, other_alone.logits);
    EXPECT_EQ(batched.at(0).tokens, other_alone.tokens);
    EXPECT_EQ(batched.at(0).confidence, other_alone.confidence);
  }
}

TEST(Drafter, PickDecidesTheTokensAndTheMarkovBiasFollowsThem) {
  const Model& model = dspark_model();
  const Drafter& drafter = *model.drafter();
  const Golden want("tiny_dspark", "v41");
  SequenceState sequence = model.new_sequence();
  std::vector<float> logits, taps;
  forward_with_taps(model, sequence, want.int32s("prompt_ids"), logits, taps);
  DraftState state = drafter.new_state();
  drafter.inject(state, taps);
  std::vector<DraftRequest> request{{&state, 7, {}, true}};
  const DraftBlock greedy = drafter.draft(request, model.backend()).at(0);
  // Forcing token 3 everywhere: the base logits do not change (the backbone never sees drafts),
  // the first corrected row neither (its bias is the anchor's), the later ones do.
  request[0].pick = [](std::span<const float>, int64_t) { return int32_t{3}; };
  const DraftBlock forced = drafter.draft(request, model.backend()).at(0);
  EXPECT_EQ(forced.tokens, std::vector<int32_t>(static_cast<std::size_t>(drafter.block_size()), 3));
  EXPECT_EQ(forced.base_logits, greedy.base_logits);
  const auto vocab = static_cast<std::size_t>(model.vocab_size());
  EXPECT_TRUE(std::equal(forced.logits.begin(), forced.logits.begin() + vocab, greedy.logits.begin()));
  if (greedy.tokens[0] != 3) {
    EXPECT_FALSE(std::equal(forced.logits.begin() + vocab, forced.logits.begin() + 2 * vocab, greedy.logits.begin() + vocab));
  }
}

TEST(Drafter, RefusesBadInput) {
  const Model& model = dspark_model();
  const Drafter& drafter = *model.drafter();
  DraftState state = drafter.new_state();
  std::vector<float> ragged(static_cast<std::size_t>(drafter.tap_width()) + 1, 0.0f);
  EXPECT_THROW(drafter.inject(state, ragged), Error);
  std::vector<DraftRequest> request{{&state, static_cast<int32_t>(model.vocab_size()), {}}};
  EXPECT_THROW(drafter.draft(request, model.backend()), Error);
  const std::vector<DraftRequest> twice{{&state, 1, {}}, {&state, 2, {}}};
  EXPECT_THROW(drafter.draft(twice, model.backend()), Error);
  DraftState foreign;
  request = {{&foreign, 1, {}}};
  EXPECT_THROW(drafter.draft(request, model.backend()), Error);

  // Taps of the wrong size, and taps from a model without a drafter.
  SequenceState sequence = model.new_sequence();
  const std::vector<int32_t> tokens{5, 6};
  std::vector<float> short_taps(static_cast<std::size_t>(drafter.tap_width()));
  const BatchItem item{.sequence = &sequence, .tokens = tokens, .logits = {}, .rows = LogitRows::None, .taps = short_taps};
  EXPECT_THROW(model.forward_batch(std::span(&item, 1)), Error);
  EXPECT_EQ(sequence.length, 0);
  const Model& plain = testing::shared_fixture("tiny_bf16", "v41");
  EXPECT_EQ(plain.drafter(), nullptr);
  SequenceState plain_sequence = plain.new_sequence();
  const BatchItem plain_item{.sequence = &plain_sequence, .tokens = tokens, .logits = {}, .rows = LogitRows::None, .taps = short_taps};
  EXPECT_THROW(plain.forward_batch(std::span(&plain_item, 1)), Error);
}

}  // namespace
}  // namespace deepinfer::model
