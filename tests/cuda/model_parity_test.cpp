// The whole forward pass on the CUDA backend against the CPU backend, on every golden fixture:
// logits within 1e-3 (f32 accumulation in another order), identical greedy tokens, chunked
// prefill and decode equal to one-shot, batched rows bit-identical to solo rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>
#include <vector>

#include "core/error.h"
#include "engine/sampler.h"
#include "engine/token_history.h"
#include "gpu_fixtures.h"

namespace deepinfer {
namespace {

using gpu_testing::fixture_pair;

constexpr float kTolerance = 1e-3f;

std::vector<int32_t> prompt_of(const model::Model& model, int64_t length, int32_t salt) {
  std::vector<int32_t> ids;
  const int64_t vocab = model.vocab_size();
  for (int64_t i = 0; i < length; ++i) ids.push_back(static_cast<int32_t>(2 + (i * 37 + salt * 101) % (vocab - 2)));
  return ids;
}

// All rows of `ids` through a fresh sequence in chunks of `chunk`.
std::vector<float> run_chunked(const model::Model& model, const std::vector<int32_t>& ids, std::size_t chunk) {
  model::SequenceState sequence = model.new_sequence();
  const auto vocab = static_cast<std::size_t>(model.vocab_size());
  std::vector<float> logits(ids.size() * vocab);
  for (std::size_t begin = 0; begin < ids.size(); begin += chunk) {
    const std::size_t count = std::min(chunk, ids.size() - begin);
    model.forward(sequence, std::span(ids).subspan(begin, count), std::span(logits).subspan(begin * vocab, count * vocab));
  }
  return logits;
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float worst = 0;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    const float diff = std::abs(a[i] - b[i]);
    if (!(diff <= worst)) worst = std::isnan(diff) ? INFINITY : diff;
  }
  return worst;
}

std::vector<int32_t> greedy(const model::Model& model, const std::vector<int32_t>& prompt, int steps) {
  model::SequenceState sequence = model.new_sequence();
  const auto vocab = static_cast<std::size_t>(model.vocab_size());
  std::vector<float> logits(vocab);
  model.forward(sequence, prompt, logits, model::LogitRows::Last);
  std::vector<int32_t> out;
  for (int i = 0; i < steps; ++i) {
    const auto next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.push_back(next);
    model.forward(sequence, std::span(&next, 1), logits, model::LogitRows::Last);
  }
  return out;
}

class GpuFixtureTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GpuFixtureTest, LogitsMatchTheCpuBackend) {
  DEEPINFER_REQUIRE_GPU();
  const auto& pair = fixture_pair(GetParam());
  const std::vector<int32_t> ids = prompt_of(*pair.cpu, 48, 1);
  const std::vector<float> cpu = run_chunked(*pair.cpu, ids, ids.size());
  const std::vector<float> gpu = run_chunked(*pair.gpu, ids, ids.size());
  const float diff = max_abs_diff(cpu, gpu);
  std::printf("[ %s ] one-shot prefill of 48: max |gpu - cpu| = %.3g\n", GetParam().c_str(), diff);
  EXPECT_LE(diff, kTolerance);
}

TEST_P(GpuFixtureTest, ChunkedPrefillAndDecodeEqualOneShot) {
  DEEPINFER_REQUIRE_GPU();
  const auto& pair = fixture_pair(GetParam());
  const std::vector<int32_t> ids = prompt_of(*pair.gpu, 40, 2);
  const std::vector<float> one_shot = run_chunked(*pair.gpu, ids, ids.size());
  for (std::size_t chunk : {1, 7, 16}) {
    const std::vector<float> chunked = run_chunked(*pair.gpu, ids, chunk);
    EXPECT_EQ(0, std::memcmp(one_shot.data(), chunked.data(), one_shot.size() * sizeof(float)))
        << "chunks of " << chunk << ": max diff " << max_abs_diff(one_shot, chunked);
  }
}

// Without --batch-invariant, small calls split linear's columns (an order that follows the row
// count): chunked prefill and decode then differ from one-shot in rounding only, and every call
// stays within the CPU tolerance.
TEST_P(GpuFixtureTest, DefaultModeStaysWithinTolerance) {
  DEEPINFER_REQUIRE_GPU();
  const auto& pair = fixture_pair(GetParam());
  model::LoadOptions options;
  if (GetParam().rfind("v41/", 0) == 0)
    options.tokenizer = gpu_testing::asset_dir() + "/tokenizer/deepseek_v41_tokenizer.json";
  model::Model fast = model::Model::load(gpu_testing::test_data_dir() + "/golden/" + GetParam(), options);
  backend::attach_device(fast, backend::parse_device("cuda:0"));  // the default: may split
  const std::vector<int32_t> ids = prompt_of(*pair.cpu, 40, 2);
  const std::vector<float> cpu = run_chunked(*pair.cpu, ids, ids.size());
  for (std::size_t chunk : {1, 7, 40}) {
    const float diff = max_abs_diff(cpu, run_chunked(fast, ids, chunk));
    std::printf("[ %s ] default mode, chunks of %zu: max |gpu - cpu| = %.3g\n", GetParam().c_str(), chunk, diff);
    EXPECT_LE(diff, kTolerance) << "chunks of " << chunk;
  }
}

