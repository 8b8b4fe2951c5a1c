// The V4 forward pass against the transformers reference's causal outputs (golden fixtures):
// every position's logits, the per-layer mHC streams, the indexer's and routers' choices, and
// the same logits from every chunking of the prompt (bit-identical to one-shot prefill).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>

#include "core/error.h"
#include "golden.h"
#include "model/model.h"

namespace deepinfer::model {
namespace {

using testing::Golden;
using testing::max_abs_diff;
using testing::run_chunked;

constexpr float kTolerance = 1e-4f;

const Model& load_fixture(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Model>> models;
  auto& slot = models[name];
  if (!slot) slot = std::make_unique<Model>(Model::load(testing::fixture_dir(name)));
  return *slot;
}

// Checks logits rows against the golden: in full for the tiny fixtures, through the stored
// summaries (top 64, logsumexp, next-token logit, last row) for the 129280-wide vocabulary.
float logits_diff(const Golden& golden, const std::vector<float>& logits, int64_t vocab) {
  if (golden.has("causal_logits")) {
    const auto want = golden.floats("causal_logits");
    EXPECT_EQ(want.size(), logits.size());
    return max_abs_diff(logits.data(), want.data(), want.size());
  }
  const auto ids = golden.integers("input_ids");
  const int64_t tokens = static_cast<int64_t>(ids.size());
  const auto last = golden.floats("causal_logits_last");
  float worst = max_abs_diff(logits.data() + (tokens - 1) * vocab, last.data(), last.size());
  const auto top_ids = golden.integers("causal_top_ids");
  const auto top_logits = golden.floats("causal_top_logits");
  const auto logsumexp = golden.floats("causal_logsumexp");
  const auto next_logit = golden.floats("causal_next_token_logit");
  const int64_t top = golden.shape("causal_top_ids")[1];
  for (int64_t t = 0; t < tokens; ++t) {
    const float* row = logits.data() + t * vocab;
    for (int64_t i = 0; i < top; ++i)
      worst = std::max(worst, std::abs(row[top_ids[t * top + i]] - top_logits[t * top + i]));
    EXPECT_EQ(std::max_element(row, row + vocab) - row, top_ids[t * top]) << "argmax at " << t;
    const float max_logit = *std::max_element(row, row + vocab);
    double sum = 0;
    for (int64_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(row[v] - max_logit));
    worst = std::max(worst, std::abs(static_cast<float>(max_logit + std::log(sum)) - logsumexp[t]));
    if (t + 1 < tokens) worst = std::max(worst, std::abs(row[ids[t + 1]] - next_logit[t]));
  }
  return worst;
}

class FixtureTest : public ::testing::TestWithParam<std::string> {};

TEST_P(FixtureTest, RopeTablesMatchTheReference) {
  const Model& model = load_fixture(GetParam());
  const Golden golden(GetParam());
  const ModelConfig& config = model.config();
  int64_t window_layer = -1, compressed_layer = -1;
  for (int64_t l = 0; l < config.num_layers; ++l) (config.compress_ratio(l) ? compressed_layer : window_layer) = l;
  ASSERT_GE(window_layer, 0);
  ASSERT_GE(compressed_layer, 0);
  for (const auto& [layer, name] : {std::pair{window_layer, "rope_inv_freq_main"}, {compressed_layer, "rope_inv_freq_compress"}}) {
    const auto want = golden.floats(name);
    const auto have = RopeTable::for_layer(config, layer).inv_freq();
    ASSERT_EQ(have.size(), want.size());
    for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(have[i], want[i], 1e-6f * want[i]) << name << "[" << i << "]";
  }
}

TEST_P(FixtureTest, OneShotPrefillMatchesCausalReference) {
  const Model& model = load_fixture(GetParam());
  const Golden golden(GetParam());
  const auto ids = golden.ids("input_ids");
  const int64_t tokens = static_cast<int64_t>(ids.size());
  const int64_t vocab = model.vocab_size();
  SequenceState sequence = model.new_sequence();
  std::vector<float> logits(static_cast<std::size_t>(tokens * vocab));
  ForwardTrace trace;
  model.forward(sequence, ids, logits, LogitRows::All, &trace);

  const float logit_diff = logits_diff(golden, logits, vocab);
  EXPECT_LE(logit_diff, kTolerance);
  const float stream_diff = max_abs_diff(trace.layer_streams.data(), golden.floats("causal_layer_streams").data(),
                                         trace.layer_streams.size());
  EXPECT_LE(stream_diff, kTolerance);
  const auto final_hidden = golden.floats("causal_final_hidden");
  ASSERT_EQ(trace.final_hidden.size(), final_hidden.size());
  EXPECT_LE(max_abs_diff(trace.final_hidden.data(), final_hidden.data(), final_hidden.size()), kTolerance);
  std::printf("[ %s ] max |logits - causal_logits| = %.3g, max |streams - golden| = %.3g\n", GetParam().c_str(),
              logit_diff, stream_diff);

  // Indexer choices: [T, csa layers, index_topk], ascending, -1 padded.
  const auto topk = golden.integers("causal_csa_topk");
  const int64_t csa_layers = golden.shape("causal_csa_topk")[1];
  const int64_t k = golden.shape("causal_csa_topk")[2];
  ASSERT_EQ(static_cast<int64_t>(trace.csa_topk.size()), csa_layers);
  for (int64_t c = 0; c < csa_layers; ++c)
    for (int64_t t = 0; t < tokens; ++t) {
      std::vector<int64_t> want;
      for (int64_t i = 0; i < k; ++i)
        if (topk[(t * csa_layers + c) * k + i] >= 0) want.push_back(topk[(t * csa_layers + c) * k + i]);
      EXPECT_EQ(trace.csa_topk[c][t], want) << "CSA layer " << c << ", token " << t;
    }

  // Router choices and weights: [T, L, top_k], ascending expert id.
  const auto experts = golden.integers("causal_moe_experts");
  const auto weights = golden.floats("causal_moe_weights");
  const int64_t layers = model.config().num_layers;
  const int64_t top_k = model.config().num_experts_per_tok;
  for (int64_t l = 0; l < layers; ++l)
    for (int64_t t = 0; t < tokens; ++t) {
      const Routing& routing = trace.routing[l][t];
      for (int64_t i = 0; i < top_k; ++i) {
        EXPECT_EQ(routing.experts[i], experts[(t * layers + l) * top_k + i]) << "layer " << l << ", token " << t;
        EXPECT_NEAR(routing.weights[i], weights[(t * layers + l) * top_k + i], kTolerance);
      }
    }
}

TEST_P(FixtureTest, EveryChunkingGivesTheOneShotLogitsBitForBit) {
  const Model& model = load_fixture(GetParam());
  const Golden golden(GetParam());
  const auto ids = golden.ids("input_ids");
  const std::vector<float> one_shot = run_chunked(model, ids, ids.size());
  // Every chunk size on tiny_bf16; two on the others, to keep the suite fast under sanitizers (a
  // chunk of one re-decodes every weight once per token in the portable kernel).
  const std::vector<std::size_t> chunks =
      GetParam() == "tiny_bf16" ? std::vector<std::size_t>{1, 2, 3, 5, 8, 13, 48} : std::vector<std::size_t>{5, 13};
  for (std::size_t chunk : chunks) {
    const std::vector<float> chunked = run_chunked(model, ids, chunk);
    ASSERT_EQ(chunked.size(), one_shot.size());
    EXPECT_EQ(std::memcmp(chunked.data(), one_shot.data(), one_shot.size() * sizeof(float)), 0) << "chunk " << chunk;
    EXPECT_LE(logits_diff(golden, chunked, model.vocab_size()), kTolerance) << "chunk " << chunk;
  }
  // Prefill of a prompt that ends mid-window, then token-by-token decode.
  SequenceState sequence = model.new_sequence();
  const auto vocab = static_cast<std::size_t>(model.vocab_size());
  std::vector<float> decoded(ids.size() * vocab);
  const std::size_t prefill = GetParam() == "tiny_bf16" ? ids.size() / 2 + 1 : ids.size() - 5;
  model.forward(sequence, std::span(ids).first(prefill), std::span(decoded).first(prefill * vocab));
  for (std::size_t t = prefill; t < ids.size(); ++t)
    model.forward(sequence, std::span(ids).subspan(t, 1), std::span(decoded).subspan(t * vocab, vocab));
  EXPECT_EQ(std::memcmp(decoded.data(), one_shot.data(), one_shot.size() * sizeof(float)), 0);
}

TEST_P(FixtureTest, GreedyDecodeReproducesTheReference) {
  const Model& model = load_fixture(GetParam());
  const Golden golden(GetParam());
  std::vector<int32_t> prompt = golden.ids("greedy_prompt_ids");
  const auto want_ids = golden.integers("greedy_ids");
  const int64_t vocab = model.vocab_size();
  SequenceState sequence = model.new_sequence();
  std::vector<float> logits(static_cast<std::size_t>(vocab));
  model.forward(sequence, prompt, logits, LogitRows::Last);
  float worst = 0;
  for (std::size_t step = 0; step < want_ids.size(); ++step) {
    const int32_t next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    ASSERT_EQ(next, want_ids[step]) << "greedy step " << step;
    if (golden.has("greedy_logits")) {
      const auto want = golden.floats("greedy_logits");
      worst = std::max(worst, max_abs_diff(logits.data(), want.data() + step * vocab, static_cast<std::size_t>(vocab)));
    } else {
      const auto top_ids = golden.integers("greedy_top_ids");
      const auto top_logits = golden.floats("greedy_top_logits");
      const int64_t top = golden.shape("greedy_top_ids")[1];
      for (int64_t i = 0; i < top; ++i)
        worst = std::max(worst, std::abs(logits[top_ids[step * top + i]] - top_logits[step * top + i]));
    }
    const int32_t token[] = {next};
    model.forward(sequence, token, logits, LogitRows::Last);
  }
  EXPECT_LE(worst, kTolerance);
}

INSTANTIATE_TEST_SUITE_P(Golden, FixtureTest, ::testing::Values("tiny_bf16", "tiny_fp8", "real_vocab"));

TEST(ModelForwardTest, LastRowOnlyEqualsTheLastRowOfAll) {
  const Model& model = load_fixture("tiny_bf16");
  const auto ids = Golden("tiny_bf16").ids("input_ids");
  const auto all = run_chunked(model, ids, ids.size());
  SequenceState sequence = model.new_sequence();
  std::vector<float> last(static_cast<std::size_t>(model.vocab_size()));
  model.forward(sequence, ids, last, LogitRows::Last);
  EXPECT_EQ(std::memcmp(last.data(), all.data() + all.size() - last.size(), last.size() * sizeof(float)), 0);
}

TEST(ModelForwardTest, RejectsBadInput) {
  const Model& model = load_fixture("tiny_bf16");
  SequenceState sequence = model.new_sequence();
  std::vector<float> logits(static_cast<std::size_t>(model.vocab_size()));
  const int32_t out_of_range[] = {static_cast<int32_t>(model.vocab_size())};
  EXPECT_THROW(model.forward(sequence, out_of_range, logits), Error);
  const int32_t ok[] = {3, 4};
  EXPECT_THROW(model.forward(sequence, ok, logits), Error);  // two rows do not fit one row of logits
  EXPECT_EQ(sequence.length, 0);
}

}  // namespace
}  // namespace deepinfer::model
