// What the forward pass decides on the way, on the CUDA backend against the CPU backend: every
// router's experts, every CSA / CSA2 layer's picked entries, V4.1's candidate blocks (exactly),
// the per-layer residual streams and the head's input (within 1e-3); and V4.1's decoder window
// replay, whose dropped rows exercise ForwardPass::drop_front_rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "gpu_fixtures.h"
#include "model/v41_synthetic.h"

namespace deepinfer {
namespace {

using gpu_testing::fixture_pair;

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float worst = 0;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;  // rows replay skipped, on both
    const float diff = std::abs(a[i] - b[i]);
    worst = std::isnan(diff) ? INFINITY : std::max(worst, diff);
  }
  return worst;
}

model::ForwardTrace traced_prefill(const model::Model& model, const std::vector<int32_t>& ids,
                                   const model::ForwardOptions& base) {
  model::SequenceState sequence = model.new_sequence();
  std::vector<float> logits(base.rows == model::LogitRows::All ? ids.size() * model.vocab_size() : model.vocab_size());
  model::ForwardTrace trace;
  model::ForwardOptions options = base;
  options.trace = &trace;
  model.forward(sequence, ids, logits, options);
  return trace;
}

void expect_same_decisions(const model::ForwardTrace& cpu, const model::ForwardTrace& gpu) {
  ASSERT_EQ(cpu.routing.size(), gpu.routing.size());
  for (std::size_t layer = 0; layer < cpu.routing.size(); ++layer) {
    ASSERT_EQ(cpu.routing[layer].size(), gpu.routing[layer].size());
    for (std::size_t t = 0; t < cpu.routing[layer].size(); ++t) {
      EXPECT_EQ(cpu.routing[layer][t].experts, gpu.routing[layer][t].experts) << "layer " << layer << " token " << t;
      const auto& a = cpu.routing[layer][t].weights;
      const auto& b = gpu.routing[layer][t].weights;
      ASSERT_EQ(a.size(), b.size());
      for (std::size_t k = 0; k < a.size(); ++k) EXPECT_NEAR(a[k], b[k], 1e-5f);
    }
  }
  EXPECT_EQ(cpu.csa_topk, gpu.csa_topk);
  EXPECT_EQ(cpu.candidate_blocks, gpu.candidate_blocks);
  EXPECT_LE(max_abs_diff(cpu.layer_streams, gpu.layer_streams), 1e-3f);
  EXPECT_LE(max_abs_diff(cpu.final_hidden, gpu.final_hidden), 1e-3f);
}

class GpuTraceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GpuTraceTest, DecisionsAndStreamsMatchTheCpuBackend) {
  DEEPINFER_REQUIRE_GPU();
  const auto& pair = fixture_pair(GetParam());
  std::vector<int32_t> ids;
  for (int i = 0; i < 48; ++i) ids.push_back(static_cast<int32_t>(3 + (i * 53) % (pair.cpu->vocab_size() - 3)));
  const model::ForwardOptions options{.rows = model::LogitRows::All};
  expect_same_decisions(traced_prefill(*pair.cpu, ids, options), traced_prefill(*pair.gpu, ids, options));
}

INSTANTIATE_TEST_SUITE_P(Golden, GpuTraceTest, ::testing::Values("v4/tiny_fp8", "v41/tiny_fp8"),
                         [](const auto& param_info) {
                           std::string name = param_info.param;
                           std::replace(name.begin(), name.end(), '/', '_');
                           return name;
                         });

// The 8-layer synthetic V4.1 whose decoder (layers 5..7) replay may cut (model tests'
// v41_window_replay_test.cpp, "valid").
TEST(GpuWindowReplay, MatchesTheCpuBackend) {
  DEEPINFER_REQUIRE_GPU();
  model::test_support::ScratchDir dir;
  model::test_support::write_synthetic(dir.str(), [](nlohmann::json& document) {
    nlohmann::json& text = document["text_config"];
    model::test_support::drop_engram(text);
    text["num_hidden_layers"] = 8;
    text["compress_ratios"] = {0, 2, 2, 2, 1, 1, 1, 1, 0};
    text["kv_source_layer_ids"] = {1, 4};
    text["index_source_layer_ids"] = {1, 4, 6};
    text["candidate_source_layer_id"] = 4;
  });
  const model::Model cpu = model::Model::load(dir.str());
  model::Model gpu = model::Model::load(dir.str());
  backend::attach_device(gpu, backend::parse_device("cuda:0"));
  ASSERT_GT(cpu.first_replayed_layer(), 0) << cpu.replay_refusal();
  const std::vector<int32_t> ids = model::test_support::prompt(40, cpu.vocab_size());
  const model::ForwardOptions replay{.rows = model::LogitRows::Last, .decoder_window_replay = true};
  expect_same_decisions(traced_prefill(cpu, ids, replay), traced_prefill(gpu, ids, replay));
  // And the logits of a replayed prefill, chunked on the GPU, equal its one-shot bits.
  const auto last_logits = [&](const model::Model& model, std::size_t chunk) {
    model::SequenceState sequence = model.new_sequence();
    std::vector<float> logits(static_cast<std::size_t>(model.vocab_size()));
    for (std::size_t begin = 0; begin < ids.size(); begin += chunk) {
      const std::size_t count = std::min(chunk, ids.size() - begin);
      const bool last = begin + count == ids.size();
      std::vector<float> none;
      model.forward(sequence, std::span(ids).subspan(begin, count), last ? std::span<float>(logits) : std::span<float>(none),
                    model::ForwardOptions{.rows = last ? model::LogitRows::Last : model::LogitRows::None,
                                          .decoder_window_replay = true,
                                          .prompt_end = static_cast<int64_t>(ids.size())});
    }
    return logits;
  };
  const std::vector<float> one_shot = last_logits(gpu, ids.size());
  EXPECT_EQ(one_shot, last_logits(gpu, 7));
  EXPECT_LE(max_abs_diff(one_shot, last_logits(cpu, ids.size())), 1e-3f);
}

}  // namespace
}  // namespace deepinfer
