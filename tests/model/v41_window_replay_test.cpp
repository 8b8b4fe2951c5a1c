// Decoder window replay of prefill (ForwardOptions::decoder_window_replay) on a synthetic 8-layer
// V4.1 checkpoint that satisfies the mode's conditions: layers 0..4 (encoder, up to the ratio-1 kv
// source at the midpoint) are bit-identical to the exact pass, as are the compressed caches; the
// decoder layers 5..7 run only on the prompt's last `sliding_window` rows; chunked replay matches
// one-shot replay; decode runs after it; the last-row logits move by a measured amount, and not at
// all when the prompt fits in the window. Invalid configs and impossible logit requests are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>

#include "core/error.h"
#include "model/model.h"
#include "v41_synthetic.h"

namespace deepinfer::model {
namespace {

using namespace test_support;

constexpr int64_t kLayers = 8;
constexpr int64_t kMidpoint = 4;  // the last kv source: layers 5..7 are the decoder

// "valid": ratios 0 | 2 2 2 | 1 1 1 1, kv sources 1 and 4 (the midpoint, also the candidate
// source), index sources 1, 4 and 6 (Reindex inside the decoder; 5 and 7 Reuse), no Engram.
// "midpoint_ratio_2": the ratio-1 kv source sits at layer 6, so the midpoint is not one.
const Model& eight_layer(const std::string& variant) {
  struct Slot {
    ScratchDir dir;
    std::unique_ptr<Model> model;
  };
  static std::map<std::string, std::unique_ptr<Slot>> models;
  auto& slot = models[variant];
  if (!slot) {
    slot = std::make_unique<Slot>();
    write_synthetic(slot->dir.str(), [&](nlohmann::json& document) {
      nlohmann::json& text = document["text_config"];
      drop_engram(text);
      text["num_hidden_layers"] = kLayers;
      if (variant == "valid") {
        text["compress_ratios"] = {0, 2, 2, 2, 1, 1, 1, 1, 0};
        text["kv_source_layer_ids"] = {1, 4};
        text["index_source_layer_ids"] = {1, 4, 6};
        text["candidate_source_layer_id"] = 4;
      } else {
        text["compress_ratios"] = {0, 2, 2, 2, 2, 2, 1, 1, 0};
        text["kv_source_layer_ids"] = {1, 6};
        text["index_source_layer_ids"] = {1, 6};
        text["candidate_source_layer_id"] = 6;
      }
    });
    slot->model = std::make_unique<Model>(Model::load(slot->dir.str()));
  }
  return *slot->model;
}

struct Prefill {
  SequenceState sequence;
  std::vector<float> last_logits;
  ForwardTrace trace;
};

// One-shot prefill of `ids`, last-row logits, with or without replay.
Prefill prefill(const Model& model, const std::vector<int32_t>& ids, bool replay) {
  Prefill run{model.new_sequence(), std::vector<float>(static_cast<std::size_t>(model.vocab_size())), {}};
  model.forward(run.sequence, ids, run.last_logits,
                ForwardOptions{.rows = LogitRows::Last, .decoder_window_replay = replay, .trace = &run.trace});
  return run;
}

// Window rows (QuantizedRows) or paged entries and keys (PagedRows).
template <class Rows>
std::vector<float> decoded(const Rows& rows) {
  std::vector<float> out(static_cast<std::size_t>(rows.size() * rows.width()));
  for (int64_t r = 0; r < rows.size(); ++r) rows.read(r, out.data() + r * rows.width());
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

struct Difference {
  float max_abs = 0;
  bool argmax_agrees = false;
};

Difference compare(const std::vector<float>& exact, const std::vector<float>& replayed) {
  Difference d;
  for (std::size_t i = 0; i < exact.size(); ++i) d.max_abs = std::max(d.max_abs, std::fabs(exact[i] - replayed[i]));
  d.argmax_agrees = std::max_element(exact.begin(), exact.end()) - exact.begin() ==
                    std::max_element(replayed.begin(), replayed.end()) - replayed.begin();
  return d;
}

TEST(WindowReplayTest, ValidityFollowsTheConditions) {
  EXPECT_EQ(eight_layer("valid").first_replayed_layer(), kMidpoint + 1);
  EXPECT_TRUE(eight_layer("valid").replay_refusal().empty());
  const Model& invalid = eight_layer("midpoint_ratio_2");
  EXPECT_EQ(invalid.first_replayed_layer(), -1);
  EXPECT_NE(invalid.replay_refusal().find("midpoint layer 4"), std::string::npos) << invalid.replay_refusal();

  const auto ids = prompt(20, invalid.vocab_size());
  SequenceState sequence = invalid.new_sequence();
  std::vector<float> logits(static_cast<std::size_t>(invalid.vocab_size()));
  try {
    invalid.forward(sequence, ids, logits, ForwardOptions{.rows = LogitRows::Last, .decoder_window_replay = true});
    FAIL() << "replay ran on a config that does not allow it";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("not valid for this model"), std::string::npos) << error.what();
  }
  EXPECT_EQ(sequence.length, 0);
  invalid.forward(sequence, ids, logits, LogitRows::Last);  // the exact pass still runs
  EXPECT_EQ(sequence.length, 20);
}

// The released V4.1-Flash schedule allows the mode; the V4.1 golden fixtures do not (their
// Engram layer 5 is above the midpoint 4), so they cannot measure it.
TEST(WindowReplayTest, ReleasedConfigIsValidGoldenFixturesAreNot) {
  const std::string data = DEEPINFER_TEST_DATA_DIR;
  EXPECT_EQ(decoder_window_replay_refusal(load_model_config(data + "/configs/v41_flash.json")), "");
  for (const char* fixture : {"tiny_bf16", "tiny_fp8"}) {
    const std::string refusal =
        decoder_window_replay_refusal(load_model_config(data + "/golden/v41/" + fixture + "/config.json"));
    EXPECT_NE(refusal.find("Engram layer 5"), std::string::npos) << fixture << ": " << refusal;
  }
  EXPECT_NE(decoder_window_replay_refusal(load_model_config(data + "/configs/tiny_v4.json")).find("V4.1"),
            std::string::npos);
}

TEST(WindowReplayTest, EncoderLayersAndCompressedCachesAreBitIdentical) {
  const Model& model = eight_layer("valid");
  const int64_t window = model.config().sliding_window;
  const int64_t length = 40;
  const auto ids = prompt(length, model.vocab_size());
  const Prefill exact = prefill(model, ids, false);
  const Prefill replayed = prefill(model, ids, true);

  const int64_t row = model.config().hc_mult * model.config().hidden_size;
  for (int64_t t = 0; t < length; ++t)
    for (int64_t layer = 0; layer < kLayers; ++layer) {
      const float* e = exact.trace.layer_streams.data() + (t * kLayers + layer) * row;
      const float* r = replayed.trace.layer_streams.data() + (t * kLayers + layer) * row;
      if (layer <= kMidpoint) {
        ASSERT_EQ(std::memcmp(e, r, static_cast<std::size_t>(row) * sizeof(float)), 0) << "layer " << layer << " token " << t;
        ASSERT_EQ(exact.trace.routing[layer][t].experts, replayed.trace.routing[layer][t].experts);
      } else if (t < length - window) {
        ASSERT_TRUE(std::isnan(r[0])) << "layer " << layer << " ran on skipped token " << t;
        ASSERT_TRUE(replayed.trace.routing[layer][t].experts.empty());
      } else {
        ASSERT_TRUE(std::isfinite(r[0]));
      }
    }
  for (int64_t source : {int64_t{1}, kMidpoint}) {
    const CompressedGroupState& e = exact.sequence.layers[source].group;
    const CompressedGroupState& r = replayed.sequence.layers[source].group;
    EXPECT_EQ(e.entries.size(), length / model.config().compress_ratio(source));
    EXPECT_TRUE(same_bits(decoded(e.entries), decoded(r.entries))) << "layer " << source;
    EXPECT_TRUE(same_bits(decoded(e.index_keys), decoded(r.index_keys))) << "layer " << source;
    EXPECT_TRUE(same_bits(e.compressor.open_kv, r.compressor.open_kv)) << "layer " << source;
  }
  // Every layer keeps the window the next decode step reads. The first decoder layer's rows come
  // from the midpoint's output, which is exact, so they match bit for bit; later ones need not.
  for (int64_t layer = 0; layer < kLayers; ++layer) {
    const AttentionState& e = exact.sequence.layers[layer];
    const AttentionState& r = replayed.sequence.layers[layer];
    EXPECT_EQ(r.window_first, length - (window - 1)) << "layer " << layer;
    EXPECT_EQ(r.window.size(), window - 1) << "layer " << layer;
    if (layer <= kMidpoint + 1) {
      EXPECT_TRUE(same_bits(decoded(e.window), decoded(r.window))) << "layer " << layer;
    }
  }
}

TEST(WindowReplayTest, LastRowLogitsDifferByAMeasuredAmountAndDecodeRuns) {
  const Model& model = eight_layer("valid");
  const auto ids = prompt(48, model.vocab_size());
  const auto vocab = static_cast<std::size_t>(model.vocab_size());
  Prefill exact = prefill(model, ids, false);
  Prefill replayed = prefill(model, ids, true);
  for (float v : replayed.last_logits) ASSERT_TRUE(std::isfinite(v));
  const Difference prefill_difference = compare(exact.last_logits, replayed.last_logits);
  // The kept rows lost the window keys below the trailing window: the logits must move.
  EXPECT_GT(prefill_difference.max_abs, 0.0f);
  float largest = 0;
  for (float v : exact.last_logits) largest = std::max(largest, std::fabs(v));
  std::printf("[ replay   ] 8-layer synthetic, 48-token prompt, window %lld: last-row max |diff| %.3g (max |logit| %.3g), "
              "argmax %s\n",
              static_cast<long long>(model.config().sliding_window), prefill_difference.max_abs, largest,
              prefill_difference.argmax_agrees ? "agrees" : "differs");

  // Decode continues from the replayed state with the same (exact) step as after an exact prefill.
  std::vector<float> step_exact(vocab), step_replayed(vocab);
  float decode_max = 0;
  for (int32_t token : {7, 19, 23, 42, 5, 88, 101, 3, 64, 77}) {
    const std::vector<int32_t> one = {token};
    model.forward(exact.sequence, one, step_exact, LogitRows::Last);
    model.forward(replayed.sequence, one, step_replayed, LogitRows::Last);
    for (float v : step_replayed) ASSERT_TRUE(std::isfinite(v));
    decode_max = std::max(decode_max, compare(step_exact, step_replayed).max_abs);
  }
  EXPECT_EQ(replayed.sequence.length, 58);
  std::printf("[ replay   ] next 10 decode steps: max |diff| %.3g\n", decode_max);
}

TEST(WindowReplayTest, NothingIsSkippedWhenThePromptFitsTheWindow) {
  const Model& model = eight_layer("valid");
  for (int64_t length : {int64_t{3}, model.config().sliding_window}) {
    const auto ids = prompt(length, model.vocab_size());
    const Prefill exact = prefill(model, ids, false);
    const Prefill replayed = prefill(model, ids, true);
    EXPECT_TRUE(same_bits(exact.last_logits, replayed.last_logits)) << "length " << length;
    EXPECT_TRUE(same_bits(exact.trace.layer_streams, replayed.trace.layer_streams)) << "length " << length;
  }
}

TEST(WindowReplayTest, ChunkedReplayMatchesOneShotReplay) {
  const Model& model = eight_layer("valid");
  const int64_t length = 40;
  const auto ids = prompt(length, model.vocab_size());
  const auto vocab = static_cast<std::size_t>(model.vocab_size());
  Prefill one_shot = prefill(model, ids, true);
  const std::vector<int32_t> next = {9, 31};
  std::vector<float> one_shot_next(vocab);
  model.forward(one_shot.sequence, next, one_shot_next, LogitRows::Last);

  for (std::size_t chunk : {5u, 13u, 35u}) {
    SequenceState sequence = model.new_sequence();
    std::vector<float> last(vocab);
    for (std::size_t begin = 0; begin < ids.size(); begin += chunk) {
      const std::size_t count = std::min(chunk, ids.size() - begin);
      const bool final_chunk = begin + count == ids.size();
      model.forward(sequence, std::span(ids).subspan(begin, count),
                    final_chunk ? std::span<float>(last) : std::span<float>(),
                    ForwardOptions{.rows = final_chunk ? LogitRows::Last : LogitRows::None,
                                   .decoder_window_replay = true, .prompt_end = length});
    }
    EXPECT_TRUE(same_bits(last, one_shot.last_logits)) << "chunk " << chunk;
    std::vector<float> after(vocab);
    model.forward(sequence, next, after, LogitRows::Last);
    EXPECT_TRUE(same_bits(after, one_shot_next)) << "chunk " << chunk;
  }
}

TEST(WindowReplayTest, RowsWithoutLogitsAreRefusedBeforeAnythingChanges) {
  const Model& model = eight_layer("valid");
  const auto ids = prompt(30, model.vocab_size());
  const auto vocab = static_cast<std::size_t>(model.vocab_size());
  auto expect_refused = [&](std::span<const int32_t> tokens, std::span<float> logits, const ForwardOptions& options,
                            const std::string& needle) {
    SequenceState sequence = model.new_sequence();
    try {
      model.forward(sequence, tokens, logits, options);
      ADD_FAILURE() << "accepted; expected an error with \"" << needle << "\"";
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find(needle), std::string::npos) << error.what();
    }
    EXPECT_EQ(sequence.length, 0);
  };
  std::vector<float> all(ids.size() * vocab), last(vocab);
  expect_refused(ids, all, {.rows = LogitRows::All, .decoder_window_replay = true}, "LogitRows::Last or None");
  expect_refused(std::span(ids).first(10), last, {.rows = LogitRows::Last, .decoder_window_replay = true, .prompt_end = 30},
                 "LogitRows::None");
  expect_refused(ids, last, {.rows = LogitRows::Last, .decoder_window_replay = true, .prompt_end = 20}, "prompt_end");
}

}  // namespace
}  // namespace deepinfer::model