TEST_P(GpuFixtureTest, GreedyTokensEqualTheCpuBackend) {
  DEEPINFER_REQUIRE_GPU();
  const auto& pair = fixture_pair(GetParam());
  const std::vector<int32_t> prompt = prompt_of(*pair.cpu, 16, 3);
  EXPECT_EQ(greedy(*pair.cpu, prompt, 24), greedy(*pair.gpu, prompt, 24));
}

TEST_P(GpuFixtureTest, BatchedRowsAreBitIdenticalToSoloRows) {
  DEEPINFER_REQUIRE_GPU();
  const model::Model& model = *fixture_pair(GetParam()).gpu;
  const auto vocab = static_cast<std::size_t>(model.vocab_size());
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 4; ++i) prompts.push_back(prompt_of(model, 5 + 9 * i, 10 + i));
  std::vector<std::vector<float>> solo;
  for (const auto& prompt : prompts) {
    model::SequenceState sequence = model.new_sequence();
    std::vector<float> logits(vocab);
    model.forward(sequence, prompt, logits, model::LogitRows::Last);
    solo.push_back(logits);
  }
  std::vector<model::SequenceState> sequences;
  for (std::size_t i = 0; i < prompts.size(); ++i) sequences.push_back(model.new_sequence());
  std::vector<std::vector<float>> batched(prompts.size(), std::vector<float>(vocab));
  std::vector<model::BatchItem> items;
  for (std::size_t i = 0; i < prompts.size(); ++i)
    items.push_back({&sequences[i], prompts[i], batched[i], model::LogitRows::Last});
  model.forward_batch(items);
  for (std::size_t i = 0; i < prompts.size(); ++i)
    EXPECT_EQ(0, std::memcmp(solo[i].data(), batched[i].data(), vocab * sizeof(float))) << "prompt " << i;
}

