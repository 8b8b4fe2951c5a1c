// Decode steps replayed from captured CUDA graphs (backend/cuda/step_graphs.h) against the same
// steps launched eagerly (--enforce-eager): the same tokens and log-probabilities, bit for bit,
// through warm-up, capture and replay, a batch that shrinks and grows (new keys; padding rows in
// a bucket of 4 for 3 sequences), sequences that arrive with a prefill between decode steps, and
// a context that crosses a graph's bound (1024).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <span>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/device.h"
#include "gpu_fixtures.h"
#include "model/model.h"

namespace deepinfer {
namespace {

std::vector<int32_t> prompt_of(const model::Model& model, int64_t length, int32_t salt) {
  std::vector<int32_t> ids;
  const int64_t vocab = model.vocab_size();
  for (int64_t i = 0; i < length; ++i) ids.push_back(static_cast<int32_t>(2 + (i * 37 + salt * 101) % (vocab - 2)));
  return ids;
}

struct Drawn {
  int32_t token;
  float logprob;
  std::vector<std::pair<int32_t, float>> top;
};

// One serving-like script: sequences join (prefilled in one call) and leave between decode steps;
// every decode step draws a token for each live sequence with seeded sampling and logprobs.
std::vector<Drawn> run_script(const model::Model& model) {
  struct Live {
    model::SequenceState state;
    int32_t next = 0;
    uint64_t id = 0;
  };
  std::vector<Live> live;
  std::vector<Drawn> out;
  const auto join = [&](int64_t prompt_length, uint64_t id) {
    Live sequence{model.new_sequence(), 0, id};
    std::vector<int32_t> prompt = prompt_of(model, prompt_length, static_cast<int32_t>(id));
    sequence.next = prompt.back();
    prompt.pop_back();
    const model::BatchItem item{&sequence.state, prompt, {}, model::LogitRows::None};
    model.forward_batch(std::span(&item, 1));
    live.push_back(std::move(sequence));
  };
  join(1010, 1);  // crosses 1024 during the script: the bound doubles, a new key
  join(30, 2);
  join(9, 3);
  for (int step = 0; step < 36; ++step) {
    if (step == 12) live.erase(live.begin() + 1);  // 3 -> 2 sequences
    if (step == 20) join(17, 4);                    // 2 -> 3 again, after a prefill
    if (step == 26) join(11, 5);                    // 3 -> 4: the same bucket, the same graph
    std::vector<model::BatchItem> items;
    std::vector<model::TokenDraw> draws;
    for (std::size_t i = 0; i < live.size(); ++i) {
      items.push_back({&live[i].state, std::span(&live[i].next, 1), {}, model::LogitRows::Last});
      model::TokenDraw draw;
      draw.row = static_cast<int64_t>(i);
      draw.temperature = 0.8f;
      draw.seed = 7;
      draw.request_id = live[i].id;
      draw.position = live[i].state.length;
      draw.logprobs = 2;
      draws.push_back(draw);
    }
    std::vector<model::DrawnToken> drawn(draws.size());
    model.forward_batch_draw(items, draws, drawn);
    for (std::size_t i = 0; i < live.size(); ++i) {
      live[i].next = drawn[i].token;
      out.push_back({drawn[i].token, drawn[i].logprob, drawn[i].top_logprobs});
    }
  }
  return out;
}

class GraphReplayTest : public ::testing::TestWithParam<const char*> {};

TEST_P(GraphReplayTest, ReplayedStepsEqualEagerSteps) {
  DEEPINFER_REQUIRE_GPU();
  const std::string dir = gpu_testing::test_data_dir() + "/golden/" + GetParam();
  model::LoadOptions options;
  if (std::string(GetParam()).rfind("v41/", 0) == 0)
    options.tokenizer = gpu_testing::asset_dir() + "/tokenizer/deepseek_v41_tokenizer.json";
  model::Model eager = model::Model::load(dir, options);
  model::Model graphs = model::Model::load(dir, options);
  backend::DeviceSpec spec = backend::parse_device("cuda:0");
  spec.cuda_graphs = false;
  backend::attach_device(eager, spec);
  spec.cuda_graphs = true;
  backend::attach_device(graphs, spec);

  const std::vector<Drawn> expected = run_script(eager);
  const std::vector<Drawn> replayed = run_script(graphs);
  ASSERT_EQ(expected.size(), replayed.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(expected[i].token, replayed[i].token) << "draw " << i;
    EXPECT_EQ(0, std::memcmp(&expected[i].logprob, &replayed[i].logprob, sizeof(float))) << "draw " << i;
    EXPECT_EQ(expected[i].top, replayed[i].top) << "draw " << i;
  }
  const backend::cuda::GraphCounts none = backend::cuda::graph_counts(eager.backend());
  EXPECT_EQ(none.captured, 0);
  EXPECT_EQ(none.replayed, 0);
  const backend::cuda::GraphCounts counts = backend::cuda::graph_counts(graphs.backend());
  // Keys (bucket, bound) of steps 0-11, 12-14, 15-19 and 20-35: (4, 1024), (2, 1024), (2, 2048),
  // (4, 2048) (3 and 4 sequences share bucket 4), each warmed up, captured, then replayed:
  // 4 captures and 28 replays, fewer replays only if an arena buffer grew between (which drops
  // the graphs captured before).
  EXPECT_GE(counts.captured, 4);
  EXPECT_GE(counts.replayed, 20);
}

INSTANTIATE_TEST_SUITE_P(Golden, GraphReplayTest, ::testing::Values("v4/tiny_fp8", "v41/tiny_fp8"),
                         [](const auto& param_info) {
                           std::string name = param_info.param;
                           std::replace(name.begin(), name.end(), '/', '_');
                           return name;
                         });

}  // namespace
}  // namespace deepinfer