// The backend's own draws (forward_batch_draw: the sampler on the device) against the host
// sampler on the same rows' logits: the same tokens and the same log-probabilities, bit for bit,
// over greedy, plain temperature, top-k, top-p, min-p, penalties, bias and logprobs.
TEST_P(GpuFixtureTest, DrawsOnTheDeviceEqualTheHostSampler) {
  DEEPINFER_REQUIRE_GPU();
  const model::Model& model = *fixture_pair(GetParam()).gpu;
  const auto vocab = static_cast<std::size_t>(model.vocab_size());
  const std::vector<int32_t> prompt = prompt_of(model, 12, 7);
  std::vector<engine::SamplingParams> settings(6);
  settings[0].temperature = 0.0f;
  settings[1].temperature = 1.0f;
  settings[2].temperature = 0.7f, settings[2].top_k = 5;
  settings[3].temperature = 1.3f, settings[3].top_p = 0.8f, settings[3].logprobs = 3;
  settings[4].temperature = 0.9f, settings[4].min_p = 0.05f, settings[4].repetition_penalty = 1.2f;
  settings[5].temperature = 1.0f, settings[5].frequency_penalty = 0.5f, settings[5].presence_penalty = 0.3f;
  settings[5].logit_bias = {{prompt[0], 3.0f}, {prompt[1], -2.0f}};
  settings[5].logprobs = 0;
  const std::vector<int32_t> generated = {prompt[2], prompt[3], prompt[2], 1};
  engine::TokenHistory history(std::span<const int32_t>(prompt).first(8));
  for (int32_t id : generated) history.append(id);
  std::vector<model::TokenDraw::Generated> seen;
  for (const engine::GeneratedTokenCount& g : history.generated_counts()) seen.push_back({g.token, g.count, g.in_prompt});

  for (uint64_t seed : {1ull, 42ull, 977ull}) {
    // The logits the draws read, then the same step again drawn on the device.
    model::SequenceState logits_sequence = model.new_sequence();
    std::vector<float> logits(vocab);
    model.forward(logits_sequence, prompt, logits, model::LogitRows::Last);
    model::SequenceState drawn_sequence = model.new_sequence();
    std::vector<model::TokenDraw> draws;
    for (const engine::SamplingParams& params : settings) {
      model::TokenDraw draw;
      draw.temperature = params.temperature;
      draw.top_p = params.top_p;
      draw.top_k = params.top_k;
      draw.min_p = params.min_p;
      draw.presence_penalty = params.presence_penalty;
      draw.frequency_penalty = params.frequency_penalty;
      draw.repetition_penalty = params.repetition_penalty;
      draw.seed = seed;
      draw.request_id = draws.size();
      draw.position = static_cast<int64_t>(prompt.size());
      draw.logprobs = params.logprobs ? *params.logprobs : -1;
      draw.prompt_tokens = history.prompt_tokens_distinct();
      draw.generated = seen;
      draw.logit_bias.assign(params.logit_bias.begin(), params.logit_bias.end());
      draws.push_back(draw);
    }
    std::vector<model::DrawnToken> drawn(draws.size());
    const model::BatchItem item{&drawn_sequence, prompt, {}, model::LogitRows::Last};
    model.forward_batch_draw(std::span(&item, 1), draws, drawn);
    for (std::size_t i = 0; i < settings.size(); ++i) {
      const engine::SampleResult expected =
          engine::sample(logits, settings[i], history, seed, i, static_cast<int64_t>(prompt.size()));
      EXPECT_EQ(drawn[i].token, expected.token) << "setting " << i << " seed " << seed;
      if (!settings[i].logprobs) continue;
      EXPECT_EQ(std::memcmp(&drawn[i].logprob, &expected.logprob, sizeof(float)), 0)
          << "setting " << i << ": " << drawn[i].logprob << " vs " << expected.logprob;
      ASSERT_EQ(drawn[i].top_logprobs.size(), expected.top_logprobs.size()) << "setting " << i;
      for (std::size_t j = 0; j < expected.top_logprobs.size(); ++j) {
        EXPECT_EQ(drawn[i].top_logprobs[j].first, expected.top_logprobs[j].token);
        EXPECT_EQ(drawn[i].top_logprobs[j].second, expected.top_logprobs[j].logprob);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Golden, GpuFixtureTest,
                         ::testing::Values("v4/tiny_bf16", "v4/tiny_fp8", "v4/real_vocab", "v41/tiny_bf16",
                                           "v41/tiny_fp8"),
                         [](const auto& param_info) {
                           std::string name = param_info.param;
                           std::replace(name.begin(), name.end(), '/', '_');
                           return name;
                         });

TEST(GpuBackend, NamesTheDevice) {
  DEEPINFER_REQUIRE_GPU();
  const auto& pair = fixture_pair("v4/tiny_fp8");
  EXPECT_EQ(pair.cpu->backend().name(), "cpu");
  EXPECT_EQ(pair.gpu->backend().name().rfind("cuda:0 (", 0), 0u) << pair.gpu->backend().name();
}

}  // namespace
}  // namespace deepinfer

namespace deepinfer {
namespace {

// A device too small for what is asked is a clear error at load, and costs nothing else: the
// device still serves a model attached afterwards.
TEST(GpuBackend, ActivationsThatDoNotFitAreRefusedAtLoad) {
  DEEPINFER_REQUIRE_GPU();
  const std::string dir = gpu_testing::test_data_dir() + "/golden/v4/tiny_fp8";
  model::Model model = model::Model::load(dir);
  try {
    backend::attach_device(model, backend::parse_device("cuda:0"), int64_t{1} << 32);
    FAIL() << "a 2^32-row arena was accepted";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("do not"), std::string::npos) << error.what();
  }
  EXPECT_EQ(model.backend().name(), "cpu");
  backend::attach_device(model, backend::parse_device("cuda:0"));
  model::SequenceState sequence = model.new_sequence();
  std::vector<float> logits(static_cast<std::size_t>(model.vocab_size()));
  const std::vector<int32_t> ids = {5, 6, 7};
  model.forward(sequence, ids, logits, model::LogitRows::Last);
  EXPECT_TRUE(std::all_of(logits.begin(), logits.end(), [](float v) { return std::isfinite(v); }));
}

TEST(GpuBackend, DeviceNamesAreChecked) {
  EXPECT_THROW(backend::parse_device("cuda:x"), Error);
  EXPECT_THROW(backend::parse_device("tpu"), Error);
  EXPECT_EQ(backend::parse_device("cpu").kind, backend::DeviceSpec::Kind::Cpu);
  if (!backend::cuda_device_present()) {
    EXPECT_THROW(backend::parse_device("cuda"), Error);
    return;
  }
  EXPECT_EQ(backend::parse_device("").kind, backend::DeviceSpec::Kind::Cuda);
  EXPECT_THROW(backend::parse_device("cuda:99"), Error);
}

}  // namespace
}  // namespace deepinfer
